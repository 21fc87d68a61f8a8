package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// TestExpiryReaperSurvivesLeaderChange: a site made with expiresInMinutes
// under one leader is deleted by the next leader's reaper once its time
// is up (the servers share a clock the test moves), and a site with no
// expiry is left alone.
func TestExpiryReaperSurvivesLeaderChange(t *testing.T) {
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	servers, _ := st.Cluster(t, 3, st.Options{Configure: func(c *server.Config) {
		c.Now, c.ExpireInterval = now, 100*time.Millisecond
	}})
	leader := st.Leader(t, servers)
	// A node that is never dialled: sites can be placed (their jobs fail).
	n := state.Node{ID: "node-fake", Address: "http://127.0.0.1:1", BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}}
	if _, err := leader.Node().Apply(context.Background(), fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
	alice := st.NewAccount(t, leader, "alice@example.com", "paid")
	c := st.NewClient(t, leader.URL(), alice.Token)
	expiring := c.Do("POST", "/api/app/sites", map[string]any{"name": "Short", "expiresInMinutes": 5}).Must(t, 202).Str("site.id")
	keep := c.Do("POST", "/api/app/sites", map[string]any{"name": "Keep"}).Must(t, 202).Str("site.id")

	leader.Kill()
	next := st.Leader(t, followers(servers, leader))
	store := next.Node().Store()
	offset.Store(int64(6 * time.Minute))
	st.WaitFor(t, 30*time.Second, "the new leader to delete the expired site", func() bool {
		s, _ := store.Site(expiring)
		return s == nil || s.Status == state.SiteDeleting
	})
	// The reaper marks the site deleting and queues its delete job in one
	// entry (the job then fails against the fake node and the site stays
	// deleting).
	if s, _ := store.Site(keep); s == nil || s.Status == state.SiteDeleting {
		t.Fatalf("a site with no expiry: %+v", s)
	}
}
