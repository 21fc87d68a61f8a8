package oauth_test

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// TestOAuthRegistrationBurst: registrations sent from one address all at
// once (each in flight while the others are committed) get the address's
// hourly budget between them, not one each: a registration counts from
// when it is asked for, and only a refused one gives its slot back.
func TestOAuthRegistrationBurst(t *testing.T) {
	limits := api.DefaultRateLimits()
	s := st.Single(t, st.Options{RateLimits: &limits, Configure: func(c *server.Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}})
	anon := st.NewClient(t, s.URL(), "")
	from := []string{"X-Forwarded-For", "203.0.113.9"}
	// A refused registration costs nothing.
	for range 5 {
		anon.Do("POST", "/api/connect/register", map[string]any{"redirect_uris": []string{"ftp://x"}}, from...).Must(t, 400)
	}
	reg := map[string]any{"redirect_uris": []string{"https://cloner.example.com/cb"}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	statuses := map[int]int{}
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := anon.Do("POST", "/api/connect/register", reg, from...)
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[201] != api.DefaultRegistrationsPerHour || statuses[429] != 100-api.DefaultRegistrationsPerHour {
		t.Fatalf("100 registrations at once from one address: %v, want %d accepted and the rest 429",
			statuses, api.DefaultRegistrationsPerHour)
	}
}
