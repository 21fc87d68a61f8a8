package server_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/dnstest"
)

// claimsSetup is a server with a fake DNS server, a node that takes every
// site and a clock the test moves, and two tenants with a site each:
// mallory, who squats names, and alice, who owns them.
type claimsSetup struct {
	s             *server.Server
	dns           *dnstest.Server
	offset        *atomic.Int64
	mallory       *st.Account
	alice         *st.Account
	squat, owned  string // site ids
	squatPath     string
	ownedPath     string
	ownedSiteHost string
}

func newClaimsSetup(t *testing.T) *claimsSetup {
	t.Helper()
	c := &claimsSetup{dns: dnstest.Start(t), offset: new(atomic.Int64)}
	now := func() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }
	c.s = st.Single(t, st.Options{Configure: func(cfg *server.Config) {
		cfg.DNSResolver, cfg.EdgeAddrs, cfg.Now = c.dns.Addr, []netip.Addr{netip.MustParseAddr("203.0.113.10")}, now
		cfg.DomainCheckInterval = 50 * time.Millisecond
	}})
	agent := &urlAgent{urls: map[string][]string{}, fail: map[string]bool{}}
	agent.url = serveAgent(t, agent)
	n := state.Node{ID: "node-fake", Address: agent.url, BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}, Status: state.NodeReady,
		MemoryMB: 64 << 10, MaxSites: 100}
	if _, err := c.s.Node().Apply(context.Background(), fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
	c.mallory = st.NewAccount(t, c.s, "mallory@example.net", "paid")
	c.alice = st.NewAccount(t, c.s, "alice@example.com", "paid")
	newSite := func(a *st.Account, name string) (string, string) {
		r := a.Do("POST", "/api/app/sites", map[string]any{"name": name}).Must(t, 202)
		waitJob(t, a, r.Str("jobId"), "succeeded")
		host, _, _ := strings.Cut(strings.TrimPrefix(r.Str("site.url"), "http://"), ":")
		return r.Str("site.id"), host
	}
	c.squat, _ = newSite(c.mallory, "Squat")
	c.owned, c.ownedSiteHost = newSite(c.alice, "Shop")
	c.squatPath, c.ownedPath = "/api/app/sites/"+c.squat+"/domain", "/api/app/sites/"+c.owned+"/domain"
	return c
}

// TestSquattedDomainIsTakenOverByTXTProof: a name another tenant claimed
// without proving it (pending_dns) no longer blocks its owner for as long
// as the squatting site lives: the owner's connect answers 409 with the
// TXT record that proves the name theirs, and once DNS holds it the name
// moves to the owner's site and the squatter's site loses it. A claim
// that proved itself (active) is never taken over.
func TestSquattedDomainIsTakenOverByTXTProof(t *testing.T) {
	c := newClaimsSetup(t)
	for _, host := range []string{"shop.example.com", "example.com"} { // a subdomain and an apex name
		t.Run(host, func(t *testing.T) {
			squat := c.mallory.Do("PUT", c.squatPath, map[string]any{"hostname": host}).Must(t, 200)
			if squat.Str("domain.status") != "pending_dns" {
				t.Fatalf("the squatter's claim: %s", squat.Raw)
			}

			r := c.alice.Do("PUT", c.ownedPath, map[string]any{"hostname": host})
			if r.Status != 409 || r.Code() != "conflict" {
				t.Fatalf("the owner's connect while squatted: %d %s", r.Status, r.Raw)
			}
			record, _ := r.Details()["record"].(map[string]any)
			if record["type"] != "TXT" || record["name"] != "_sandboxd."+host || !strings.HasPrefix(fmt.Sprint(record["value"]), "sandboxd-verify=") ||
				!strings.Contains(r.Str("error.message"), fmt.Sprint(record["value"])) {
				t.Fatalf("the 409 does not name the TXT record that proves the name: %s", r.Raw)
			}
			c.dns.Set(t, "_sandboxd."+host, fmt.Sprintf("TXT %q", record["value"]))

			got := c.alice.Do("PUT", c.ownedPath, map[string]any{"hostname": host}).Must(t, 200)
			if got.Str("domain.hostname") != host || got.Str("domain.status") != "pending_dns" || got.Get("domain.expiresAt") == nil {
				t.Fatalf("the owner's connect with the TXT record: %s", got.Raw)
			}
			if d := c.mallory.Do("GET", c.squatPath, nil).Must(t, 200); d.Get("domain") != nil {
				t.Fatalf("the squatter's site kept the name: %s", d.Raw)
			}
			// Taken: the squatter's connect is now the one refused, and the
			// TXT record in DNS (the owner's) does not let it back.
			back := c.mallory.Do("PUT", c.squatPath, map[string]any{"hostname": host})
			if back.Status != 409 || back.Details()["record"] == nil {
				t.Fatalf("the squatter after the take-over: %d %s", back.Status, back.Raw)
			}
			if d := c.alice.Do("GET", c.ownedPath, nil).Must(t, 200); d.Str("domain.hostname") != host {
				t.Fatalf("the owner's domain after the squatter tried again: %s", d.Raw)
			}
			if host == "example.com" {
				// The apex name's own TXT record is the one just made.
				recs := got.List("domain.records")
				if last := recs[len(recs)-1]; last["type"] != "TXT" || last["value"] != record["value"] {
					t.Fatalf("the apex domain's records after the take-over: %v", recs)
				}
			}
			c.alice.Do("DELETE", c.ownedPath, nil).Must(t, 200)
		})
	}

	t.Run("a claim that proved itself is not taken over", func(t *testing.T) {
		host := "blog.example.com"
		c.dns.Set(t, host, "CNAME "+c.ownedSiteHost+".")
		c.alice.Do("PUT", c.ownedPath, map[string]any{"hostname": host}).Must(t, 200)
		// A check the connect started in the background may change the
		// domain under this one: 409, check again.
		r := c.alice.Do("POST", c.ownedPath+"/check", nil)
		for i := 0; r.Status == 409 && i < 10; i++ {
			time.Sleep(100 * time.Millisecond)
			r = c.alice.Do("POST", c.ownedPath+"/check", nil)
		}
		r.Must(t, 200)
		if id := r.Str("jobId"); id != "" {
			waitJob(t, c.alice, id, "succeeded")
		}
		if d := c.alice.Do("GET", c.ownedPath, nil).Must(t, 200); d.Str("domain.status") != "active" || d.Get("domain.expiresAt") != nil {
			t.Fatalf("the owner's domain: %s", d.Raw)
		}
		probe := c.mallory.Do("PUT", c.squatPath, map[string]any{"hostname": host})
		if probe.Status != 409 {
			t.Fatalf("connecting an active domain: %d %s", probe.Status, probe.Raw)
		}
		c.dns.Set(t, "_sandboxd."+host, `TXT "sandboxd-verify=anything"`)
		if probe := c.mallory.Do("PUT", c.squatPath, map[string]any{"hostname": host}); probe.Status != 409 {
			t.Fatalf("connecting an active domain with a TXT record: %d %s", probe.Status, probe.Raw)
		}
		if d := c.alice.Do("GET", c.ownedPath, nil).Must(t, 200); d.Str("domain.hostname") != host || d.Str("domain.status") != "active" {
			t.Fatalf("the active domain after the attempts: %s", d.Raw)
		}
	})
}

// TestPendingDomainClaimsExpire: a claim that never proves itself lapses
// 72 hours after it became pending (the leader's background loop, on the
// servers' clock), and the name is free for anyone.
func TestPendingDomainClaimsExpire(t *testing.T) {
	c := newClaimsSetup(t)
	squat := c.mallory.Do("PUT", c.squatPath, map[string]any{"hostname": "held.example.com"}).Must(t, 200)
	if r := c.alice.Do("PUT", c.ownedPath, map[string]any{"hostname": "held.example.com"}); r.Status != 409 {
		t.Fatalf("the owner's connect while claimed: %d %s", r.Status, r.Raw)
	}

	c.offset.Store(int64(72*time.Hour + time.Minute))
	st.WaitFor(t, 20*time.Second, "the lapsed claim to be released", func() bool {
		return c.mallory.Do("GET", c.squatPath, nil).Must(t, 200).Get("domain") == nil
	})
	got := c.alice.Do("PUT", c.ownedPath, map[string]any{"hostname": "held.example.com"}).Must(t, 200)
	if got.Str("domain.status") != "pending_dns" {
		t.Fatalf("the owner's connect once the claim lapsed: %s", got.Raw)
	}
	// The new claim has its own 72 hours, and the domain says when each
	// claim lapses.
	if d := c.alice.Do("GET", c.ownedPath, nil).Must(t, 200); d.Get("domain") == nil {
		t.Fatalf("the owner's fresh claim was released too: %s", d.Raw)
	}
	for _, r := range []*st.Response{squat, got} {
		expires, err := time.Parse(time.RFC3339Nano, r.Str("domain.expiresAt"))
		if err != nil {
			t.Fatalf("expiresAt of a pending domain: %v: %s", err, r.Raw)
		}
		if r == got {
			expires = expires.Add(-72*time.Hour - time.Minute) // made on the moved clock
		}
		if until := time.Until(expires); until < 71*time.Hour || until > 73*time.Hour {
			t.Fatalf("the claim lapses in %s, want 72h: %s", until, r.Raw)
		}
	}
}
