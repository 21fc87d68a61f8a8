package state

import (
	"fmt"
	"testing"
	"time"
)

// TestPendingDeliveriesAreBounded: a flood of demo events to a webhook
// that never answers keeps at most MaxPendingDeliveries of them pending
// (the newest); the oldest are failed with a reason and then trimmed
// with the other finished ones, so the workspace's deliveries stay
// bounded however many events come.
func TestPendingDeliveriesAreBounded(t *testing.T) {
	s := seed(t)
	must(t, s.Update(func(tx *Tx) error {
		return tx.PutWebhook(Webhook{WorkspaceID: "ws_a", URL: "https://h.example.com", SendEvents: true, SealedSecret: []byte{1},
			CreatedAt: t0, UpdatedAt: t0}, false)
	}))
	const events = 3000
	for i := range events {
		at := t0.Add(time.Duration(i) * time.Second)
		id := fmt.Sprintf("dlv_%05d", i)
		must(t, s.Update(func(tx *Tx) error {
			demo := &Demo{ID: fmt.Sprintf("demo_%05d", i), TemplateID: "tpl_1", WorkspaceID: "ws_a", CreatedAt: at}
			if err := insert(tx.tx, tableDemos, demo); err != nil {
				return err
			}
			return tx.DemoReady(demo.ID, at, &Delivery{ID: id, EventID: "evt_" + id, WorkspaceID: "ws_a", Event: "demo.ready",
				Body: []byte(`{}`), NextAt: at, CreatedAt: at})
		}))
	}
	pending, err := s.PendingDeliveries()
	must(t, err)
	if len(pending) > MaxPendingDeliveries {
		t.Fatalf("%d events left %d deliveries pending; the bound is %d", events, len(pending), MaxPendingDeliveries)
	}
	for _, d := range pending {
		var n int
		fmt.Sscanf(d.ID, "dlv_%d", &n)
		if n < events-MaxPendingDeliveries {
			t.Fatalf("an old delivery (%s) is pending while newer ones were dropped", d.ID)
		}
	}
	all, err := all[Delivery](s.read(), tableDeliveries, "workspace", "ws_a")
	must(t, err)
	if len(all) > MaxPendingDeliveries+keptDeliveries {
		t.Fatalf("the workspace holds %d deliveries", len(all))
	}
	if d, _ := s.Delivery(fmt.Sprintf("dlv_%05d", events-MaxPendingDeliveries-1)); d == nil || d.Status != DeliveryFailed || d.Error == "" {
		t.Fatalf("the newest dropped delivery: %+v", d)
	}
}
