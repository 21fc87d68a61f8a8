package state

import (
	"testing"
	"time"
)

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

// TestSnapshotsAndMoves: snapshots are kept per site up to a count and
// go with their site; a move runs once at a time, a switch leaves the
// site unavailable whatever its node reports, and its end puts the site
// on its new node (or, aborted, back where it was).
func TestSnapshotsAndMoves(t *testing.T) {
	s := seed(t)
	for _, id := range []string{"n1", "n2"} {
		n := Node{ID: id}
		must(t, s.Update(func(tx *Tx) error { return tx.UpsertNode(n) }))
	}
	site := Site{ID: "site1", WorkspaceID: "ws_b", UserID: "usr_b", Slug: "one", NodeID: "n1", Status: SiteReady, CreatedAt: t0}
	must(t, s.Update(func(tx *Tx) error { return tx.CreateSite(site, Quota{}) }))
	for i := range 4 {
		sn := SiteSnapshot{ID: "snap" + string(rune('a'+i)), SiteID: "site1", TakenAt: t0.Add(time.Duration(i) * time.Minute)}
		must(t, s.Update(func(tx *Tx) error { return tx.AddSnapshot(sn, 2) }))
	}
	if list, _ := s.Snapshots("site1"); len(list) != 2 || list[0].ID != "snapd" || list[1].ID != "snapc" {
		t.Fatalf("kept %v", list)
	}
	if err := s.Update(func(tx *Tx) error { return tx.AddSnapshot(SiteSnapshot{ID: "x", SiteID: "nope"}, 2) }); err == nil {
		t.Fatal("a snapshot of no site was kept")
	}

	must(t, s.Update(func(tx *Tx) error { return tx.SetNodeDrain("n1", true, t0) }))
	move := SiteMove{JobID: "job_m", From: "n1", To: "n2", Reason: MoveDrain, StartedAt: t0}
	must(t, s.Update(func(tx *Tx) error {
		return tx.StartMove("site1", move, Job{ID: "job_m", Type: "move_site", CreatedAt: t0})
	}))
	again := move
	again.JobID = "job_m2"
	if err := s.Update(func(tx *Tx) error { return tx.StartMove("site1", again, Job{ID: "job_m2", CreatedAt: t0}) }); err == nil {
		t.Fatal("a second move started")
	}
	must(t, s.Update(func(tx *Tx) error { return tx.SwitchMove("site1", "job_m", t0) }))
	// The old node re-registering does not make a switching site ready.
	must(t, s.Update(func(tx *Tx) error { return tx.UpsertNode(Node{ID: "n1"}) }))
	if got, _ := s.Site("site1"); got.Status != SiteUnavailable {
		t.Fatalf("switching site: %s", got.Status)
	}
	must(t, s.Update(func(tx *Tx) error { return tx.FinishMove("site1", "job_m", "10.0.0.2", 8080, nil, time.Second, t0) }))
	got, _ := s.Site("site1")
	if got.NodeID != "n2" || got.Status != SiteReady || got.Move != nil || got.Address != "10.0.0.2" || got.RestoredFrom != nil {
		t.Fatalf("moved site: %+v", got)
	}
	n1, _ := s.Node("n1")
	if n1.Drain == nil || len(n1.Drain.Moves) != 1 || n1.Drain.Moves[0].Status != "moved" || n1.Drain.Moves[0].DowntimeMs != 1000 {
		t.Fatalf("drain report: %+v", n1.Drain)
	}

	// A reschedule whose lost node came back first is a conflict; the
	// abort leaves the site where it was.
	must(t, s.Update(func(tx *Tx) error { return tx.SetNodeStatus("n2", NodeDown, t0) }))
	back := SiteMove{JobID: "job_r", From: "n2", To: "n1", Reason: MoveReschedule, StartedAt: t0}
	must(t, s.Update(func(tx *Tx) error { return tx.StartMove("site1", back, Job{ID: "job_r", CreatedAt: t0}) }))
	must(t, s.Update(func(tx *Tx) error { return tx.SetNodeStatus("n2", NodeReady, t0) }))
	if err := s.Update(func(tx *Tx) error { return tx.FinishMove("site1", "job_r", "", 0, &t0, 0, t0) }); err == nil {
		t.Fatal("a reschedule finished although the node came back")
	}
	must(t, s.Update(func(tx *Tx) error { _, err := tx.AbortMove("site1", "job_r", "", t0); return err }))
	if got, _ := s.Site("site1"); got.NodeID != "n2" || got.Status != SiteReady || got.Move != nil {
		t.Fatalf("after the abort: %+v", got)
	}
	must(t, s.Update(func(tx *Tx) error { return tx.DeleteSite("site1", t0) }))
	if list, _ := s.AllSnapshots(); len(list) != 0 {
		t.Fatalf("snapshots of a deleted site: %v", list)
	}
}
