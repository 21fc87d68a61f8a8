package state

import (
	"errors"
	"testing"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// demoFixture is a workspace with a launch-enabled template and a ready
// site made from it.
func demoFixture(t *testing.T) (*Store, Template) {
	t.Helper()
	s := NewStore()
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateAccount(Account{ID: "usr_1", Email: "o@example.com", Plan: PlanPaid, CreatedAt: t0},
			Workspace{ID: "ws_a", Name: "A", OwnerID: "usr_1", Personal: true, CreatedAt: t0})
	}))
	tpl := Template{ID: "tpl_1", WorkspaceID: "ws_a", UserID: "usr_1", Slug: "t", Status: TemplateReady,
		Launch: Launch{Enabled: true, Token: "tok1", QuotaMode: "visitor"}, CreatedAt: t0, UpdatedAt: t0}
	must(t, s.Update(func(tx *Tx) error {
		return tx.run(func(txn *memdb.Txn) error { return insert(txn, tableTemplates, &tpl) })
	}))
	return s, tpl
}

func site(id string, t0 time.Time) Site {
	return Site{ID: id, WorkspaceID: "ws_a", UserID: "usr_1", Slug: id, Status: SiteReady, CreatedAt: t0, UpdatedAt: t0}
}

func launchOf(id, visitor, ip string, at time.Time) DemoLaunch {
	return DemoLaunch{Demo: Demo{ID: "demo_" + id, TemplateID: "tpl_1", WorkspaceID: "ws_a", SiteID: "site_" + id,
		Visitor: visitor, IPHash: ip, CreatedAt: at}, Token: "tok1", OnePerVisitor: true}
}

// TestLaunched: a launch adds its demo and lead and counts once; under
// the visitor quota a second live demo of the same cookie or address is
// refused (and writes nothing); a disabled link or another token
// launches nothing; a PATCH that read the template before a launch does
// not write the older count back.
func TestLaunched(t *testing.T) {
	s, tpl := demoFixture(t)
	t0 := tpl.CreatedAt
	q := Quota{Plan: PlanPaid, Resource: "sites", Limit: 100}
	launch := func(l DemoLaunch) error {
		return s.Update(func(tx *Tx) error {
			if err := tx.CreateSite(site(l.Demo.SiteID, t0), q); err != nil {
				return err
			}
			return tx.Launched(l)
		})
	}
	first := launchOf("a", "v1", "ip1", t0)
	first.Lead = &Lead{ID: "lead_a", TemplateID: "tpl_1", WorkspaceID: "ws_a", Email: "a@example.com", SiteID: "site_a", CreatedAt: t0}
	must(t, launch(first))
	for name, l := range map[string]DemoLaunch{
		"same cookie":  launchOf("b", "v1", "ip2", t0.Add(time.Minute)),
		"same address": launchOf("c", "v2", "ip1", t0.Add(time.Minute)),
	} {
		if err := launch(l); !errors.Is(err, ErrConflict) {
			t.Fatalf("%s: %v", name, err)
		}
		if site, _ := s.Site(l.Demo.SiteID); site != nil {
			t.Fatalf("%s: the refused launch left its site", name)
		}
	}
	other := launchOf("d", "v3", "ip3", t0)
	other.Token = "stale"
	if err := launch(other); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another token: %v", err)
	}
	unlimited := launchOf("e", "v1", "ip1", t0)
	unlimited.OnePerVisitor = false
	must(t, launch(unlimited))

	got, _ := s.Template("tpl_1")
	if got.Launch.Count != 2 {
		t.Fatalf("count %d", got.Launch.Count)
	}
	if ls, _ := s.LeadsOf("tpl_1"); len(ls) != 1 || ls[0].SiteID != "site_a" {
		t.Fatalf("leads %+v", ls)
	}
	// A PATCH that read the template before the launches keeps their count.
	stale := tpl
	stale.Name = "renamed"
	must(t, s.Update(func(tx *Tx) error { return tx.PutTemplate(stale, nil) }))
	if got, _ := s.Template("tpl_1"); got.Launch.Count != 2 || got.Name != "renamed" {
		t.Fatalf("after PATCH: %+v", got.Launch)
	}
	stale.Launch.Token = "changed"
	if err := s.Update(func(tx *Tx) error { return tx.PutTemplate(stale, nil) }); !errors.Is(err, ErrConflict) {
		t.Fatalf("token changed: %v", err)
	}
	if byTok, _ := s.TemplateByLaunchToken("tok1"); byTok == nil || byTok.ID != "tpl_1" {
		t.Fatalf("by token: %+v", byTok)
	}
	// Once the lease is over, the visitor may launch again.
	d, _ := s.Demo("demo_a")
	exp := t0.Add(time.Hour)
	d2 := *d
	d2.ExpiresAt = &exp
	must(t, s.Update(func(tx *Tx) error { return tx.run(func(txn *memdb.Txn) error { return insert(txn, tableDemos, &d2) }) }))
	if live, _ := s.LiveDemoOf("tpl_1", "v1", "ip1", t0.Add(2*time.Hour)); live != nil && live.ID == "demo_a" {
		t.Fatalf("an expired demo is live: %+v", live)
	}
	// Disabled: no launch.
	off := tpl
	off.Launch.Enabled = false
	must(t, s.Update(func(tx *Tx) error { return tx.PutTemplate(off, nil) }))
	if err := launch(launchOf("f", "v9", "ip9", t0)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("disabled link: %v", err)
	}
}

// TestDeliveries: an event is queued only while the webhook sends
// events; marking a demo ready twice queues once; an attempt is recorded
// once, in order; deleting the webhook takes its deliveries.
func TestDeliveries(t *testing.T) {
	s, tpl := demoFixture(t)
	t0 := tpl.CreatedAt
	must(t, s.Update(func(tx *Tx) error {
		if err := tx.CreateSite(site("site_a", t0), Quota{Plan: PlanPaid, Limit: 10}); err != nil {
			return err
		}
		return tx.Launched(launchOf("a", "v1", "ip1", t0))
	}))
	del := func(id string) *Delivery {
		return &Delivery{ID: id, EventID: "evt_" + id, WorkspaceID: "ws_a", Event: "demo.ready", Body: []byte(`{}`), NextAt: t0, CreatedAt: t0}
	}
	// No webhook: nothing queued, but the demo is marked ready.
	must(t, s.Update(func(tx *Tx) error { return tx.DemoReady("demo_a", t0, del("dlv_0")) }))
	if ds, _ := s.PendingDeliveries(); len(ds) != 0 {
		t.Fatalf("queued without a webhook: %d", len(ds))
	}
	hook := Webhook{WorkspaceID: "ws_a", URL: "https://h.example.com", SendEvents: true, SealedSecret: []byte{1}, CreatedAt: t0, UpdatedAt: t0}
	must(t, s.Update(func(tx *Tx) error { return tx.PutWebhook(hook, false) }))
	// Already ready: a second DemoReady queues nothing.
	must(t, s.Update(func(tx *Tx) error { return tx.DemoReady("demo_a", t0, del("dlv_1")) }))
	if ds, _ := s.PendingDeliveries(); len(ds) != 0 {
		t.Fatalf("queued twice: %d", len(ds))
	}
	must(t, s.Update(func(tx *Tx) error { return tx.EndDemo("demo_a", del("dlv_2")) }))
	must(t, s.Update(func(tx *Tx) error { return tx.EndDemo("demo_a", del("dlv_3")) })) // gone: nothing
	ds, _ := s.PendingDeliveries()
	if len(ds) != 1 || ds[0].ID != "dlv_2" || ds[0].Status != DeliveryQueued {
		t.Fatalf("pending: %+v", ds)
	}
	attempt := func(n int, status string) error {
		return s.Update(func(tx *Tx) error {
			return tx.RecordAttempt(Attempt{ID: "dlv_2", Attempt: n, Status: status, HTTPStatus: 500, At: t0, NextAt: t0.Add(time.Second)})
		})
	}
	must(t, attempt(1, DeliveryRetrying))
	if err := attempt(1, DeliveryRetrying); !errors.Is(err, ErrStale) {
		t.Fatalf("attempt 1 twice: %v", err)
	}
	if err := attempt(3, DeliveryRetrying); !errors.Is(err, ErrStale) {
		t.Fatalf("attempt 3 before 2: %v", err)
	}
	must(t, attempt(2, DeliveryDelivered))
	if err := attempt(3, DeliveryRetrying); !errors.Is(err, ErrStale) {
		t.Fatalf("an attempt after delivery: %v", err)
	}
	if last, _ := s.LastDelivery("ws_a"); last == nil || last.ID != "dlv_2" || last.Attempt != 2 || !last.Done {
		t.Fatalf("last: %+v", last)
	}
	// Paused: new events are not queued.
	hook.SendEvents = false
	must(t, s.Update(func(tx *Tx) error { return tx.PutWebhook(hook, false) }))
	must(t, s.Update(func(tx *Tx) error {
		if err := tx.CreateSite(site("site_b", t0), Quota{Plan: PlanPaid, Limit: 10}); err != nil {
			return err
		}
		return tx.Launched(launchOf("b", "v2", "ip2", t0))
	}))
	must(t, s.Update(func(tx *Tx) error { return tx.DemoReady("demo_b", t0, del("dlv_4")) }))
	if d, _ := s.Delivery("dlv_4"); d != nil {
		t.Fatalf("queued while paused: %+v", d)
	}
	must(t, s.Update(func(tx *Tx) error { return tx.DeleteWebhook("ws_a") }))
	if d, _ := s.Delivery("dlv_2"); d != nil {
		t.Fatal("a delivery outlived its webhook")
	}
	if w, _ := s.Webhook("ws_a"); w != nil {
		t.Fatal("webhook kept")
	}
}

// TestLastDeliveryInOneMillisecond: two attempts recorded at the same
// time (one millisecond, as two quick test deliveries are): the one
// recorded last is the workspace's last delivery, whatever the ids.
func TestLastDeliveryInOneMillisecond(t *testing.T) {
	s, tpl := demoFixture(t)
	t0 := tpl.CreatedAt
	hook := Webhook{WorkspaceID: "ws_a", URL: "https://h.example.com", SendEvents: true, SealedSecret: []byte{1}, CreatedAt: t0, UpdatedAt: t0}
	must(t, s.Update(func(tx *Tx) error { return tx.PutWebhook(hook, false) }))
	for _, id := range []string{"dlv_z", "dlv_m", "dlv_a"} {
		at := t0
		d := Delivery{ID: id, EventID: "evt_" + id, WorkspaceID: "ws_a", Event: "demo.ready", Body: []byte(`{}`), Status: DeliveryDelivered,
			Attempt: 1, At: &at, NextAt: t0, CreatedAt: t0}
		must(t, s.Update(func(tx *Tx) error { return tx.AddDelivery(d) }))
		if last, _ := s.LastDelivery("ws_a"); last == nil || last.ID != id {
			t.Fatalf("after %s the last delivery is %+v", id, last)
		}
	}
}
