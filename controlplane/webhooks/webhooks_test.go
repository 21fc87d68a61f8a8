package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/webhookspec"
	"github.com/sandboxd/sandboxd/internal/safefetch"
	"github.com/sandboxd/sandboxd/internal/seal"
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
		return Message{URL: url, Secret: "s", DeliveryID: "dlv_1", EventID: "evt_1", Event: webhookspec.DemoReady, Body: []byte(`{}`)}
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

// TestDispatcherBacklog: a backlog of events, each failing once, is
// worked off with exactly two attempts per event, recorded as such: no
// attempt is sent twice from a stale read of the queue, whatever the
// order workers finish in.
func TestDispatcherBacklog(t *testing.T) {
	const events = 150
	store := state.NewStore()
	raft := fsm.NewLocal(store)
	ctx := context.Background()
	t0 := time.Now().UTC()
	apply := func(c fsm.Command) {
		t.Helper()
		if _, err := raft.Apply(ctx, c); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
	}
	apply(fsm.CreateAccount{Account: state.Account{ID: "usr_1", Email: "o@example.com", Plan: state.PlanPaid, CreatedAt: t0},
		Workspace: state.Workspace{ID: "ws_1", Name: "W", OwnerID: "usr_1", Personal: true, CreatedAt: t0}})
	tpl := state.Template{ID: "tpl_1", WorkspaceID: "ws_1", UserID: "usr_1", Slug: "t", Status: state.TemplateReady,
		Launch: state.Launch{Enabled: true, Token: "tok"}, CreatedAt: t0, UpdatedAt: t0}
	apply(fsm.CreateTemplateWithJob{Template: tpl, Job: state.Job{ID: "job_t", Type: "noop", WorkspaceID: "ws_1", Status: state.JobQueued, CreatedAt: t0},
		Quota: state.Quota{Plan: state.PlanPaid, Limit: 10}})

	var mu sync.Mutex
	seen := map[string]int{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get(HeaderDelivery)]++
		n := seen[r.Header.Get(HeaderDelivery)]
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer rcv.Close()
	sealer, err := seal.New("cluster-secret", "webhook-signing")
	if err != nil {
		t.Fatal(err)
	}
	apply(fsm.PutWebhook{Webhook: state.Webhook{WorkspaceID: "ws_1", URL: rcv.URL, SendEvents: true,
		SealedSecret: sealer.Seal("whsec_x", "ws_1"), CreatedAt: t0, UpdatedAt: t0}})
	for i := range events {
		id := fmt.Sprintf("%03d", i)
		site := state.Site{ID: "site_" + id, WorkspaceID: "ws_1", UserID: "usr_1", Slug: "s" + id, Status: state.SiteReady, CreatedAt: t0, UpdatedAt: t0}
		demo := state.Demo{ID: "demo_" + id, TemplateID: "tpl_1", WorkspaceID: "ws_1", SiteID: site.ID, Visitor: id, CreatedAt: t0}
		apply(fsm.CreateSiteWithJob{Site: site, Job: state.Job{ID: "job_" + id, Type: "noop", WorkspaceID: "ws_1", Status: state.JobQueued, CreatedAt: t0},
			Quota: state.Quota{Plan: state.PlanPaid, Limit: 1000}, Launch: &state.DemoLaunch{Demo: demo, Token: "tok"}})
		apply(fsm.DemoReady{DemoID: demo.ID, At: t0, Delivery: Delivery(DemoEvent(webhookspec.DemoReady, &demo, "http://s.localhost", t0), t0)})
	}
	d := &Dispatcher{Store: store, Raft: raft, Sender: NewSender([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil),
		Secret:   func(w *state.Webhook) (string, error) { return sealer.Open(w.SealedSecret, w.WorkspaceID) },
		Schedule: []time.Duration{time.Millisecond, time.Millisecond}, Poll: time.Millisecond, Workers: 8}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	// On the free plan (a downgrade) nothing is sent: the queue waits.
	apply(fsm.SetPlan{UserID: "usr_1", Plan: state.PlanFree, At: t0})
	go func() { d.Run(runCtx); close(done) }()
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	if len(seen) != 0 {
		t.Fatalf("%d sent on the free plan", len(seen))
	}
	mu.Unlock()
	apply(fsm.SetPlan{UserID: "usr_1", Plan: state.PlanPaid, At: t0})
	deadline := time.Now().Add(30 * time.Second)
	for {
		pending, _ := store.PendingDeliveries()
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries still pending", len(pending))
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != events {
		t.Fatalf("%d events received, want %d", len(seen), events)
	}
	for id, n := range seen {
		if n != 2 {
			t.Fatalf("delivery %s sent %d times, want 2 (one failure, one success)", id, n)
		}
		if got, _ := store.Delivery(id); got != nil && (got.Attempt != 2 || got.Status != state.DeliveryDelivered) {
			t.Fatalf("delivery %s recorded %+v", id, got)
		}
	}
}
