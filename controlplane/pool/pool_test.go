package pool

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/scheduler"
)

type fakeNodes struct {
	nodes []scheduler.Node
	held  map[string][]string
}

func (f *fakeNodes) Candidates() ([]scheduler.Node, error) { return f.nodes, nil }
func (f *fakeNodes) HeldTemplates(id string) []string      { return f.held[id] }

func newPool(t *testing.T, stock map[string]int) (*Pool, *state.Store, *fakeNodes) {
	t.Helper()
	store := state.NewStore()
	nodes := &fakeNodes{nodes: []scheduler.Node{{ID: "n1", Ready: true, Images: []string{"8.2"},
		Capacity: scheduler.Resources{MemoryMB: 1 << 20, Sites: 100}}}}
	p := New(Config{Store: store, Raft: fsm.NewLocal(store), Nodes: nodes, Stock: stock, StockDiskMB: 10240, TemplateDiskMB: 10240,
		SiteURL: func(slug string) string { return "http://" + slug + ".test" }, Now: func() time.Time { return time.Unix(1700000000, 0) }})
	return p, store, nodes
}

func byStatus(t *testing.T, store *state.Store, key string) map[string]int {
	t.Helper()
	sites, err := store.PooledSites()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, s := range sites {
		if s.Pool == key {
			out[s.Status]++
		}
	}
	return out
}

func markReady(t *testing.T, store *state.Store) {
	t.Helper()
	sites, _ := store.PooledSites()
	for _, s := range sites {
		if s.Status == state.SiteCreating {
			if _, err := fsm.NewLocal(store).Apply(context.Background(), fsm.UpdateSite{Update: state.SiteUpdate{ID: s.ID, Status: state.SiteReady}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestFill: a node keeps its stock pool at size, at most PerRound new
// sites a round; pooled sites belong to no workspace and carry their
// create job; a shrunk pool and failed sites are discarded; a down node
// is left alone.
func TestFill(t *testing.T) {
	ctx := context.Background()
	p, store, nodes := newPool(t, map[string]int{"8.2": 3, "7.4": 2})
	key := StockKey("8.2", 10240)
	p.fillOnce(ctx)
	if got := byStatus(t, store, key); got[state.SiteCreating] != 2 {
		t.Fatalf("first round: %v (PerRound is 2)", got)
	}
	if got := byStatus(t, store, StockKey("7.4", 10240)); len(got) != 0 {
		t.Fatalf("a pool for a PHP version the node has no image of: %v", got)
	}
	p.fillOnce(ctx)
	if got := byStatus(t, store, key); got[state.SiteCreating] != 3 {
		t.Fatalf("second round: %v", got)
	}
	sites, _ := store.PooledSites()
	for _, s := range sites {
		job := findJob(t, store, s.ID)
		var pl jobspec.CreatePayload
		if s.WorkspaceID != state.PoolWorkspace || s.UserID != state.PoolWorkspace || s.NodeID != "n1" || job.WorkspaceID != state.PoolWorkspace ||
			json.Unmarshal(job.Payload, &pl) != nil || pl.DiskMB != 10240 {
			t.Fatalf("pooled site %+v job %+v", s, job)
		}
	}
	if ws, _ := store.SitesOf("ws_any"); len(ws) != 0 {
		t.Fatal("pooled sites in a workspace")
	}
	markReady(t, store)
	p.fillOnce(ctx)
	if got := byStatus(t, store, key); got[state.SiteReady] != 3 || len(got) != 1 {
		t.Fatalf("full pool: %v", got)
	}

	// Reservations: each ready site once.
	a, b, c := p.Take(key), p.Take(key), p.Take(key)
	if a == nil || b == nil || c == nil || a.ID == b.ID || b.ID == c.ID || p.Take(key) != nil {
		t.Fatal("takes")
	}
	p.Release(a.ID)
	if again := p.Take(key); again == nil || again.ID != a.ID {
		t.Fatal("a released site is not handed out again")
	}
	for _, s := range []*state.Site{a, b, c} {
		p.Release(s.ID)
	}

	// A failed pooled site goes, and is replaced.
	if _, err := fsm.NewLocal(store).Apply(ctx, fsm.UpdateSite{Update: state.SiteUpdate{ID: a.ID, Status: state.SiteFailed}}); err != nil {
		t.Fatal(err)
	}
	p.fillOnce(ctx)
	if got := byStatus(t, store, key); got[state.SiteDeleting] != 1 || got[state.SiteReady] != 2 || got[state.SiteCreating] != 1 {
		t.Fatalf("after a failure: %v", got)
	}

	// A pool that shrinks gives back its ready sites; a reserved one stays.
	p.SetStock(map[string]int{})
	reserved := p.Take(key)
	p.fillOnce(ctx)
	if got := byStatus(t, store, key); got[state.SiteReady] != 1 {
		t.Fatalf("after the pool went: %v", got)
	}
	if s, _ := store.Site(reserved.ID); s.Status != state.SiteReady {
		t.Fatalf("a reserved site was discarded: %+v", s)
	}

	// A down node is left alone.
	nodes.nodes[0].Ready = false
	p.SetStock(map[string]int{"8.2": 9})
	before, _ := store.PooledSites()
	p.fillOnce(ctx)
	if after, _ := store.PooledSites(); len(after) != len(before) {
		t.Fatalf("a down node's pool changed: %d → %d", len(before), len(after))
	}
}

// TestTemplatePools: a ready template with a warmPoolSize has that many
// sites on the node that holds it; a template without one has none.
func TestTemplatePools(t *testing.T) {
	ctx := context.Background()
	p, store, nodes := newPool(t, nil)
	if err := store.Update(func(tx *state.Tx) error {
		return tx.CreateAccount(state.Account{ID: "u", Email: "u@x.io", PersonalWorkspaceID: "ws_a"}, state.Workspace{ID: "ws_a", OwnerID: "u"})
	}); err != nil {
		t.Fatal(err)
	}
	for _, tpl := range []state.Template{
		{ID: "tpl_warm", WorkspaceID: "ws_a", UserID: "u", Slug: "warm", Status: state.TemplateReady, PHPVersion: "8.2", NodeID: "n2", WarmPoolSize: 1},
		{ID: "tpl_cold", WorkspaceID: "ws_a", UserID: "u", Slug: "cold", Status: state.TemplateReady, PHPVersion: "8.2", NodeID: "n1"},
	} {
		if err := store.Update(func(tx *state.Tx) error {
			return tx.CreateTemplateWithJob(tpl, state.Job{ID: "job_" + tpl.ID, Type: "snapshot_template"}, state.Quota{})
		}); err != nil {
			t.Fatal(err)
		}
	}
	p.fillOnce(ctx)
	if got := byStatus(t, store, TemplateKey("tpl_warm")); len(got) != 0 {
		t.Fatalf("a pool on a node without the template: %v", got)
	}
	nodes.held = map[string][]string{"n1": {"tpl_warm"}}
	p.fillOnce(ctx)
	sites, _ := store.PooledSites()
	if len(sites) != 1 || sites[0].TemplateID != "tpl_warm" || sites[0].Pool != TemplateKey("tpl_warm") {
		t.Fatalf("template pool: %+v", sites)
	}
}

func findJob(t *testing.T, store *state.Store, siteID string) *state.Job {
	t.Helper()
	js, _, err := store.UnfinishedJobs()
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js {
		if j.SiteID == siteID {
			return j
		}
	}
	t.Fatalf("no job for %s", siteID)
	return nil
}
