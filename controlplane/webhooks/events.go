package webhooks

import (
	"encoding/json"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/webhookspec"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// Event is the contract's webhook payload, the same for both types.
type Event struct {
	ID           string    `json:"id"`
	Type         string    `json:"type" enum:"@webhookEvent"`
	OccurredAt   time.Time `json:"occurredAt"`
	WorkspaceID  string    `json:"workspaceId"`
	TemplateID   string    `json:"templateId"`
	SiteID       string    `json:"siteId"`
	SiteURL      string    `json:"siteUrl"`
	Email        *string   `json:"email" doc:"null when the launch link does not collect an email."`
	Status       string    `json:"status" enum:"@webhookDemoStatus"`
	Source       string    `json:"source" enum:"@webhookSource" doc:"test for the event POST …/test sends."`
	Consent      bool      `json:"consent"`
	ConsentLabel *string   `json:"consentLabel" doc:"The checkbox text the visitor saw; null when consent is disabled."`
}

// DemoEvent is the event of a demo's transition at a time: demo.ready
// (status ready) or demo.expired (status expired).
func DemoEvent(typ string, d *state.Demo, siteURL string, at time.Time) Event {
	e := Event{ID: ids.New(ids.Event), Type: typ, OccurredAt: at.UTC(), WorkspaceID: d.WorkspaceID, TemplateID: d.TemplateID,
		SiteID: d.SiteID, SiteURL: siteURL, Status: "ready", Source: "template_launch", Consent: d.Consent, ConsentLabel: d.ConsentLabel}
	if typ == webhookspec.DemoExpired {
		e.Status = "expired"
	}
	if d.Email != "" {
		email := d.Email
		e.Email = &email
	}
	return e
}

// TestEvent is what POST …/test sends: a demo.ready of made-up ids with
// source test, so a receiver can check its signature code end to end.
func TestEvent(workspaceID string, at time.Time) Event {
	email := "visitor@example.com"
	return Event{ID: ids.New(ids.Event), Type: webhookspec.DemoReady, OccurredAt: at.UTC(), WorkspaceID: workspaceID, TemplateID: "tpl_test",
		SiteID: "site_test", SiteURL: "https://test.invalid", Email: &email, Status: "ready", Source: "test"}
}

// Delivery is the queued delivery of an event: its body is fixed now, so
// every attempt sends the same bytes.
func Delivery(e Event, at time.Time) *state.Delivery {
	body, _ := json.Marshal(e) // plain strings and times: cannot fail
	return &state.Delivery{ID: ids.New(ids.Delivery), EventID: e.ID, WorkspaceID: e.WorkspaceID, Event: e.Type, Body: body,
		Status: state.DeliveryQueued, NextAt: at, CreatedAt: at}
}
