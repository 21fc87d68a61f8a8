package certstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/publicsuffix"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ids"
	edgev1 "github.com/sandboxd/sandboxd/protocol/edge/v1"
)

// notServed is the budget name of an order for a name that is no
// active custom domain or ready site's sandbox host.
const notServed = "not_served"

// OrderCert counts an order against the budgets before the edge places
// it with the CA. The state decides (fsm.OrderCert), so concurrent orders
// from several edges never overspend; a refusal the state already
// records (on the domain, or for a sandbox host nothing) is answered
// without a write, so handshakes for a refused name cost no log entries.
func (s *Service) OrderCert(ctx context.Context, req *connect.Request[edgev1.OrderCertRequest]) (*connect.Response[edgev1.OrderCertResponse], error) {
	name := strings.ToLower(strings.TrimSuffix(req.Msg.Name, "."))
	if err := checkKey(name); err != nil || strings.Contains(name, "/") {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%q is no hostname", req.Msg.Name))
	}
	workspace, ok, err := s.workspaceOf(name)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if !ok {
		s.metrics.count(notServed)
		return connect.NewResponse(&edgev1.OrderCertResponse{Budget: notServed,
			Reason: name + " is no active custom domain or ready site of this service"}), nil
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	o := state.CertOrder{ID: fmt.Sprintf("%019d-%s", now.UnixNano(), ids.Random(6)), Name: name, WorkspaceID: workspace,
		RegisteredDomain: RegisteredDomain(name), Renewal: req.Msg.Renewal, At: now}
	if ws, err := s.store.Workspace(workspace); err == nil && ws != nil {
		o.OwnerID = ws.OwnerID
	}
	block, err := s.store.DecideCertOrder(o, s.budget)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if block == nil || !s.recorded(name, block) {
		res, err := s.raft.Apply(ctx, fsm.OrderCert{Order: o, Budget: s.budget})
		if err != nil {
			if errors.Is(err, state.ErrInvalid) {
				return nil, connect.NewError(connect.CodeInvalidArgument, err)
			}
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		block, _ = res.(*state.CertBlock)
	}
	if block != nil {
		s.metrics.count(block.Budget)
		s.log.Info("certificate order refused", "name", name, "workspace_id", workspace, "budget", block.Budget, "until", block.Until)
		return connect.NewResponse(&edgev1.OrderCertResponse{Budget: block.Budget, Reason: block.Describe(),
			RetryAfterUnixMs: block.Until.UnixMilli()}), nil
	}
	if o.Renewal {
		s.metrics.count("renewal")
	} else {
		s.metrics.count("allowed")
	}
	return connect.NewResponse(&edgev1.OrderCertResponse{Allowed: true}), nil
}

// recorded reports whether the state already holds block as the name's
// outcome: the active domain of the name says so, or the name is a
// sandbox host, whose refusals are only answered.
func (s *Service) recorded(name string, block *state.CertBlock) bool {
	d, err := s.store.DomainByHostname(name)
	if err != nil {
		return false
	}
	return d == nil || (d.CertBlocked != nil && *d.CertBlocked == *block)
}

// workspaceOf is the workspace whose name it is: an active custom
// domain's, or the ready site's whose sandbox host it is. ok is false for
// any other name: it gets no certificate.
func (s *Service) workspaceOf(name string) (string, bool, error) {
	d, err := s.store.DomainByHostname(name)
	if err != nil {
		return "", false, err
	}
	if d != nil {
		return d.WorkspaceID, d.Serving(), nil
	}
	slug, _, _ := strings.Cut(name, ".")
	site, err := s.store.SiteBySlug(slug)
	if err != nil || site == nil || site.Status != state.SiteReady {
		return "", false, err
	}
	u, err := url.Parse(site.URL)
	if err != nil || !strings.EqualFold(u.Hostname(), name) {
		return "", false, nil
	}
	return site.WorkspaceID, true, nil
}

// DefaultBudget keeps the service below Let's Encrypt's limits (300 new
// orders per account per 3 h, 50 certificates per registered domain per
// week) with room to spare, one workspace to a small share of it, and a
// name to one order a day.
func DefaultBudget() state.CertBudget {
	return state.CertBudget{Cluster: 250, Workspace: 20, Window: 3 * time.Hour,
		RegisteredDomain: 40, RegisteredDomainWindow: 7 * 24 * time.Hour, Cooldown: 24 * time.Hour}
}

// RegisteredDomain is name's registrable domain (eTLD+1 by the public
// suffix list), what a CA's per-domain limits count; a name that has
// none (a public suffix itself, a single label) counts as itself.
func RegisteredDomain(name string) string {
	d, err := publicsuffix.EffectiveTLDPlusOne(name)
	if err != nil {
		return name
	}
	return d
}

// orderMetrics count the decisions on certificate orders.
type orderMetrics struct{ orders *prometheus.CounterVec }

func newOrderMetrics() *orderMetrics {
	m := &orderMetrics{orders: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sandboxd", Name: "acme_orders_total",
		Help: "Certificate orders edges asked to place with the ACME CA, by decision: allowed, renewal, or the budget that refused it " +
			"(cluster, workspace, registered_domain, cooldown; not_served for a name that is no active domain or ready site). Counted by the leader.",
	}, []string{"decision"})}
	for _, d := range []string{"allowed", "renewal", state.BudgetCluster, state.BudgetWorkspace, state.BudgetRegisteredDomain,
		state.BudgetCooldown, notServed} {
		m.orders.WithLabelValues(d)
	}
	return m
}

func (m *orderMetrics) count(decision string) { m.orders.WithLabelValues(decision).Inc() }

var (
	descInWindow = prometheus.NewDesc("sandboxd_acme_orders_in_window",
		"Certificate orders (renewals included) in the cluster budget's current window, from the replicated state.", nil, nil)
	descBudget = prometheus.NewDesc("sandboxd_acme_order_budget",
		"The operator's certificate order budgets by budget (cluster and workspace per --acme-orders-window, registered_domain "+
			"per --acme-orders-registered-domain-window); 0 is unbounded.", []string{"budget"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Service) Describe(ch chan<- *prometheus.Desc) {
	s.metrics.orders.Describe(ch)
	ch <- descInWindow
	ch <- descBudget
}

// Collect implements prometheus.Collector: the decisions counted here,
// the orders in the cluster window (every server's replica says the
// same) and the budgets.
func (s *Service) Collect(ch chan<- prometheus.Metric) {
	s.metrics.orders.Collect(ch)
	if orders, err := s.store.CertOrders(); err == nil {
		since, n := s.now().Add(-s.budget.Window), 0
		for _, o := range orders {
			if o.At.After(since) {
				n++
			}
		}
		ch <- prometheus.MustNewConstMetric(descInWindow, prometheus.GaugeValue, float64(n))
	}
	for budget, n := range map[string]int{state.BudgetCluster: s.budget.Cluster, state.BudgetWorkspace: s.budget.Workspace,
		state.BudgetRegisteredDomain: s.budget.RegisteredDomain} {
		ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, float64(n), budget)
	}
}
