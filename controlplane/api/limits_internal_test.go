package api

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/ratelimit"
)

// TestRegistrationsInFlightAreCounted: an address's OAuth registrations
// still being committed count against its budget, so requests sent at
// once (each passes the check before any is committed) get no more
// between them than the budget, not one per request in flight.
func TestRegistrationsInFlightAreCounted(t *testing.T) {
	l := newLimiters(RateLimits{Registrations: ratelimit.PerHour(3)}, time.Now, nil)
	req := httptest.NewRequest("POST", "/api/connect/register", nil)
	req.RemoteAddr = "198.51.100.7:40000"
	admitted := 0
	for range 50 { // fifty requests in flight: none committed yet
		if err := l.registration(req); err == nil {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("%d registrations in flight from one address passed its budget of 3", admitted)
	}
}
