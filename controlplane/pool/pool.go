// Package pool keeps warm pools: ready sites made ahead of demand on each
// node, per stock PHP version (the operator's --pool) and per template
// with a warmPoolSize, so a create is a claim (a rename on the node and
// one Raft write) rather than a clone. Pooled sites belong to no
// workspace (state.PoolWorkspace) and are not routed until claimed. The
// leader fills the pools in the background and hands out reservations
// so two creates never claim one site.
package pool

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/scheduler"
)

// StockKey names the pool of fresh sites of a PHP version with a disk of
// diskMB (a claim must get the disk its plan gives).
func StockKey(php string, diskMB int) string { return fmt.Sprintf("php:%s/disk:%d", php, diskMB) }

// TemplateKey names the pool of a template's sites.
func TemplateKey(templateID string) string { return "template:" + templateID }

// Nodes is what filling needs from the node registry.
type Nodes interface {
	Candidates() ([]scheduler.Node, error)
	HeldTemplates(nodeID string) []string
}

// Config wires a Pool.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	Nodes Nodes
	// SiteURL gives a site's public URL from its slug.
	SiteURL func(slug string) string
	// Stock is how many ready fresh sites of each PHP version every node
	// keeps (the operator's --pool 8.2=4); their disk is StockDiskMB.
	Stock       map[string]int
	StockDiskMB int
	// TemplateDiskMB is the disk of a template's pooled sites (the paid
	// plan's: only paid plans set a warmPoolSize).
	TemplateDiskMB int
	// PerRound bounds how many pooled sites one round starts per node;
	// zero means 2.
	PerRound int
	Now      func() time.Time
	Logger   *slog.Logger
}

// Pool fills the pools and hands out their sites.
type Pool struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	reserved map[string]bool

	claims *prometheus.CounterVec
}

// New returns a pool; Fill keeps it filled.
func New(cfg Config) *Pool {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PerRound == 0 {
		cfg.PerRound = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool{cfg: cfg, log: cfg.Logger.With("component", "pool"), reserved: map[string]bool{},
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxd_pool_claims_total",
			Help: "Creates that asked a warm pool for a site, by result (hit: a pooled site was claimed; miss: none was ready)."},
			[]string{"result"})}
	p.claims.WithLabelValues("hit")
	p.claims.WithLabelValues("miss")
	return p
}

// Take reserves a ready site of the pool key, or returns nil when none
// is ready. The caller claims it or gives it back with Release.
func (p *Pool) Take(key string) *state.Site {
	sites, err := p.cfg.Store.PooledSites()
	if err != nil {
		return nil
	}
	sort.Slice(sites, func(i, j int) bool { return sites[i].UpdatedAt.Before(sites[j].UpdatedAt) })
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range sites {
		if s.Pool == key && s.Status == state.SiteReady && !p.reserved[s.ID] && p.serving(s.NodeID) {
			p.reserved[s.ID] = true
			return s
		}
	}
	return nil
}

// serving reports whether a node takes new sites: a draining node's warm
// sites wait there unclaimed (they go when it is retired).
func (p *Pool) serving(nodeID string) bool {
	n, err := p.cfg.Store.Node(nodeID)
	return err == nil && (n == nil || (n.Status == state.NodeReady && n.Drain == nil))
}

// Release ends a reservation.
func (p *Pool) Release(siteID string) {
	p.mu.Lock()
	delete(p.reserved, siteID)
	p.mu.Unlock()
}

// Count records a claim's outcome for the metrics.
func (p *Pool) Count(hit bool) {
	if hit {
		p.claims.WithLabelValues("hit").Inc()
	} else {
		p.claims.WithLabelValues("miss").Inc()
	}
}

// Discard queues the removal of a pooled site that cannot be handed out
// (a rename that failed, a claim refused after it).
func (p *Pool) Discard(ctx context.Context, s *state.Site) {
	now := p.now()
	j, err := jobs.New(jobspec.DeleteSite, state.PoolWorkspace, s.ID, nil, now)
	if err != nil {
		return
	}
	_, _ = p.cfg.Raft.Apply(ctx, fsm.UpdateSiteWithJob{Update: state.SiteUpdate{ID: s.ID, Status: state.SiteDeleting, At: now}, Job: j})
}

func (p *Pool) now() time.Time { return p.cfg.Now().UTC().Truncate(time.Millisecond) }

// Fill tops the pools up every interval until ctx ends. It is a leader
// hook (only the leader writes, and only it knows what it reserved).
func (p *Pool) Fill(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p.fillOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// want is the pools a node keeps: key → size, with what makes a site of
// each.
type want struct {
	size     int
	php      string
	template string
	build    string // the template's Build (empty: its id)
	diskMB   int
}

// SetStock changes the stock pool sizes (PHP version → sites per node);
// the next fill applies them.
func (p *Pool) SetStock(sizes map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.Stock = sizes
}

func (p *Pool) wanted(node scheduler.Node, templates []*state.Template) map[string]want {
	out := map[string]want{}
	p.mu.Lock()
	stock := p.cfg.Stock
	p.mu.Unlock()
	for php, n := range stock {
		if n > 0 && slices.Contains(node.Images, php) {
			out[StockKey(php, p.cfg.StockDiskMB)] = want{size: n, php: php, diskMB: p.cfg.StockDiskMB}
		}
	}
	held := p.cfg.Nodes.HeldTemplates(node.ID)
	for _, t := range templates {
		if t.WarmPoolSize > 0 && t.Status == state.TemplateReady && (t.NodeID == node.ID || slices.Contains(held, t.BuildID())) {
			// Keyed by build: a rebake's new build fills a pool of its
			// own, and the old build's pooled sites are discarded.
			out[TemplateKey(t.BuildID())] = want{size: t.WarmPoolSize, php: t.PHPVersion, template: t.ID, build: t.Build,
				diskMB: p.cfg.TemplateDiskMB}
		}
	}
	return out
}

func (p *Pool) fillOnce(ctx context.Context) {
	nodes, err := p.cfg.Nodes.Candidates()
	if err != nil {
		return
	}
	pooled, err := p.cfg.Store.PooledSites()
	if err != nil {
		return
	}
	templates, err := p.cfg.Store.AllTemplates()
	if err != nil {
		return
	}
	byNode := map[string]map[string][]*state.Site{}
	for _, s := range pooled {
		if byNode[s.NodeID] == nil {
			byNode[s.NodeID] = map[string][]*state.Site{}
		}
		byNode[s.NodeID][s.Pool] = append(byNode[s.NodeID][s.Pool], s)
	}
	for _, n := range nodes {
		if !n.Ready {
			continue // a down node's pool waits for it (nothing there can be changed)
		}
		have := byNode[n.ID]
		want := p.wanted(n, templates)
		started := 0
		for key, sites := range have {
			live := 0
			for _, s := range sites {
				switch {
				case s.Status == state.SiteFailed:
					p.Discard(ctx, s)
				case s.Status == state.SiteDeleting:
				case live >= want[key].size && s.Status == state.SiteReady && !p.isReserved(s.ID):
					p.Discard(ctx, s) // a pool that shrank or went away
				default:
					live++
				}
			}
			if w, ok := want[key]; ok {
				w.size -= live
				want[key] = w
			}
		}
		keys := make([]string, 0, len(want))
		for k := range want {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, key := range keys {
			w := want[key]
			for ; w.size > 0 && started < p.cfg.PerRound; w.size-- {
				if !fits(n, w.php) {
					break
				}
				if err := p.start(ctx, n.ID, key, w); err != nil {
					p.log.Warn("pooled site", "node_id", n.ID, "pool", key, "err", err)
					break
				}
				n.Used.Sites++
				n.Used.MemoryMB += siteMemoryMB
				started++
			}
		}
	}
}

// siteMemoryMB is what placement reserves for a site (as for any site).
const siteMemoryMB = 256

func fits(n scheduler.Node, php string) bool {
	_, err := scheduler.Place([]scheduler.Node{n}, scheduler.Request{PHPVersion: php, Needs: scheduler.Resources{MemoryMB: siteMemoryMB}}, scheduler.Spread)
	return err == nil
}

func (p *Pool) isReserved(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reserved[id]
}

// start queues one pooled site: a site of no workspace, its slug and URL
// its own until a claim renames it.
func (p *Pool) start(ctx context.Context, nodeID, key string, w want) error {
	now := p.now()
	slug := "pool-" + strings.ToLower(ids.Random(5))
	site := state.Site{ID: ids.New(ids.Site), WorkspaceID: state.PoolWorkspace, UserID: state.PoolWorkspace,
		CreatedByUserID: state.PoolWorkspace, Name: "WordPress sandbox", Slug: slug, Status: state.SiteCreating,
		URL: p.cfg.SiteURL(slug), PHPVersion: w.php, NodeID: nodeID, TemplateID: w.template, TemplateBuild: w.build, Pool: key,
		CreatedAt: now, UpdatedAt: now}
	job, err := jobs.New(jobspec.CreateSite, state.PoolWorkspace, site.ID, jobspec.CreatePayload{AdminUser: "admin",
		AdminEmail: "admin@example.com", DiskMB: w.diskMB, TemplateID: site.TemplateBuildID(), Pooled: true}, now)
	if err != nil {
		return err
	}
	_, err = p.cfg.Raft.Apply(ctx, fsm.CreateSiteWithJob{Site: site, Job: job})
	return err
}

// Describe and Collect make the pool a Prometheus collector: its sizes by
// pool and status (read from the state on each scrape) and its claims.
func (p *Pool) Describe(ch chan<- *prometheus.Desc) {
	ch <- sitesDesc
	p.claims.Describe(ch)
}

var sitesDesc = prometheus.NewDesc("sandboxd_pool_sites",
	"Pooled sites waiting to be claimed, by pool (a stock pool's key, or \"template\" for all templates' pools together) and status.",
	[]string{"pool", "status"}, nil)

// templatePoolsLabel is the one pool label of every template's pool:
// templates are made by tenants, so a label per template would grow
// without bound.
const templatePoolsLabel = "template"

// metricPool is a pool key as a metric label.
func metricPool(key string) string {
	if strings.HasPrefix(key, TemplateKey("")) {
		return templatePoolsLabel
	}
	return key
}

// Collect reports the pools' sizes and claims. Every configured pool has a
// ready series, zero when it is empty, so an alert can see it empty.
func (p *Pool) Collect(ch chan<- prometheus.Metric) {
	counts := map[[2]string]int{}
	p.mu.Lock()
	for php, n := range p.cfg.Stock {
		if n > 0 {
			counts[[2]string{StockKey(php, p.cfg.StockDiskMB), state.SiteReady}] = 0
		}
	}
	p.mu.Unlock()
	if templates, err := p.cfg.Store.AllTemplates(); err == nil {
		for _, t := range templates {
			if t.WarmPoolSize > 0 && t.Status == state.TemplateReady {
				counts[[2]string{templatePoolsLabel, state.SiteReady}] = 0
				break
			}
		}
	}
	if sites, err := p.cfg.Store.PooledSites(); err == nil {
		for _, s := range sites {
			counts[[2]string{metricPool(s.Pool), s.Status}]++
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(sitesDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	p.claims.Collect(ch)
}
