package server_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/ratelimit"
)

// TestLimitsFollowTheClientThroughFollowers: a follower forwards API
// requests to the leader, which keeps the limits; it vouches for the
// client's address over the cluster port (a server's certificate), so
// the leader counts each
// attempt once, against the client (here named by a trusted proxy's
// X-Forwarded-For), and a client cannot forge the vouching.
func TestLimitsFollowTheClientThroughFollowers(t *testing.T) {
	limits := api.RateLimits{AuthFailures: ratelimit.PerMinute(2)}
	frozen := time.Now().UTC()
	servers, _ := st.Cluster(t, 2, st.Options{RateLimits: &limits, Configure: func(c *server.Config) {
		c.Now = func() time.Time { return frozen }
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} // as if behind a load balancer
	}})
	leader := st.Leader(t, servers)
	follower := servers[0]
	if follower == leader {
		follower = servers[1]
	}
	alice := st.NewAccount(t, leader, "alice@example.com", "paid")
	viaFollower := st.NewClient(t, follower.URL(), alice.Token)
	direct := st.NewClient(t, leader.URL(), alice.Token)
	const bad = "sbx_0000000000000000000000000000000000000000000"

	steps := []struct {
		name   string
		c      *st.Client
		token  string
		header []string
		status int
	}{
		{"failure 1, through the follower", viaFollower, bad, []string{"X-Forwarded-For", "198.51.100.7"}, 401},
		{"failure 2, through the follower", viaFollower, bad, []string{"X-Forwarded-For", "198.51.100.7"}, 401},
		{"spent after exactly two: counted once, on the leader", viaFollower, alice.Token, []string{"X-Forwarded-For", "198.51.100.7"}, 429},
		{"the same client straight to the leader", direct, alice.Token, []string{"X-Forwarded-For", "198.51.100.7"}, 429},
		// Without the follower's word the leader would see the follower's
		// own view (127.0.0.1, the client of this test) for everyone.
		{"another client through the follower", viaFollower, alice.Token, []string{"X-Forwarded-For", "198.51.100.8"}, 200},
		{"a forged vouch to the leader is ignored", direct, alice.Token,
			[]string{"X-Sandboxd-Client-Ip", "198.51.100.7", "X-Sandboxd-Client-Ip-Sig", "00"}, 200},
		{"a forged vouch through the follower is replaced", viaFollower, alice.Token,
			[]string{"X-Sandboxd-Client-Ip", "198.51.100.7", "X-Sandboxd-Client-Ip-Sig", "00", "X-Forwarded-For", "198.51.100.9"}, 200},
	}
	for _, s := range steps {
		r := s.c.As(s.token).Do("GET", "/api/account/me", nil, s.header...)
		if r.Status != s.status || (s.status == 429 && r.Code() != "rate_limited") {
			t.Fatalf("%s: %d %s", s.name, r.Status, r.Raw)
		}
	}
}
