package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// TestTemplatesAPIWithoutAgents covers what the control plane decides on
// its own about templates: a source that is not ready, the free plan's
// three templates (402 with its details), launch on a free plan (402),
// another workspace's template and site (404), and bad PATCH fields.
func TestTemplatesAPIWithoutAgents(t *testing.T) {
	s := st.Single(t, st.Options{})
	fakeNode(t, s)
	alice := st.NewAccount(t, s, "alice@example.com", "free")
	bob := st.NewAccount(t, s, "bob@example.com", "paid")
	siteOf := func(a *st.Account) string {
		id := a.Do("POST", "/api/app/sites", map[string]any{"name": "Source"}).Must(t, 202).Str("site.id")
		if r := a.Do("POST", "/api/app/templates", map[string]any{"siteId": id, "name": "Early"}); r.Status != 400 || r.Details()["field"] != "siteId" {
			t.Fatalf("template of a site that is not ready: %d %s", r.Status, r.Raw)
		}
		// The fake node makes no site: mark it ready by hand.
		if _, err := s.Node().Apply(context.Background(), fsm.UpdateSite{Update: state.SiteUpdate{ID: id, Status: state.SiteReady}}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	aliceSite, bobSite := siteOf(alice), siteOf(bob)

	var ids []string
	for i := range 3 {
		r := alice.Do("POST", "/api/app/templates", map[string]any{"siteId": aliceSite, "name": "Demo"}).Must(t, 202)
		if r.Str("template.status") != "building" || r.Str("jobId") == "" {
			t.Fatalf("template %d: %s", i, r.Raw)
		}
		ids = append(ids, r.Str("template.id"))
	}
	r := alice.Do("POST", "/api/app/templates", map[string]any{"siteId": aliceSite, "name": "Demo"})
	if d := r.Details(); r.Status != 402 || r.Code() != "plan_limit_reached" || d["resource"] != "templates" || d["limit"] != float64(3) || d["plan"] != "free" {
		t.Fatalf("fourth template: %d %s", r.Status, r.Raw)
	}
	if n := len(alice.Do("GET", "/api/app/templates", nil).Must(t, 200).List("templates")); n != 3 {
		t.Fatalf("%d templates listed", n)
	}
	if r := alice.Do("POST", "/api/app/templates", map[string]any{"siteId": bobSite, "name": "Theirs"}); r.Status != 404 || r.Code() != "site_not_found" {
		t.Fatalf("another workspace's site: %d %s", r.Status, r.Raw)
	}
	for _, path := range []string{"/api/app/templates/" + ids[0], "/api/app/templates/tpl_nope"} {
		if r := bob.Do("GET", path, nil); r.Status != 404 || r.Code() != "template_not_found" {
			t.Fatalf("GET %s as another workspace: %d %s", path, r.Status, r.Raw)
		}
	}
	if r := bob.Do("POST", "/api/app/sites/"+bobSite+"/restore", map[string]any{"templateId": ids[0]}); r.Status != 404 || r.Code() != "template_not_found" {
		t.Fatalf("restore from another workspace's template: %d %s", r.Status, r.Raw)
	}
	if r := alice.Do("PATCH", "/api/app/templates/"+ids[0], map[string]any{"launchEnabled": true}); r.Status != 402 || r.Code() != "template_sharing_requires_paid_plan" {
		t.Fatalf("launch on a free plan: %d %s", r.Status, r.Raw)
	}
	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"launchLandingPath": "wp-admin"}, "launchLandingPath"},
		{map[string]any{"launchBranding": map[string]any{"accentColor": "blue"}}, "launchBranding.accentColor"},
		{map[string]any{"launchBranding": map[string]any{"logoUrl": "http://x.test/l.png"}}, "launchBranding.logoUrl"},
		{map[string]any{"slug": "mine"}, "slug"},
	} {
		if r := alice.Do("PATCH", "/api/app/templates/"+ids[0], tc.body); r.Status != 400 || r.Details()["field"] != tc.field {
			t.Fatalf("PATCH %v: %d %s", tc.body, r.Status, r.Raw)
		}
	}
	got := alice.Do("PATCH", "/api/app/templates/"+ids[0], map[string]any{"name": "Renamed", "launchEntryMode": "email"}).Must(t, 200)
	if got.Str("template.name") != "Renamed" || got.Str("template.launchEntryMode") != "email" || got.Str("template.slug") != "demo" {
		t.Fatalf("PATCH: %s", got.Raw)
	}
	// A template that is not ready (building, or failed: the fake node
	// freezes nothing) makes no site.
	if r := alice.Do("POST", "/api/app/templates/"+ids[0]+"/sites", map[string]any{}); r.Status != 400 || r.Details()["status"] == "ready" || r.Details()["status"] == nil {
		t.Fatalf("site from a building template: %d %s", r.Status, r.Raw)
	}
	// Leads: the launcher's (recorded here directly), of this template only.
	lead := state.Lead{ID: "lead_1", TemplateID: ids[1], WorkspaceID: alice.Personal, Email: "visitor@example.com", SiteID: "site_x",
		IPHash: "abc", CreatedAt: time.Now().UTC()}
	if _, err := s.Node().Apply(context.Background(), fsm.AddLead{Lead: lead}); err != nil {
		t.Fatal(err)
	}
	if l := alice.Do("GET", "/api/app/templates/"+ids[1]+"/leads", nil).Must(t, 200).List("leads"); len(l) != 1 || l[0]["email"] != "visitor@example.com" {
		t.Fatalf("leads: %v", l)
	}
	if l := alice.Do("GET", "/api/app/templates/"+ids[2]+"/leads", nil).Must(t, 200).List("leads"); len(l) != 0 {
		t.Fatalf("another template's leads: %v", l)
	}
	if r := bob.Do("GET", "/api/app/templates/"+ids[1]+"/leads", nil); r.Status != 404 || r.Code() != "template_not_found" {
		t.Fatalf("leads of another workspace's template: %d %s", r.Status, r.Raw)
	}
	alice.Do("DELETE", "/api/app/templates/"+ids[0], nil).Must(t, 200)
	if r := alice.Do("GET", "/api/app/templates/"+ids[0], nil); r.Status != 404 {
		t.Fatalf("deleted template: %d %s", r.Status, r.Raw)
	}
	// Its quota slot is free again.
	alice.Do("POST", "/api/app/templates", map[string]any{"siteId": aliceSite, "name": "Demo"}).Must(t, 202)
}
