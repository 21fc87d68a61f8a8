package state

import "testing"

// TestSitesFollowTheirNode: a node's ready sites are unavailable while it
// is down and ready again when it is back (by heartbeat or registration);
// sites in any other status, and other nodes' sites, are left as they are;
// a job that finishes while the node is down leaves its site unavailable.
func TestSitesFollowTheirNode(t *testing.T) {
	s := seed(t)
	for _, n := range []Node{{ID: "n1"}, {ID: "n2"}} {
		n := n
		must(t, s.Update(func(tx *Tx) error { return tx.UpsertNode(n) }))
	}
	for _, site := range []Site{
		{ID: "ready1", NodeID: "n1", Status: SiteReady},
		{ID: "creating1", NodeID: "n1", Status: SiteCreating},
		{ID: "failed1", NodeID: "n1", Status: SiteFailed},
		{ID: "ready2", NodeID: "n2", Status: SiteReady},
	} {
		site.WorkspaceID, site.UserID, site.Slug, site.CreatedAt = "ws_b", "usr_b", site.ID, t0
		must(t, s.Update(func(tx *Tx) error { return tx.CreateSite(site, Quota{}) }))
	}
	status := func(id string) string {
		site, err := s.Site(id)
		must(t, err)
		return site.Status
	}
	expect := func(step string, want map[string]string) {
		t.Helper()
		for id, w := range want {
			if got := status(id); got != w {
				t.Errorf("%s: %s is %s, want %s", step, id, got, w)
			}
		}
	}
	at := t0.Add(1)
	must(t, s.Update(func(tx *Tx) error { return tx.SetNodeStatus("n1", NodeDown, at) }))
	expect("n1 down", map[string]string{"ready1": SiteUnavailable, "creating1": SiteCreating, "failed1": SiteFailed, "ready2": SiteReady})
	if site, _ := s.Site("ready1"); !site.UpdatedAt.Equal(at) {
		t.Errorf("updatedAt %v", site.UpdatedAt)
	}

	// The create job of creating1 finishes as the node is down.
	must(t, s.Update(func(tx *Tx) error {
		_, err := tx.UpdateSite(SiteUpdate{ID: "creating1", Status: SiteReady, At: at})
		return err
	}))
	expect("job finished while down", map[string]string{"creating1": SiteUnavailable})

	must(t, s.Update(func(tx *Tx) error { return tx.SetNodeStatus("n1", NodeReady, at) }))
	expect("n1 back", map[string]string{"ready1": SiteReady, "creating1": SiteReady, "failed1": SiteFailed, "ready2": SiteReady})

	must(t, s.Update(func(tx *Tx) error { return tx.SetNodeStatus("n1", NodeDown, at) }))
	must(t, s.Update(func(tx *Tx) error { return tx.UpsertNode(Node{ID: "n1", UpdatedAt: at}) }))
	expect("n1 registered again", map[string]string{"ready1": SiteReady, "creating1": SiteReady})
}
