package oauth_test

import (
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// longURI is an https redirect URI of n characters.
func longURI(n int) string {
	u := "https://cloner.example.com/cb?"
	return u + strings.Repeat("a", n-len(u))
}

// metricValue is the value of one series on /metrics, or "" without it.
func metricValue(t *testing.T, c *st.Client, series string) string {
	t.Helper()
	m := string(c.Do("GET", "/metrics", nil).Must(t, 200).Raw)
	_, rest, ok := strings.Cut(m, "\n"+series+" ")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "\n")
	return v
}

// TestOAuthRegistrationFlood: anonymous registration is bounded. Over-long
// metadata (more than 5 redirect URIs, one over 512 characters, a long
// client_uri, name or scope) is refused with the RFC 7591 codes; one
// address (an IPv6 /64) registers 20 clients an hour, then gets 429
// rate_limited with Retry-After while another address still registers,
// and the store holds only what was accepted, each client within the
// metadata bounds.
func TestOAuthRegistrationFlood(t *testing.T) {
	limits := api.DefaultRateLimits()
	s := st.Single(t, st.Options{RateLimits: &limits, Configure: func(c *server.Config) {
		// The test's requests come through a "proxy" on loopback that
		// names the client address.
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}})
	anon := st.NewClient(t, s.URL(), "")
	from := func(addr string) []string { return []string{"X-Forwarded-For", addr} }
	ok := []string{"https://cloner.example.com/cb"}

	for name, bad := range map[string]struct {
		body map[string]any
		code string
	}{
		"6 redirect URIs": {map[string]any{"redirect_uris": []string{ok[0] + "1", ok[0] + "2", ok[0] + "3", ok[0] + "4", ok[0] + "5", ok[0] + "6"}},
			"invalid_redirect_uri"},
		"a 513-character redirect URI":  {map[string]any{"redirect_uris": []string{longURI(513)}}, "invalid_redirect_uri"},
		"a 2000-character redirect URI": {map[string]any{"redirect_uris": []string{longURI(2000)}}, "invalid_redirect_uri"},
		"a 101-character name":          {map[string]any{"redirect_uris": ok, "client_name": strings.Repeat("n", 101)}, "invalid_client_metadata"},
		"a 513-character client_uri": {map[string]any{"redirect_uris": ok, "client_uri": "https://live.example.com/" + strings.Repeat("p", 488)},
			"invalid_client_metadata"},
		"a 1000-character scope":           {map[string]any{"redirect_uris": ok, "scope": strings.Repeat("import:read ", 84)}, "invalid_client_metadata"},
		"a 100-character software_version": {map[string]any{"redirect_uris": ok, "software_version": strings.Repeat("1", 100)}, "invalid_client_metadata"},
	} {
		if r := anon.Do("POST", "/api/connect/register", bad.body, from("198.51.100.7")...); r.Status != 400 || r.Code() != bad.code {
			t.Errorf("%s: %d %s, want 400 %s", name, r.Status, r.Code(), bad.code)
		}
	}

	// The largest registration the bounds allow, sent as fast as one
	// address can, from addresses of one IPv6 /64.
	biggest := map[string]any{"client_name": strings.Repeat("n", 100), "client_uri": "https://live.example.com/" + strings.Repeat("p", 487),
		"redirect_uris": []string{longURI(512), longURI(511), longURI(510), longURI(509), longURI(508)}}
	var accepted []string
	for i := range 40 {
		addr := fmt.Sprintf("2001:db8:1:2::%x", i+1)
		r := anon.Do("POST", "/api/connect/register", biggest, from(addr)...)
		if r.Status == 201 {
			accepted = append(accepted, r.Str("client_id"))
			continue
		}
		if r.Status != 429 || r.Code() != "rate_limited" || r.Details()["limit"] != "oauth_registrations" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("registration %d: %d %s (Retry-After %q)", i+1, r.Status, r.Raw, r.Header.Get("Retry-After"))
		}
	}
	if len(accepted) != 20 { // api.DefaultRegistrationsPerHour
		t.Fatalf("one address registered %d clients in a burst, want 20", len(accepted))
	}
	// Registrations count by IPv6 /48: another /64 of it is refused too,
	// while the refusals cost nothing elsewhere: another /48 registers.
	anon.Do("POST", "/api/connect/register", biggest, from("2001:db8:1:3::1")...).Must(t, 429)
	anon.Do("POST", "/api/connect/register", biggest, from("2001:db8:2::1")...).Must(t, 201)

	store := s.Node().Store()
	for _, id := range accepted {
		c, err := store.OAuthClient(id)
		if err != nil || c == nil {
			t.Fatalf("accepted client %s is not stored: %v", id, err)
		}
		size := len(c.Name) + len(c.ClientURI) + len(c.Scope) + len(c.SoftwareID)
		for _, u := range c.RedirectURIs {
			size += len(u)
		}
		if size > 5*512+100+512+100+64 {
			t.Fatalf("client %s holds %d bytes of metadata", id, size)
		}
	}
	if n := metricValue(t, anon, "sandboxd_oauth_clients"); n != fmt.Sprint(len(accepted)+1) {
		t.Errorf("sandboxd_oauth_clients = %q, want %d", n, len(accepted)+1)
	}
	if n := metricValue(t, anon, `sandboxd_http_rate_limited_total{limit="oauth_registrations"}`); n != "21" { // 20 of the burst, 1 of its /48
		t.Errorf("rate-limited registrations counted %q, want 21", n)
	}
}

// TestOAuthClientCap: past the cluster's cap on registered clients a
// registration is refused with 429 rate_limited (details.limit
// oauth_clients, Retry-After) and nothing is stored.
func TestOAuthClientCap(t *testing.T) {
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.OAuthClients.MaxClients = 3 }})
	anon := st.NewClient(t, s.URL(), "")
	reg := map[string]any{"redirect_uris": []string{"https://cloner.example.com/cb"}}
	for range 3 {
		anon.Do("POST", "/api/connect/register", reg).Must(t, 201)
	}
	r := anon.Do("POST", "/api/connect/register", reg).Must(t, 429)
	if r.Code() != "rate_limited" || r.Details()["limit"] != "oauth_clients" || r.Header.Get("Retry-After") != "3600" {
		t.Fatalf("past the cap: %s (Retry-After %q)", r.Raw, r.Header.Get("Retry-After"))
	}
	if n, _ := s.Node().Store().OAuthClientCount(); n != 3 {
		t.Fatalf("%d clients stored, want 3", n)
	}
	if v := metricValue(t, anon, `sandboxd_http_rate_limited_total{limit="oauth_clients"}`); v != "1" {
		t.Errorf("refusals at the cap counted %q", v)
	}
}

// TestOAuthClientCollection: the leader removes a client that never got
// a token 24 hours after it registered, and one whose tokens are all
// gone (here revoked) 30 days after; a client whose token lives stays.
// The clock is the server's injected one, moved forward by the test.
func TestOAuthClientCollection(t *testing.T) {
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	s := st.Single(t, st.Options{Configure: func(c *server.Config) {
		c.Now = now
		c.OAuthCollectInterval = 10 * time.Millisecond
	}})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	store := s.Node().Store()
	unused := st.NewClient(t, s.URL(), "").Do("POST", "/api/connect/register",
		map[string]any{"redirect_uris": []string{"https://cloner.example.com/cb"}}).Must(t, 201).Str("client_id")
	revoked, _, revokedID := st.ConnectorToken(t, s, alice.Token, "")
	_, _, liveID := st.ConnectorToken(t, s, alice.Token, "")

	tok, err := store.TokenByHash(secret.Hash(revoked.Token))
	if err != nil || tok == nil {
		t.Fatalf("the connector's token: %v", err)
	}
	alice.Do("DELETE", "/api/account/tokens/"+tok.ID, nil).Must(t, 200)
	st.WaitFor(t, 10*time.Second, "a pass to find the revoked client idle", func() bool {
		c, _ := store.OAuthClient(revokedID)
		return c != nil && c.IdleSince != nil
	})
	exists := func(id string) bool {
		c, _ := store.OAuthClient(id)
		return c != nil
	}
	if !exists(unused) || !exists(liveID) {
		t.Fatal("a client went before its time")
	}

	offset.Store(int64(24*time.Hour + time.Minute))
	st.WaitFor(t, 10*time.Second, "the unused client removed after 24 hours", func() bool { return !exists(unused) })
	if !exists(revokedID) || !exists(liveID) {
		t.Fatal("a used client was removed after 24 hours")
	}

	offset.Store(int64(30*24*time.Hour + time.Hour))
	st.WaitFor(t, 10*time.Second, "the revoked client removed after 30 days", func() bool { return !exists(revokedID) })
	if !exists(liveID) {
		t.Fatal("the client whose token lived until now was removed")
	}
}
