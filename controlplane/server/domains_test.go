package server_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/routes"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/dnstest"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// urlAgent is a fake node that records where each site's WordPress was
// moved; a URL in fail is refused, and while hold is set the next move
// waits for it.
type urlAgent struct {
	fakeAgent
	mu   sync.Mutex
	urls map[string][]string
	fail map[string]bool
	hold chan struct{}
	held chan struct{}
}

func (f *urlAgent) SetSiteURL(ctx context.Context, req *connect.Request[agentv1.SetSiteURLRequest]) (*connect.Response[agentv1.SetSiteURLResponse], error) {
	f.mu.Lock()
	hold, held := f.hold, f.held
	f.hold = nil
	f.mu.Unlock()
	if hold != nil {
		close(held)
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[req.Msg.Url] {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("WordPress did not answer at %s", req.Msg.Url))
	}
	f.urls[req.Msg.SiteId] = append(f.urls[req.Msg.SiteId], req.Msg.Url)
	return connect.NewResponse(&agentv1.SetSiteURLResponse{}), nil
}

// current is the URL the fake last moved a site to.
func (f *urlAgent) current(site string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u := f.urls[site]; len(u) > 0 {
		return u[len(u)-1]
	}
	return ""
}

// routeFor is the site a host is routed to ("" for none) and whether it
// is routed as a custom domain.
func routeFor(t *testing.T, s *server.Server, host string) (string, bool) {
	t.Helper()
	store := s.Node().Store()
	sites, _, err := store.AllSites()
	if err != nil {
		t.Fatal(err)
	}
	nodes, _ := store.Nodes()
	byID := map[string]*state.Node{}
	for _, n := range nodes {
		byID[n.ID] = n
	}
	doms, _ := store.Domains()
	r := routes.Table(sites, byID, doms)[host]
	if r == nil {
		return "", false
	}
	return r.SiteId, r.Custom
}

func waitJob(t *testing.T, c *st.Account, id, want string) *st.Response {
	t.Helper()
	var r *st.Response
	st.WaitFor(t, 20*time.Second, "job "+id, func() bool {
		r = c.Do("GET", "/api/app/jobs/"+id, nil).Must(t, 200)
		return r.Str("job.status") == "succeeded" || r.Str("job.status") == "failed"
	})
	if got := r.Str("job.status"); got != want {
		t.Fatalf("job %s: %s, want %s: %s", id, got, want, r.Raw)
	}
	return r
}

func TestCustomDomains(t *testing.T) {
	dns := dnstest.Start(t)
	edgeAddr := netip.MustParseAddr("203.0.113.10") // documentation range: compared, never dialled
	logs := &st.LogBuffer{}
	s := st.Single(t, st.Options{Logs: logs, Configure: func(c *server.Config) {
		c.DNSResolver, c.EdgeAddrs = dns.Addr, []netip.Addr{edgeAddr}
		c.DomainCheckInterval = time.Hour // the background check has a test of its own
	}})
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	agent := &urlAgent{urls: map[string][]string{}, fail: map[string]bool{}}
	agent.url = serveAgent(t, agent)
	n := state.Node{ID: "node-fake", Address: agent.url, BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}, Status: state.NodeReady,
		MemoryMB: 64 << 10, MaxSites: 100}
	if _, err := s.Node().Apply(context.Background(), fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	bob := st.NewAccount(t, s, "bob@example.com", "paid")
	newSite := func(c *st.Account, name string) (id, host string) {
		r := c.Do("POST", "/api/app/sites", map[string]any{"name": name}).Must(t, 202)
		waitJob(t, c, r.Str("jobId"), "succeeded")
		site := c.Do("GET", "/api/app/sites/"+r.Str("site.id"), nil).Must(t, 200)
		url := site.Str("site.url")
		host = strings.TrimPrefix(url, "http://")
		host, _, _ = strings.Cut(host, ":")
		return site.Str("site.id"), host
	}
	site, siteHost := newSite(alice, "Shop")
	other, otherHost := newSite(alice, "Other")
	path := "/api/app/sites/" + site + "/domain"
	// disconnect removes a domain and waits for the job that moves
	// WordPress back, so the next step does not race it for the site.
	disconnect := func(t *testing.T, p string) {
		t.Helper()
		if r := alice.Do("DELETE", p, nil).Must(t, 200); r.Str("jobId") != "" {
			waitJob(t, alice, r.Str("jobId"), "succeeded")
		}
	}

	t.Run("bad hostnames are refused and nothing is kept", func(t *testing.T) {
		for _, h := range []string{"", "https://shop.example.com", "shop.example.com/path", "shop.example.com:8443", "*.example.com",
			"192.0.2.1", "[2001:db8::1]", "localhost", "com", "co.uk", "shop", "-bad-.example.com", "a..b.example.com",
			"shop_1.example.com", "x." + siteHost, "foo.localhost", "shop.example.test", "user@shop.example.com", strings.Repeat("a", 64) + ".example.com"} {
			r := alice.Do("PUT", path, map[string]any{"hostname": h})
			if r.Status != 400 || r.Code() != "invalid_request" || r.Details()["field"] != "hostname" {
				t.Errorf("hostname %q: %d %s", h, r.Status, r.Raw)
			}
		}
		if r := alice.Do("PUT", path, map[string]any{"hostname": "shop.example.com", "tls": true}); r.Status != 400 || r.Details()["field"] != "tls" {
			t.Errorf("unknown field: %d %s", r.Status, r.Raw)
		}
		if got := alice.Do("GET", path, nil).Must(t, 200); got.Get("domain") != nil {
			t.Fatalf("a refused hostname was kept: %s", got.Raw)
		}
		if r := alice.Do("POST", path+"/check", nil); r.Status != 400 || r.Code() != "invalid_request" {
			t.Errorf("check without a domain: %d %s", r.Status, r.Raw)
		}
		if r := alice.Do("DELETE", path, nil); r.Status != 400 || r.Code() != "invalid_request" {
			t.Errorf("delete without a domain: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("connect, wrong records, right records, active, delete", func(t *testing.T) {
		dns.Set(t, "elsewhere.example.net", "A 192.0.2.8")
		r := alice.Do("PUT", path, map[string]any{"hostname": " Shop.Example.COM. "}).Must(t, 200)
		if r.Str("domain.hostname") != "shop.example.com" || r.Str("domain.status") != "pending_dns" || r.Str("domain.url") != "https://shop.example.com" ||
			r.Str("domain.target") != siteHost || r.Get("domain.verifiedAt") != nil || r.Get("domain.lastError") != nil {
			t.Fatalf("connect: %s", r.Raw)
		}
		recs := r.List("domain.records")
		if len(recs) != 1 || recs[0]["type"] != "CNAME" || recs[0]["name"] != "shop.example.com" || recs[0]["value"] != siteHost {
			t.Fatalf("records: %v", recs)
		}
		// The same hostname again is the same domain; another is a conflict.
		alice.Do("PUT", path, map[string]any{"hostname": "shop.example.com"}).Must(t, 200)
		if r := alice.Do("PUT", path, map[string]any{"hostname": "www.example.com"}); r.Status != 409 || r.Code() != "conflict" {
			t.Fatalf("a second domain: %d %s", r.Status, r.Raw)
		}
		// Unique across the service: not on another site, not in another workspace.
		if r := alice.Do("PUT", "/api/app/sites/"+other+"/domain", map[string]any{"hostname": "shop.example.com"}); r.Status != 409 {
			t.Fatalf("the same hostname on another site: %d %s", r.Status, r.Raw)
		}
		// Another workspace cannot see or touch it.
		for _, m := range []string{"GET", "DELETE"} {
			if r := bob.Do(m, path, nil); r.Status != 404 || r.Code() != "site_not_found" {
				t.Fatalf("bob %s: %d %s", m, r.Status, r.Raw)
			}
		}
		if r := bob.Do("POST", path+"/check", nil); r.Status != 404 {
			t.Fatalf("bob check: %d %s", r.Status, r.Raw)
		}

		for _, c := range []struct {
			records []string
			want    string
		}{
			{nil, "does not exist in DNS"},
			{[]string{"CNAME nowhere.example.net."}, "to nowhere.example.net, which does not exist"},
			{[]string{"CNAME elsewhere.example.net."}, "to elsewhere.example.net, not to " + siteHost},
			{[]string{"A 192.0.2.7"}, "address records (192.0.2.7) but no CNAME"},
		} {
			dns.Set(t, "shop.example.com", c.records...)
			r := alice.Do("POST", path+"/check", nil).Must(t, 200)
			if r.Str("domain.status") != "pending_dns" || !strings.Contains(r.Str("domain.lastError"), c.want) || r.Get("jobId") != nil ||
				r.Get("domain.lastCheckedAt") == nil {
				t.Fatalf("records %v: %s", c.records, r.Raw)
			}
			if id, _ := routeFor(t, s, "shop.example.com"); id != "" {
				t.Fatalf("records %v: a pending domain is routed", c.records)
			}
		}
		if agent.current(site) != "" {
			t.Fatalf("WordPress moved before the records were right: %s", agent.current(site))
		}

		dns.Set(t, "shop.example.com", "CNAME "+siteHost+".")
		r = alice.Do("POST", path+"/check", nil).Must(t, 200)
		if r.Str("domain.status") != "verifying" || r.Str("jobId") == "" || r.Get("domain.lastError") != nil {
			t.Fatalf("right records: %s", r.Raw)
		}
		job := waitJob(t, alice, r.Str("jobId"), "succeeded")
		if job.Str("job.type") != "set_site_domain" || job.Str("job.siteId") != site {
			t.Fatalf("job: %s", job.Raw)
		}
		if got := agent.current(site); got != "https://shop.example.com" {
			t.Fatalf("WordPress is at %q", got)
		}
		r = alice.Do("GET", path, nil).Must(t, 200)
		if r.Str("domain.status") != "active" || r.Get("domain.verifiedAt") == nil {
			t.Fatalf("after the move: %s", r.Raw)
		}
		if id, custom := routeFor(t, s, "shop.example.com"); id != site || !custom {
			t.Fatalf("route of the active domain: %q custom %v", id, custom)
		}
		if id, _ := routeFor(t, s, siteHost); id != site {
			t.Fatal("the sandbox host lost its route")
		}
		login := alice.Do("POST", "/api/sites/"+site+"/magic-login", nil).Must(t, 200)
		if !strings.HasPrefix(login.Str("url"), "https://shop.example.com/?sandbox_login=") {
			t.Fatalf("a login link of a site on its domain: %s", login.Str("url"))
		}
		// Checking an active domain whose records moved away reports it
		// and keeps serving.
		dns.Set(t, "shop.example.com", "CNAME elsewhere.example.net.")
		r = alice.Do("POST", path+"/check", nil).Must(t, 200)
		if r.Str("domain.status") != "active" || !strings.Contains(r.Str("domain.lastError"), "elsewhere.example.net") {
			t.Fatalf("recheck of an active domain: %s", r.Raw)
		}

		r = alice.Do("DELETE", path, nil).Must(t, 200)
		if r.Str("domain.hostname") != "shop.example.com" || r.Str("jobId") == "" {
			t.Fatalf("delete: %s", r.Raw)
		}
		if id, _ := routeFor(t, s, "shop.example.com"); id != "" {
			t.Fatal("a disconnected domain is still routed")
		}
		waitJob(t, alice, r.Str("jobId"), "succeeded")
		if got := agent.current(site); got != "http://"+siteHost+":8081" {
			t.Fatalf("WordPress after the disconnect is at %q", got)
		}
		if got := alice.Do("GET", path, nil).Must(t, 200); got.Get("domain") != nil {
			t.Fatalf("after delete: %s", got.Raw)
		}
		// The name is free again.
		alice.Do("PUT", "/api/app/sites/"+other+"/domain", map[string]any{"hostname": "shop.example.com"}).Must(t, 200)
		disconnect(t, "/api/app/sites/"+other+"/domain")
	})

	t.Run("IDN names are kept in punycode", func(t *testing.T) {
		r := alice.Do("PUT", "/api/app/sites/"+other+"/domain", map[string]any{"hostname": "Bücher.example.com"}).Must(t, 200)
		if r.Str("domain.hostname") != "xn--bcher-kva.example.com" {
			t.Fatalf("idn: %s", r.Raw)
		}
		disconnect(t, "/api/app/sites/"+other+"/domain")
	})

	t.Run("apex names need A records to the edges and a TXT record", func(t *testing.T) {
		p := "/api/app/sites/" + other + "/domain"
		r := alice.Do("PUT", p, map[string]any{"hostname": "example.org"}).Must(t, 200)
		recs := r.List("domain.records")
		if len(recs) != 2 || recs[0]["type"] != "A" || recs[0]["value"] != edgeAddr.String() || recs[1]["type"] != "TXT" ||
			recs[1]["name"] != "_sandboxd.example.org" || !strings.HasPrefix(recs[1]["value"].(string), "sandboxd-verify=") ||
			r.Str("domain.target") != edgeAddr.String() {
			t.Fatalf("apex records: %s", r.Raw)
		}
		txt := recs[1]["value"].(string)
		dns.Set(t, "example.org", "A "+edgeAddr.String())
		if r := alice.Do("POST", p+"/check", nil).Must(t, 200); r.Str("domain.status") != "pending_dns" || !strings.Contains(r.Str("domain.lastError"), "TXT record") {
			t.Fatalf("apex without TXT: %s", r.Raw)
		}
		dns.Set(t, "_sandboxd.example.org", fmt.Sprintf("TXT %q", txt))
		dns.Set(t, "example.org", "A "+edgeAddr.String(), "A 192.0.2.99")
		if r := alice.Do("POST", p+"/check", nil).Must(t, 200); r.Str("domain.status") != "pending_dns" || !strings.Contains(r.Str("domain.lastError"), "192.0.2.99") {
			t.Fatalf("apex with a stray A record: %s", r.Raw)
		}
		dns.Set(t, "example.org", "A "+edgeAddr.String())
		r = alice.Do("POST", p+"/check", nil).Must(t, 200)
		if r.Str("domain.status") != "verifying" {
			t.Fatalf("apex with the right records: %s", r.Raw)
		}
		waitJob(t, alice, r.Str("jobId"), "succeeded")
		if got := alice.Do("GET", p, nil).Must(t, 200); got.Str("domain.status") != "active" || agent.current(other) != "https://example.org" {
			t.Fatalf("apex active: %s, WordPress at %s", got.Raw, agent.current(other))
		}
		disconnect(t, p)
	})

	t.Run("a failed move marks the domain failed and a new check retries", func(t *testing.T) {
		dns.Set(t, "blog.example.com", "CNAME "+otherHost+".")
		p := "/api/app/sites/" + other + "/domain"
		alice.Do("PUT", p, map[string]any{"hostname": "blog.example.com"}).Must(t, 200)
		agent.mu.Lock()
		agent.fail["https://blog.example.com"] = true
		agent.mu.Unlock()
		r := alice.Do("POST", p+"/check", nil).Must(t, 200)
		waitJob(t, alice, r.Str("jobId"), "failed")
		got := alice.Do("GET", p, nil).Must(t, 200)
		if got.Str("domain.status") != "failed" || !strings.Contains(got.Str("domain.lastError"), "did not answer") {
			t.Fatalf("after a failed move: %s", got.Raw)
		}
		if id, _ := routeFor(t, s, "blog.example.com"); id != "" {
			t.Fatal("a failed domain is routed")
		}
		agent.mu.Lock()
		delete(agent.fail, "https://blog.example.com")
		agent.mu.Unlock()
		r = alice.Do("POST", p+"/check", nil).Must(t, 200)
		waitJob(t, alice, r.Str("jobId"), "succeeded")
		if got := alice.Do("GET", p, nil).Must(t, 200); got.Str("domain.status") != "active" {
			t.Fatalf("after the retry: %s", got.Raw)
		}
		disconnect(t, p)
	})

	t.Run("a disconnect during the move ends on the sandbox URL", func(t *testing.T) {
		dns.Set(t, "race.example.com", "CNAME "+otherHost+".")
		p := "/api/app/sites/" + other + "/domain"
		alice.Do("PUT", p, map[string]any{"hostname": "race.example.com"}).Must(t, 200)
		hold, held := make(chan struct{}), make(chan struct{})
		agent.mu.Lock()
		agent.hold, agent.held = hold, held
		agent.mu.Unlock()
		r := alice.Do("POST", p+"/check", nil).Must(t, 200)
		st.Await(t, held, 20*time.Second, "the move to the domain")
		d := alice.Do("DELETE", p, nil).Must(t, 200)
		close(hold)
		waitJob(t, alice, r.Str("jobId"), "succeeded")
		waitJob(t, alice, d.Str("jobId"), "succeeded")
		if got := agent.current(other); strings.Contains(got, "race.example.com") {
			t.Fatalf("WordPress stayed on the disconnected domain: %s", got)
		}
		if id, _ := routeFor(t, s, "race.example.com"); id != "" {
			t.Fatal("the disconnected domain is routed")
		}
	})

	t.Run("deleting the site frees its hostname", func(t *testing.T) {
		third, _ := newSite(alice, "Third")
		alice.Do("PUT", "/api/app/sites/"+third+"/domain", map[string]any{"hostname": "gone.example.com"}).Must(t, 200)
		del := alice.Do("DELETE", "/api/app/sites/"+third, nil).Must(t, 202)
		waitJob(t, alice, del.Str("jobId"), "succeeded")
		alice.Do("PUT", "/api/app/sites/"+other+"/domain", map[string]any{"hostname": "gone.example.com"}).Must(t, 200)
	})
}

// TestPendingDomainsAreCheckedInTheBackground: once the records appear,
// a pending domain becomes active without the customer asking again.
func TestPendingDomainsAreCheckedInTheBackground(t *testing.T) {
	dns := dnstest.Start(t)
	s := st.Single(t, st.Options{Configure: func(c *server.Config) {
		c.DNSResolver, c.DomainCheckInterval = dns.Addr, 50*time.Millisecond
	}})
	agent := &urlAgent{urls: map[string][]string{}, fail: map[string]bool{}}
	agent.url = serveAgent(t, agent)
	n := state.Node{ID: "node-fake", Address: agent.url, BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}, Status: state.NodeReady,
		MemoryMB: 64 << 10, MaxSites: 100}
	if _, err := s.Node().Apply(context.Background(), fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	r := alice.Do("POST", "/api/app/sites", map[string]any{"name": "Later"}).Must(t, 202)
	waitJob(t, alice, r.Str("jobId"), "succeeded")
	site := r.Str("site.id")
	host := strings.Split(strings.TrimPrefix(r.Str("site.url"), "http://"), ":")[0]
	path := "/api/app/sites/" + site + "/domain"
	alice.Do("PUT", path, map[string]any{"hostname": "later.example.com"}).Must(t, 200)
	st.WaitFor(t, 20*time.Second, "a background check", func() bool {
		return alice.Do("GET", path, nil).Must(t, 200).Get("domain.lastCheckedAt") != nil
	})
	if got := alice.Do("GET", path, nil).Must(t, 200); got.Str("domain.status") != "pending_dns" {
		t.Fatalf("before the records: %s", got.Raw)
	}
	dns.Set(t, "later.example.com", "CNAME "+host+".")
	st.WaitFor(t, 20*time.Second, "the domain to become active by itself", func() bool {
		return alice.Do("GET", path, nil).Must(t, 200).Str("domain.status") == "active"
	})
	if got := agent.current(site); got != "https://later.example.com" {
		t.Fatalf("WordPress is at %q", got)
	}
}
