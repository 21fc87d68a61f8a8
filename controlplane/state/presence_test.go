package state

import (
	"testing"
	"time"
)

// TestSetSitePresence: a node speaks for its own sites only; a report
// without a request keeps the last one known; counts land on the node.
func TestSetSitePresence(t *testing.T) {
	s := seed(t)
	for _, n := range []string{"n1", "n2"} {
		must(t, s.Update(func(tx *Tx) error { return tx.UpsertNode(Node{ID: n}) }))
	}
	for id, node := range map[string]string{"mine": "n1", "theirs": "n2"} {
		site := Site{ID: id, NodeID: node, Status: SiteReady, WorkspaceID: "ws_b", UserID: "usr_b", Slug: id, CreatedAt: t0}
		must(t, s.Update(func(tx *Tx) error { return tx.CreateSite(site, Quota{}) }))
	}
	at := t0.Add(time.Hour)
	counts := &SleepCounts{Awake: 1, Asleep: 1, AwakeMemoryBytes: 40 << 20}
	must(t, s.Update(func(tx *Tx) error {
		return tx.SetSitePresence("n1", []SitePresence{{SiteID: "mine", Sleeping: true, LastRequestAt: &at},
			{SiteID: "theirs", Sleeping: true, LastRequestAt: &at}, {SiteID: "gone", Sleeping: true}}, counts)
	}))
	mine, err := s.Site("mine")
	must(t, err)
	theirs, err := s.Site("theirs")
	must(t, err)
	if !mine.Sleeping || mine.LastRequestAt == nil || !mine.LastRequestAt.Equal(at) {
		t.Fatalf("the node's own site: %+v", mine)
	}
	if theirs.Sleeping || theirs.LastRequestAt != nil {
		t.Fatalf("another node's site changed: %+v", theirs)
	}
	if n, _ := s.Node("n1"); n.Sleep != *counts {
		t.Fatalf("counts: %+v", n.Sleep)
	}
	// Awake again, no request seen since the agent started: the last
	// request known stays.
	must(t, s.Update(func(tx *Tx) error {
		return tx.SetSitePresence("n1", []SitePresence{{SiteID: "mine"}}, nil)
	}))
	if mine, _ = s.Site("mine"); mine.Sleeping || mine.LastRequestAt == nil {
		t.Fatalf("woken: %+v", mine)
	}
	if n, _ := s.Node("n1"); n.Sleep != *counts {
		t.Fatalf("counts changed without a report: %+v", n.Sleep)
	}
}
