package nodes

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/scheduler"
)

// candidatesFromScratch is Candidates read afresh from the store, node
// by node: what the cached Candidates must always answer.
func candidatesFromScratch(store *state.Store) ([]scheduler.Node, error) {
	nodes, err := store.Nodes()
	if err != nil {
		return nil, err
	}
	out := make([]scheduler.Node, 0, len(nodes))
	for _, n := range nodes {
		sites, err := store.SitesOnNode(n.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, scheduler.Node{ID: n.ID, Ready: n.Status == state.NodeReady, Images: n.PHPVersions, Labels: n.Labels,
			Capacity: scheduler.Resources{MemoryMB: n.MemoryMB, CPUMilli: n.CPUMilli, Sites: n.MaxSites},
			Used:     scheduler.Resources{MemoryMB: int64(len(sites)) * SiteMemoryMB, Sites: len(sites)}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// TestCandidatesFollowTheStore: through random placements, status
// changes, deletions, registrations and a restore, Candidates answers
// what a fresh read of every node's sites would.
func TestCandidatesFollowTheStore(t *testing.T) {
	store := state.NewStore()
	r := New(Config{Store: store})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(store.Update(func(tx *state.Tx) error {
		return tx.CreateAccount(state.Account{ID: "usr_1", Email: "a@x.io", Plan: state.PlanPaid, CreatedAt: at},
			state.Workspace{ID: "ws_1", Name: "W", CreatedAt: at})
	}))
	check := func(step string) {
		t.Helper()
		got, err := r.Candidates()
		must(err)
		want, err := candidatesFromScratch(store)
		must(err)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: Candidates\n%+v\nfrom scratch\n%+v", step, got, want)
		}
	}
	check("empty")
	rng := rand.New(rand.NewPCG(1, 2))
	node := func() string { return fmt.Sprintf("n%d", rng.IntN(12)) }
	var sites []string
	for i := 0; i < 600; i++ {
		switch op := rng.IntN(10); {
		case op < 5:
			id := fmt.Sprintf("site%d", i)
			s := state.Site{ID: id, NodeID: node(), Status: state.SiteCreating, WorkspaceID: "ws_1", UserID: "usr_1", Slug: id, CreatedAt: at}
			must(store.Update(func(tx *state.Tx) error { return tx.CreateSite(s, state.Quota{}) }))
			sites = append(sites, id)
		case op < 6 && len(sites) > 0:
			k := rng.IntN(len(sites))
			must(store.Update(func(tx *state.Tx) error { return tx.DeleteSite(sites[k], at) }))
			sites = append(sites[:k], sites[k+1:]...)
		case op < 7 && len(sites) > 0:
			id := sites[rng.IntN(len(sites))]
			must(store.Update(func(tx *state.Tx) error {
				_, err := tx.UpdateSite(state.SiteUpdate{ID: id, Status: state.SiteReady, At: at})
				return err
			}))
		case op < 8:
			n := state.Node{ID: node(), PHPVersions: []string{"8.2"}, MemoryMB: int64(rng.IntN(8192)), MaxSites: rng.IntN(50), UpdatedAt: at}
			must(store.Update(func(tx *state.Tx) error { return tx.UpsertNode(n) }))
		case op < 9:
			id, status := node(), state.NodeDown
			if rng.IntN(2) == 0 {
				status = state.NodeReady
			}
			if n, _ := store.Node(id); n != nil {
				must(store.Update(func(tx *state.Tx) error { return tx.SetNodeStatus(id, status, at) }))
			}
		}
		if i == 300 {
			var snap bytes.Buffer
			if _, err := store.Snapshot().WriteTo(&snap); err != nil {
				t.Fatal(err)
			}
			must(store.Update(func(tx *state.Tx) error { return tx.DeleteSite(sites[0], at) }))
			must(store.Restore(&snap))
			check("after a restore")
		}
		// Often several changes land between two placements.
		if rng.IntN(3) == 0 {
			check(fmt.Sprintf("step %d", i))
		}
	}
}

// BenchmarkCandidates is one placement's view of 1,000 nodes holding
// 20,000 sites, each iteration after a site was placed on one of them
// (the commit of the previous placement, outside the timing): read node
// by node from the store (the baseline) and from the kept counts.
func BenchmarkCandidates(b *testing.B) {
	const nodes, sites = 1000, 20000
	store := state.NewStore()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	err := store.Update(func(tx *state.Tx) error {
		if err := tx.CreateAccount(state.Account{ID: "usr_1", Email: "a@x.io", Plan: state.PlanPaid, CreatedAt: at},
			state.Workspace{ID: "ws_1", Name: "W", CreatedAt: at}); err != nil {
			return err
		}
		for i := 0; i < nodes; i++ {
			if err := tx.UpsertNode(state.Node{ID: fmt.Sprintf("node-%04d", i), PHPVersions: []string{"8.2", "8.3"}, MemoryMB: 1 << 20}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	place := func() {
		id := fmt.Sprintf("site%d", n)
		s := state.Site{ID: id, NodeID: fmt.Sprintf("node-%04d", n%nodes), WorkspaceID: "ws_1", UserID: "usr_1", Slug: id, CreatedAt: at}
		n++
		// Many users: the quota count stays small.
		s.UserID = fmt.Sprintf("usr_%d", n%500)
		if err := store.Update(func(tx *state.Tx) error { return tx.CreateSite(s, state.Quota{}) }); err != nil {
			b.Fatal(err)
		}
	}
	for n < sites {
		place()
	}
	r := New(Config{Store: store})
	for _, bc := range []struct {
		name string
		fn   func() ([]scheduler.Node, error)
	}{{"baseline_scan", func() ([]scheduler.Node, error) { return candidatesFromScratch(store) }}, {"cached", r.Candidates}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				place()
				b.StartTimer()
				if _, err := bc.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUsedCountsSleepingSites: a sleeping site holds a place on its node
// at its sleeping cost, not an awake site's reservation; sites the node
// has not reported (just placed) count as awake.
func TestUsedCountsSleepingSites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sites  int
		sleep  state.SleepCounts
		wantMB int64
	}{
		{"all awake", 10, state.SleepCounts{Awake: 10}, 10 * SiteMemoryMB},
		{"none reported yet", 3, state.SleepCounts{}, 3 * SiteMemoryMB},
		{"asleep", 100, state.SleepCounts{Awake: 10, Asleep: 90}, 10*SiteMemoryMB + 90*AsleepMemoryMB},
		{"dozing at the default", 4, state.SleepCounts{Awake: 2, Dozing: 2}, 2*SiteMemoryMB + 2*DozingMemoryMB},
		{"dozing at what they hold", 4, state.SleepCounts{Awake: 2, Dozing: 2, DozingMemoryBytes: 20 << 20}, 2*SiteMemoryMB + 2*10},
		{"more reported than placed (a deletion in flight)", 2, state.SleepCounts{Asleep: 5}, 2 * AsleepMemoryMB},
	} {
		got := used(tc.sites, tc.sleep)
		if got.MemoryMB != tc.wantMB || got.Sites != tc.sites {
			t.Errorf("%s: %+v, want %d MiB", tc.name, got, tc.wantMB)
		}
	}
}
