package state

import (
	"errors"
	"fmt"
	"slices"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// CertOrder is one certificate order the control plane let an edge place
// with the ACME CA: what the order budgets count. Every edge orders from
// the same ACME account, so the CA's limits are the whole service's, and
// one tenant must not spend them for everyone.
type CertOrder struct {
	// ID is stamped by the handler and sorts by time.
	ID string `json:"id"`
	// Name is the hostname the certificate is for.
	Name        string `json:"name"`
	WorkspaceID string `json:"workspaceId"`
	// OwnerID is the workspace owner's account: the workspace budget
	// counts the orders of all the workspaces one account owns together,
	// so making workspaces does not multiply it.
	OwnerID string `json:"ownerId,omitempty"`
	// RegisteredDomain is Name's registrable domain (eTLD+1), what the
	// CA's per-domain limit counts.
	RegisteredDomain string `json:"registeredDomain"`
	// Renewal orders replace a certificate the storage holds: they count
	// toward the cluster's orders and are refused only past
	// RenewalCeiling (the edge says which orders renew, on a handshake a
	// tenant can time, so even they have a ceiling).
	Renewal bool      `json:"renewal,omitempty"`
	At      time.Time `json:"at"`
}

// CertBudget bounds certificate orders below the CA's own limits (Let's
// Encrypt: 300 new orders per account per 3 h, 50 certificates per
// registered domain per week). A zero count leaves that budget unbounded.
type CertBudget struct {
	// Cluster bounds every order (renewals included) per Window.
	Cluster int `json:"cluster"`
	// Workspace bounds the new orders of one account's workspaces per
	// Window (orders count by the workspace owner).
	Workspace int           `json:"workspace"`
	Window    time.Duration `json:"window"`
	// RegisteredDomain bounds new orders under one registered domain per
	// RegisteredDomainWindow.
	RegisteredDomain       int           `json:"registeredDomain"`
	RegisteredDomainWindow time.Duration `json:"registeredDomainWindow"`
	// Cooldown is how long after an order the same name may not order
	// again (a name disconnected and connected again, or whose order
	// failed); a certificate in storage is reused without an order.
	Cooldown time.Duration `json:"cooldown"`
}

// Validate refuses negative budgets and a bounded count without a window.
func (b CertBudget) Validate() error {
	switch {
	case b.Cluster < 0 || b.Workspace < 0 || b.RegisteredDomain < 0 || b.Window < 0 || b.RegisteredDomainWindow < 0 || b.Cooldown < 0:
		return errors.New("certificate order budgets cannot be negative")
	case (b.Cluster > 0 || b.Workspace > 0) && b.Window == 0:
		return errors.New("the cluster and workspace certificate order budgets need a window")
	case b.RegisteredDomain > 0 && b.RegisteredDomainWindow == 0:
		return errors.New("the registered domain certificate order budget needs a window")
	}
	return nil
}

// RenewalCeiling is the most orders, renewals included, the cluster
// places per Window: a fifth above Cluster (with the defaults, 300 per
// 3 h: Let's Encrypt's own limit), so renewals have room that new
// orders cannot take, and no mix of them passes the CA's limit.
func (b CertBudget) RenewalCeiling() int { return b.Cluster + b.Cluster/5 }

// keep is how long an order matters to some budget.
func (b CertBudget) keep() time.Duration { return max(b.Window, b.RegisteredDomainWindow, b.Cooldown) }

// The budgets an order can find spent.
const (
	BudgetCluster          = "cluster"
	BudgetWorkspace        = "workspace"
	BudgetRegisteredDomain = "registered_domain"
	BudgetCooldown         = "cooldown"
)

// CertBlock is a refused order: the budget that is spent, its size and
// window, and when it refills (the oldest order it counts leaves the
// window, or the name's cool-down ends).
type CertBlock struct {
	Budget string        `json:"budget"`
	Limit  int           `json:"limit,omitempty"`
	Window time.Duration `json:"window"`
	Until  time.Time     `json:"until"`
}

// MaxCertOrders bounds the orders kept whatever the budgets say (a zero
// budget is unbounded): past it every new order is refused until old
// ones leave the longest window.
const MaxCertOrders = 50_000

// CertOrders lists the orders kept, oldest first.
func (s *Store) CertOrders() ([]*CertOrder, error) {
	return all[CertOrder](s.read(), tableCertOrders, "id")
}

// DecideCertOrder is what OrderCert would answer now, without writing:
// the block, or nil when o may be placed.
func (s *Store) DecideCertOrder(o CertOrder, b CertBudget) (*CertBlock, error) {
	orders, err := all[CertOrder](s.read(), tableCertOrders, "id")
	if err != nil {
		return nil, err
	}
	return decideCertOrder(orders, o, b), nil
}

// decideCertOrder applies b to o given the orders kept: the first budget
// o finds spent, or nil. Renewals are never refused.
func decideCertOrder(orders []*CertOrder, o CertOrder, b CertBudget) *CertBlock {
	var cluster, workspace, domain []time.Time
	var lastOfName, oldest time.Time
	recent := 0
	for _, p := range orders {
		if !p.At.After(o.At.Add(-b.keep())) {
			continue
		}
		if recent++; oldest.IsZero() || p.At.Before(oldest) {
			oldest = p.At
		}
		if p.At.After(o.At.Add(-b.Window)) {
			cluster = append(cluster, p.At)
			if !p.Renewal && sameTenant(p, &o) {
				workspace = append(workspace, p.At)
			}
		}
		if !p.Renewal && p.RegisteredDomain == o.RegisteredDomain && p.At.After(o.At.Add(-b.RegisteredDomainWindow)) {
			domain = append(domain, p.At)
		}
		if p.Name == o.Name && p.At.After(o.At.Add(-b.Cooldown)) && p.At.After(lastOfName) {
			lastOfName = p.At
		}
	}
	if recent >= MaxCertOrders {
		return &CertBlock{Budget: BudgetCluster, Limit: MaxCertOrders, Window: b.keep(), Until: oldest.Add(b.keep())}
	}
	if o.Renewal {
		if ceiling := b.RenewalCeiling(); b.Cluster > 0 && len(cluster) >= ceiling {
			slices.SortFunc(cluster, func(x, y time.Time) int { return x.Compare(y) })
			return &CertBlock{Budget: BudgetCluster, Limit: ceiling, Window: b.Window, Until: cluster[len(cluster)-ceiling].Add(b.Window)}
		}
		return nil
	}
	if b.Cooldown > 0 && !lastOfName.IsZero() {
		return &CertBlock{Budget: BudgetCooldown, Window: b.Cooldown, Until: lastOfName.Add(b.Cooldown)}
	}
	for _, c := range []struct {
		budget string
		limit  int
		window time.Duration
		ats    []time.Time
	}{
		{BudgetCluster, b.Cluster, b.Window, cluster},
		{BudgetWorkspace, b.Workspace, b.Window, workspace},
		{BudgetRegisteredDomain, b.RegisteredDomain, b.RegisteredDomainWindow, domain},
	} {
		if c.limit <= 0 || len(c.ats) < c.limit {
			continue
		}
		// One slot frees when the order len-limit+1 from the newest
		// leaves the window.
		slices.SortFunc(c.ats, func(x, y time.Time) int { return x.Compare(y) })
		return &CertBlock{Budget: c.budget, Limit: c.limit, Window: c.window, Until: c.ats[len(c.ats)-c.limit].Add(c.window)}
	}
	return nil
}

// sameTenant reports whether two orders count against one workspace
// budget: the same owner account (orders recorded before owners were,
// by workspace).
func sameTenant(p, o *CertOrder) bool {
	if p.OwnerID != "" && o.OwnerID != "" {
		return p.OwnerID == o.OwnerID
	}
	return p.WorkspaceID == o.WorkspaceID
}

// OrderCert counts o against b at o.At. A spent budget refuses it (the
// block is returned and o is not counted); otherwise o is recorded and
// the answer is nil. Either way the active custom domain named o.Name
// records the outcome (Domain.CertBlocked set or cleared), and orders
// older than every window are forgotten.
func (t *Tx) OrderCert(o CertOrder, b CertBudget) (*CertBlock, error) {
	var block *CertBlock
	err := t.run(func(tx *memdb.Txn) error {
		if o.ID == "" || o.Name == "" || o.At.IsZero() {
			return fmt.Errorf("%w: a certificate order needs an id, a name and a time", ErrInvalid)
		}
		orders, err := all[CertOrder](tx, tableCertOrders, "id")
		if err != nil {
			return err
		}
		kept := orders[:0:0]
		for _, p := range orders {
			if p.At.After(o.At.Add(-b.keep())) {
				kept = append(kept, p)
				continue
			}
			if err := remove(tx, tableCertOrders, p); err != nil {
				return err
			}
		}
		block = decideCertOrder(kept, o, b)
		if block == nil {
			if err := insert(tx, tableCertOrders, &o); err != nil {
				return err
			}
		}
		d, err := first[Domain](tx, tableDomains, "hostname", o.Name)
		if err != nil || d == nil || o.Renewal || sameBlock(d.CertBlocked, block) {
			return err
		}
		next := *d
		next.CertBlocked = block
		return insert(tx, tableDomains, &next)
	})
	return block, err
}

func sameBlock(a, b *CertBlock) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Describe says, in a customer's words, that no certificate is ordered
// for the name before b.Until and why.
func (b *CertBlock) Describe() string {
	var why string
	switch b.Budget {
	case BudgetCooldown:
		span := humanWindow(b.Window)
		switch span {
		case "day":
			span = "a day"
		case "hour":
			span = "an hour"
		}
		why = fmt.Sprintf("this name already ordered a certificate less than %s ago (a name connected again waits out a cool-down)", span)
	case BudgetWorkspace:
		why = fmt.Sprintf("this workspace's certificate budget (%d orders per %s) is spent", b.Limit, humanWindow(b.Window))
	case BudgetRegisteredDomain:
		why = fmt.Sprintf("the certificate budget of this registered domain (%d orders per %s) is spent", b.Limit, humanWindow(b.Window))
	default:
		why = fmt.Sprintf("the service's certificate budget (%d orders per %s for every customer) is spent", b.Limit, humanWindow(b.Window))
	}
	return fmt.Sprintf("no HTTPS certificate yet: %s; it refills at %s, and the first HTTPS visit after that orders one",
		why, b.Until.UTC().Format(time.RFC3339))
}

// humanWindow writes a window in whole days or hours when it is one.
func humanWindow(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		if d == 24*time.Hour {
			return "day"
		}
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		if d == time.Hour {
			return "hour"
		}
		return fmt.Sprintf("%d hours", d/time.Hour)
	}
	return d.String()
}
