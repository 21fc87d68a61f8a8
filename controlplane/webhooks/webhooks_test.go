package webhooks

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/safefetch"
)

// TestSign: the signature is "sha256=" and the unpadded base64url of the
// HMAC-SHA256 of the raw body (RFC 4231 test case 2's key and data).
func TestSign(t *testing.T) {
	got := Sign("Jefe", []byte("what do ya want for nothing?"))
	// 5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843 in hex.
	want := "sha256=W9zBRr9gdU5qBCQmCJV1x1oAPwidJzmDnexYuWTsOEM"
	if got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if strings.ContainsAny(strings.TrimPrefix(got, "sha256="), "+/=") {
		t.Fatalf("not unpadded base64url: %s", got)
	}
}

// TestOutcome: 2xx is delivered; a failure retries on the schedule, each
// wait within ±20%; the last attempt's failure is final.
func TestOutcome(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	fail := errors.New("answered 503")
	if a := Outcome(3, 8, DefaultSchedule, 200, nil, now, 0.5); a.Status != state.DeliveryDelivered || a.Error != "" || !a.NextAt.IsZero() {
		t.Fatalf("delivered: %+v", a)
	}
	for n := 1; n < 8; n++ {
		wait := DefaultSchedule[n-1]
		for _, u := range []float64{0, 0.5, 0.999} {
			a := Outcome(n, 8, DefaultSchedule, 503, fail, now, u)
			got := a.NextAt.Sub(now)
			if a.Status != state.DeliveryRetrying || got < time.Duration(float64(wait)*0.8) || got > time.Duration(float64(wait)*1.2) {
				t.Fatalf("attempt %d u=%v: %s after, want %s ±20%% (%+v)", n, u, got, wait, a)
			}
		}
	}
	if a := Outcome(8, 8, DefaultSchedule, 503, fail, now, 0.5); a.Status != state.DeliveryFailed || a.Error != "answered 503" || a.HTTPStatus != 503 {
		t.Fatalf("last attempt: %+v", a)
	}
	long := errors.New(strings.Repeat("é", 400))
	if a := Outcome(1, 8, DefaultSchedule, 0, long, now, 0); len(a.Error) > maxError || !strings.HasPrefix(long.Error(), a.Error) {
		t.Fatalf("error kept: %d bytes", len(a.Error))
	}
}

// TestSender: no redirect is followed; https and http reach loopback only
// through the allow-list; plain http never reaches a public address.
func TestSender(t *testing.T) {
	hits := 0
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/final", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer redirect.Close()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	ctx := context.Background()
	msg := func(url string) Message {
		return Message{URL: url, Secret: "s", DeliveryID: "dlv_1", EventID: "evt_1", Event: DemoReady, Body: []byte(`{}`)}
	}

	allowed := NewSender(loopback, nil)
	if code, err := allowed.Send(ctx, msg(redirect.URL+"/moved")); code != 302 || err == nil || !strings.Contains(err.Error(), "not followed") || hits != 1 {
		t.Fatalf("redirect: %d %v (%d hits)", code, err, hits)
	}
	if code, err := allowed.Send(ctx, msg(redirect.URL+"/ok")); code != 204 || err != nil {
		t.Fatalf("allow-listed http: %d %v", code, err)
	}
	closed := NewSender(nil, nil)
	if _, err := closed.Send(ctx, msg(redirect.URL+"/ok")); !errors.Is(err, safefetch.ErrBlocked) {
		t.Fatalf("loopback without the allow-list: %v", err)
	}
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tlsSrv.Close()
	if _, err := closed.Send(ctx, msg(tlsSrv.URL)); !errors.Is(err, safefetch.ErrBlocked) {
		t.Fatalf("https to loopback without the allow-list: %v", err)
	}
	if _, err := allowed.Send(ctx, msg(tlsSrv.URL)); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("an untrusted certificate: %v", err)
	}
	// Plain http to an address off the allow-list is refused at dial time,
	// before the connect (192.0.2.1 is documentation space).
	public := NewSender([]netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, nil)
	if _, err := public.Send(ctx, msg("http://192.0.2.1:1/x")); !errors.Is(err, safefetch.ErrBlocked) {
		t.Fatalf("plain http to a public address: %v", err)
	}
	if _, err := allowed.Send(ctx, msg("ftp://127.0.0.1/x")); err == nil {
		t.Fatal("an ftp URL was sent")
	}
}
