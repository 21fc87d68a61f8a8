package state

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
)

// TestCountSitesOnNodes: counts match SitesOnNode, and each node's watch
// fires when its sites change (or when a restore replaces the state),
// and a node with sites is not recounted for other nodes' changes; the
// watch of a node without sites may fire for changes near it. The zero
// watch has always changed.
func TestCountSitesOnNodes(t *testing.T) {
	s := seed(t)
	if !(Watch{}).Changed() {
		t.Fatal("the zero watch has not changed")
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		must(t, s.Update(func(tx *Tx) error { return tx.UpsertNode(Node{ID: n}) }))
	}
	create := func(id, node string) {
		t.Helper()
		site := Site{ID: id, NodeID: node, Status: SiteCreating, WorkspaceID: "ws_b", UserID: "usr_b", Slug: id, CreatedAt: t0}
		must(t, s.Update(func(tx *Tx) error { return tx.CreateSite(site, Quota{}) }))
	}
	for i := 0; i < 3; i++ {
		create(fmt.Sprintf("a%d", i), "n1")
	}
	create("b0", "n2")
	ids := []string{"n1", "n2", "n3", "unknown"}
	counts, watches, err := s.CountSitesOnNodes(ids)
	must(t, err)
	for i, id := range ids {
		sites, err := s.SitesOnNode(id)
		must(t, err)
		if counts[i] != len(sites) {
			t.Errorf("%s: counted %d, %d sites", id, counts[i], len(sites))
		}
		if watches[i].Changed() {
			t.Errorf("%s: watch fired before any change", id)
		}
	}
	// Each node in want must have fired; a node with sites not in want
	// must not have.
	expect := func(step string, want ...string) {
		t.Helper()
		for i, id := range ids {
			changed, wanted := watches[i].Changed(), slices.Contains(want, id)
			if wanted && !changed || !wanted && changed && counts[i] > 0 {
				t.Errorf("%s: %s's watch fired: %v", step, id, changed)
			}
		}
		counts, watches, err = s.CountSitesOnNodes(ids)
		must(t, err)
	}

	create("c0", "n3")
	expect("a site placed on n3", "n3")
	must(t, s.Update(func(tx *Tx) error {
		_, err := tx.UpdateSite(SiteUpdate{ID: "a1", Status: SiteReady, At: t0})
		return err
	}))
	expect("a site on n1 changed", "n1")
	must(t, s.Update(func(tx *Tx) error { return tx.DeleteSite("b0", t0) }))
	expect("n2's site deleted", "n2")
	create("u0", "unknown")
	expect("a site placed on a node not registered yet", "unknown")
	must(t, s.Update(func(tx *Tx) error { return tx.UpsertNode(Node{ID: "n4"}) }))
	expect("a node registered")

	var snap bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	must(t, s.Restore(&snap))
	expect("restore", ids...)

	nodes, w, err := s.NodesWatch()
	must(t, err)
	if len(nodes) != 4 || nodes[0].ID != "n1" || nodes[3].ID != "n4" || w.Changed() {
		t.Fatalf("nodes %v, watch fired %v", nodes, w.Changed())
	}
	create("d0", "n1")
	if w.Changed() {
		t.Error("the nodes watch fired for a site")
	}
	must(t, s.Update(func(tx *Tx) error { return tx.SetNodeStatus("n2", NodeDown, t0) }))
	if !w.Changed() {
		t.Error("the nodes watch did not fire for a node going down")
	}
}
