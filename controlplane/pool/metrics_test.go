package pool

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
)

// TestPoolMetrics: a configured pool reports ready 0 while empty (so an
// alert can see it), pooled sites are counted by pool and status, and
// every template's pool shares the one label "template".
func TestPoolMetrics(t *testing.T) {
	ctx := context.Background()
	p, store, nodes := newPool(t, map[string]int{"8.2": 2})
	stock := StockKey("8.2", 10240)
	value := func(pool, status string) (float64, bool) {
		return promtest.Value(t, "sandboxd_pool_sites", map[string]string{"pool": pool, "status": status}, p)
	}
	if v, ok := value(stock, state.SiteReady); !ok || v != 0 {
		t.Fatalf("empty stock pool: ready %v present %v", v, ok)
	}
	p.fillOnce(ctx)
	if err := store.Update(func(tx *state.Tx) error {
		return tx.CreateAccount(state.Account{ID: "u", Email: "u@x.io", PersonalWorkspaceID: "ws_a"}, state.Workspace{ID: "ws_a", OwnerID: "u"})
	}); err != nil {
		t.Fatal(err)
	}
	tpl := state.Template{ID: "tpl_warm", WorkspaceID: "ws_a", UserID: "u", Slug: "warm", Status: state.TemplateReady, PHPVersion: "8.2",
		NodeID: "n1", WarmPoolSize: 1}
	if err := store.Update(func(tx *state.Tx) error {
		return tx.CreateTemplateWithJob(tpl, state.Job{ID: "job_tpl", Type: "snapshot_template"}, state.Quota{})
	}); err != nil {
		t.Fatal(err)
	}
	nodes.held = map[string][]string{"n1": {"tpl_warm"}}
	if v, ok := value("template", state.SiteReady); !ok || v != 0 {
		t.Fatalf("empty template pools: ready %v present %v", v, ok)
	}
	p.fillOnce(ctx)
	tests := []struct {
		pool, status string
		want         float64
	}{
		{stock, state.SiteCreating, 2},
		{stock, state.SiteReady, 0},
		{"template", state.SiteCreating, 1},
	}
	for _, tt := range tests {
		if v, ok := value(tt.pool, tt.status); !ok || v != tt.want {
			t.Errorf("pool %s %s: %v present %v, want %v", tt.pool, tt.status, v, ok, tt.want)
		}
	}
	if _, ok := value(TemplateKey("tpl_warm"), state.SiteCreating); ok {
		t.Error("a template's id became a label")
	}
	for _, result := range []string{"hit", "miss"} {
		if _, ok := promtest.Value(t, "sandboxd_pool_claims_total", map[string]string{"result": result}, p); !ok {
			t.Errorf("no %s series before any claim", result)
		}
	}
}
