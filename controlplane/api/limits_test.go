package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/ratelimit"
)

// fakeClock is a settable clock for the server's handlers and limits.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestRateLimits walks one server through the limits, calling its whole
// HTTP stack with chosen client addresses: failed authentications per
// address (a spent address is refused before its token is looked at,
// other addresses are not), their refill on an injected clock, writes per
// token and per address, and reads, which are never write-limited.
func TestRateLimits(t *testing.T) {
	clock := &fakeClock{t: time.Now().UTC()}
	limits := api.RateLimits{
		AuthFailures: ratelimit.PerMinute(3),            // a failure back every 20 s
		TokenWrites:  ratelimit.Rule{Rate: 1, Burst: 3}, // a write back every second
		IPWrites:     ratelimit.Rule{Rate: 1, Burst: 4},
	}
	s := st.Single(t, st.Options{RateLimits: &limits, Configure: func(c *server.Config) { c.Now = clock.Now }})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	bob := st.NewAccount(t, s, "bob@example.com", "paid")
	const bad = "sbx_0000000000000000000000000000000000000000000"

	type step struct {
		name      string
		advance   time.Duration
		method    string
		path      string
		token, ip string
		status    int
		limit     string // details.limit of a 429
		retry     string // its Retry-After
	}
	me, write := "/api/account/me", "/api/account/tokens/tok_none" // a write that fails after the limits
	steps := []step{
		{name: "bad token 1", method: "GET", path: me, token: bad, ip: "198.51.100.1", status: 401},
		{name: "no token", method: "GET", path: me, ip: "198.51.100.1", status: 401},
		{name: "bad token 3", method: "GET", path: me, token: "garbage", ip: "198.51.100.1", status: 401},
		{name: "spent", method: "GET", path: me, token: bad, ip: "198.51.100.1", status: 429, limit: "auth_failures", retry: "20"},
		{name: "a valid token from the spent address", method: "GET", path: me, token: alice.Token, ip: "198.51.100.1", status: 429, limit: "auth_failures", retry: "20"},
		{name: "the operator routes share the count", method: "GET", path: "/api/admin/accounts", token: "sbxc_wrong", ip: "198.51.100.1", status: 429, limit: "auth_failures"},
		{name: "a valid token from another address", method: "GET", path: me, token: alice.Token, ip: "198.51.100.2", status: 200},
		{name: "a bad one from another address", method: "GET", path: me, token: bad, ip: "198.51.100.2", status: 401},
		{name: "IPv6 neighbours share a /64", method: "GET", path: me, token: bad, ip: "[2001:db8::1]", status: 401},
		{name: "", method: "GET", path: me, token: bad, ip: "[2001:db8::2]", status: 401},
		{name: "", method: "GET", path: me, token: bad, ip: "[2001:db8::3]", status: 401},
		{name: "the /64 is spent", method: "GET", path: me, token: alice.Token, ip: "[2001:db8::ffff]", status: 429, limit: "auth_failures"},
		{name: "one failure refilled", advance: 20 * time.Second, method: "GET", path: me, token: alice.Token, ip: "198.51.100.1", status: 200},
		{name: "a success costs nothing", method: "GET", path: me, token: alice.Token, ip: "198.51.100.1", status: 200},
		{name: "the refilled failure", method: "GET", path: me, token: bad, ip: "198.51.100.1", status: 401},
		{name: "spent again", method: "GET", path: me, token: alice.Token, ip: "198.51.100.1", status: 429, limit: "auth_failures", retry: "20"},

		{name: "write 1", method: "DELETE", path: write, token: alice.Token, ip: "203.0.113.1", status: 404},
		{name: "write 2", method: "DELETE", path: write, token: alice.Token, ip: "203.0.113.1", status: 404},
		{name: "write 3", method: "DELETE", path: write, token: alice.Token, ip: "203.0.113.1", status: 404},
		{name: "the token's writes are spent", method: "DELETE", path: write, token: alice.Token, ip: "203.0.113.2", status: 429, limit: "token_writes", retry: "1"},
		{name: "reads are not write-limited", method: "GET", path: me, token: alice.Token, ip: "203.0.113.1", status: 200},
		{name: "another token, same address", method: "DELETE", path: write, token: bob.Token, ip: "203.0.113.1", status: 404},
		{name: "the address's writes are spent", method: "DELETE", path: write, token: bob.Token, ip: "203.0.113.1", status: 429, limit: "ip_writes", retry: "1"},
		{name: "a refused write cost the token nothing", method: "DELETE", path: write, token: bob.Token, ip: "203.0.113.3", status: 404},
		{name: "refilled", advance: time.Second, method: "DELETE", path: write, token: alice.Token, ip: "203.0.113.1", status: 404},
	}
	for i, tt := range steps {
		clock.Add(tt.advance)
		req := httptest.NewRequest(tt.method, tt.path, nil)
		req.RemoteAddr = tt.ip + ":40000"
		if tt.token != "" {
			req.Header.Set("Authorization", "Bearer "+tt.token)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		var env struct {
			Error struct {
				Code    string         `json:"code"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &env)
		name := tt.name
		if name == "" {
			name = steps[i-1].name
		}
		if rec.Code != tt.status {
			t.Fatalf("step %d (%s): %d %s", i, name, rec.Code, rec.Body)
		}
		if tt.status != http.StatusTooManyRequests {
			continue
		}
		retry := rec.Header().Get("Retry-After")
		if env.Error.Code != "rate_limited" || env.Error.Details["limit"] != tt.limit || retry == "" ||
			env.Error.Details["retryAfterSeconds"] == nil || (tt.retry != "" && retry != tt.retry) {
			t.Fatalf("step %d (%s): Retry-After %q, %s", i, name, retry, rec.Body)
		}
	}

	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	metrics, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`sandboxd_http_rate_limited_total{limit="auth_failures"} 5`,
		`sandboxd_http_rate_limited_total{limit="token_writes"} 1`,
		`sandboxd_http_rate_limited_total{limit="ip_writes"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
