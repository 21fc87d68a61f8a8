package templates

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/templatespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

type world struct {
	svc   *Service
	store *state.Store
	ws    *state.Workspace
	other *state.Workspace
	acct  *state.Account
}

func newWorld(t *testing.T, plan string) *world {
	t.Helper()
	store := state.NewStore()
	acct := state.Account{ID: "usr_a", Email: "a@x.io", Plan: plan, PersonalWorkspaceID: "ws_a"}
	ws := state.Workspace{ID: "ws_a", OwnerID: "usr_a", Name: "A"}
	bob := state.Account{ID: "usr_b", Email: "b@x.io", Plan: state.PlanPaid, PersonalWorkspaceID: "ws_b"}
	other := state.Workspace{ID: "ws_b", OwnerID: "usr_b", Name: "B"}
	now := time.Unix(1700000000, 0).UTC()
	sites := []state.Site{
		{ID: "site_ready", WorkspaceID: "ws_a", UserID: "usr_a", Slug: "ready", Status: state.SiteReady, PHPVersion: "8.2",
			WordPressVersion: "6.1.1", NodeID: "node_1", CreatedAt: now, UpdatedAt: now},
		{ID: "site_making", WorkspaceID: "ws_a", UserID: "usr_a", Slug: "making", Status: state.SiteCreating, PHPVersion: "8.2",
			NodeID: "node_1", CreatedAt: now, UpdatedAt: now},
		{ID: "site_bobs", WorkspaceID: "ws_b", UserID: "usr_b", Slug: "bobs", Status: state.SiteReady, PHPVersion: "8.2",
			NodeID: "node_1", CreatedAt: now, UpdatedAt: now},
	}
	err := store.Update(func(tx *state.Tx) error {
		if err := tx.CreateAccount(acct, ws); err != nil {
			return err
		}
		if err := tx.CreateAccount(bob, other); err != nil {
			return err
		}
		for _, s := range sites {
			if err := tx.CreateSite(s, state.Quota{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return &world{svc: New(Config{Store: store, Raft: fsm.NewLocal(store), Plans: plans.Default(), Now: func() time.Time { return now }}),
		store: store, ws: &ws, other: &other, acct: &acct}
}

func code(err error) string {
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

func field(err error) any {
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return ae.Details["field"]
	}
	return nil
}

// TestCreate: a template is made from a ready site of the workspace with
// its freeze job in one entry; every refusal is the contract's error and
// writes nothing.
func TestCreate(t *testing.T) {
	tests := []struct {
		name   string
		in     templatespec.Create
		code   string
		field  string
		status string
	}{
		{name: "ready site", in: templatespec.Create{SiteID: "site_ready", Name: "Shop demo"}},
		{name: "no name", in: templatespec.Create{SiteID: "site_ready"}, code: apierr.CodeInvalidRequest, field: "name"},
		{name: "long name", in: templatespec.Create{SiteID: "site_ready", Name: string(make([]byte, 101))}, code: apierr.CodeInvalidRequest, field: "name"},
		{name: "no site", in: templatespec.Create{Name: "x"}, code: apierr.CodeInvalidRequest, field: "siteId"},
		{name: "unknown site", in: templatespec.Create{SiteID: "site_none", Name: "x"}, code: apierr.CodeSiteNotFound},
		{name: "another workspace's site", in: templatespec.Create{SiteID: "site_bobs", Name: "x"}, code: apierr.CodeSiteNotFound},
		{name: "site not ready", in: templatespec.Create{SiteID: "site_making", Name: "x"}, code: apierr.CodeInvalidRequest, field: "siteId", status: state.SiteCreating},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, state.PlanFree)
			tt.in.Workspace, tt.in.By = w.ws, w.acct
			tpl, jobID, err := w.svc.Create(context.Background(), tt.in)
			have, _ := w.store.TemplatesOf(w.ws.ID)
			if tt.code != "" {
				if code(err) != tt.code || (tt.field != "" && field(err) != tt.field) {
					t.Fatalf("err %v, want %s field %q", err, tt.code, tt.field)
				}
				if tt.status != "" {
					var ae *apierr.Error
					if errors.As(err, &ae); ae.Details["status"] != tt.status {
						t.Fatalf("details %v", ae.Details)
					}
				}
				if len(have) != 0 {
					t.Fatalf("a refused create wrote %d templates", len(have))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tpl.Status != state.TemplateBuilding || tpl.Slug != "shop-demo" || tpl.PHPVersion != "8.2" || tpl.WordPressVersion != "6.1.1" ||
				tpl.NodeID != "node_1" || tpl.SourceSiteID != "site_ready" || tpl.UserID != "usr_a" || tpl.Launch.Enabled || tpl.Launch.Token != "" {
				t.Fatalf("template %+v", tpl)
			}
			job, _ := w.store.Job(jobID)
			var p jobspec.TemplatePayload
			if job == nil || json.Unmarshal(job.Payload, &p) != nil || p.TemplateID != tpl.ID || job.Type != jobspec.SnapshotTemplate ||
				job.SiteID != "site_ready" || job.WorkspaceID != w.ws.ID {
				t.Fatalf("job %+v", job)
			}
			if len(have) != 1 {
				t.Fatalf("%d templates", len(have))
			}
		})
	}
}

// TestCreateQuotaAndSlugs: the free plan holds three templates (the
// fourth is 402 with its details); equal names get numbered slugs.
func TestCreateQuotaAndSlugs(t *testing.T) {
	w := newWorld(t, state.PlanFree)
	var slugs []string
	for i := 0; i < 3; i++ {
		tpl, _, err := w.svc.Create(context.Background(), templatespec.Create{Workspace: w.ws, By: w.acct, SiteID: "site_ready", Name: "Demo"})
		if err != nil {
			t.Fatal(err)
		}
		slugs = append(slugs, tpl.Slug)
	}
	if slugs[0] != "demo" || slugs[1] != "demo-2" || slugs[2] != "demo-3" {
		t.Fatalf("slugs %v", slugs)
	}
	_, _, err := w.svc.Create(context.Background(), templatespec.Create{Workspace: w.ws, By: w.acct, SiteID: "site_ready", Name: "Demo"})
	var ae *apierr.Error
	if !errors.As(err, &ae) {
		var qe *state.QuotaError
		if !errors.As(err, &qe) || qe.Quota.Resource != plans.Templates || qe.Quota.Limit != 3 {
			t.Fatalf("fourth template: %v", err)
		}
	}
	if have, _ := w.store.TemplatesOf(w.ws.ID); len(have) != 3 {
		t.Fatalf("%d templates after the refused one", len(have))
	}
}

func ptr[T any](v T) *T { return &v }

// TestUpdate: every PATCH field is checked; launch and the warm pool need
// a paid plan; the launch token is made once and never changes.
func TestUpdate(t *testing.T) {
	tests := []struct {
		name  string
		plan  string
		patch templatespec.Patch
		code  string
		field string
		check func(t *testing.T, tpl *state.Template)
	}{
		{name: "name and description", patch: templatespec.Patch{Name: ptr(" New name "), Description: ptr("About it")},
			check: func(t *testing.T, tpl *state.Template) {
				if tpl.Name != "New name" || tpl.Description != "About it" || tpl.Slug != "demo" {
					t.Fatalf("%+v", tpl)
				}
			}},
		{name: "empty name", patch: templatespec.Patch{Name: ptr(" ")}, code: apierr.CodeInvalidRequest, field: "name"},
		{name: "launch on free", plan: state.PlanFree, patch: templatespec.Patch{LaunchEnabled: ptr(true)}, code: apierr.CodeTemplateSharingRequiresPaidPlan},
		{name: "launch settings on free while off", plan: state.PlanFree, patch: templatespec.Patch{LaunchEntryMode: ptr("email"), LaunchLandingPath: ptr("/shop/")},
			check: func(t *testing.T, tpl *state.Template) {
				if tpl.Launch.EntryMode != "email" || tpl.Launch.LandingPath != "/shop/" || tpl.Launch.Enabled {
					t.Fatalf("%+v", tpl.Launch)
				}
			}},
		{name: "launch on paid", patch: templatespec.Patch{LaunchEnabled: ptr(true), LaunchBranding: &templatespec.BrandingPatch{AccentColor: ptr("#1e40af"),
			LogoURL: ptr("https://cdn.example.com/logo.png"), Headline: ptr("Try <b>it</b>")}},
			check: func(t *testing.T, tpl *state.Template) {
				if !tpl.Launch.Enabled || len(tpl.Launch.Token) < 20 || tpl.Launch.Branding.AccentColor != "#1e40af" ||
					tpl.Launch.Branding.Headline != "Try <b>it</b>" || tpl.Launch.Branding.ButtonLabel != "Launch demo" {
					t.Fatalf("%+v", tpl.Launch)
				}
			}},
		{name: "bad quota mode", patch: templatespec.Patch{LaunchQuotaMode: ptr("everyone")}, code: apierr.CodeInvalidRequest, field: "launchQuotaMode"},
		{name: "bad entry mode", patch: templatespec.Patch{LaunchEntryMode: ptr("")}, code: apierr.CodeInvalidRequest, field: "launchEntryMode"},
		{name: "bad expiration mode", patch: templatespec.Patch{LaunchExpirationMode: ptr("forever")}, code: apierr.CodeInvalidRequest, field: "launchExpirationMode"},
		{name: "expiration minutes", patch: templatespec.Patch{LaunchExpirationMinutes: ptr(0)}, code: apierr.CodeInvalidRequest, field: "launchExpirationMinutes"},
		{name: "landing path without slash", patch: templatespec.Patch{LaunchLandingPath: ptr("wp-admin/")}, code: apierr.CodeInvalidRequest, field: "launchLandingPath"},
		{name: "landing path to another host", patch: templatespec.Patch{LaunchLandingPath: ptr("//evil.example/")}, code: apierr.CodeInvalidRequest, field: "launchLandingPath"},
		{name: "landing path with a newline", patch: templatespec.Patch{LaunchLandingPath: ptr("/a\nb")}, code: apierr.CodeInvalidRequest, field: "launchLandingPath"},
		{name: "colour", patch: templatespec.Patch{LaunchBranding: &templatespec.BrandingPatch{BackgroundColor: ptr("red;}body{")}}, code: apierr.CodeInvalidRequest, field: "launchBranding.backgroundColor"},
		{name: "http logo", patch: templatespec.Patch{LaunchBranding: &templatespec.BrandingPatch{LogoURL: ptr("http://cdn.example.com/l.png")}}, code: apierr.CodeInvalidRequest, field: "launchBranding.logoUrl"},
		{name: "javascript image", patch: templatespec.Patch{LaunchBranding: &templatespec.BrandingPatch{BackgroundImageURL: ptr("javascript:alert(1)")}}, code: apierr.CodeInvalidRequest, field: "launchBranding.backgroundImageUrl"},
		{name: "long headline", patch: templatespec.Patch{LaunchBranding: &templatespec.BrandingPatch{Headline: ptr(string(make([]rune, 201)))}}, code: apierr.CodeInvalidRequest, field: "launchBranding.headline"},
		{name: "consent label on two lines", patch: templatespec.Patch{LaunchConsentLabel: ptr("a\nb")}, code: apierr.CodeInvalidRequest, field: "launchConsentLabel"},
		{name: "warm pool on free", plan: state.PlanFree, patch: templatespec.Patch{WarmPoolSize: ptr(2)}, code: apierr.CodePlanLimitReached},
		{name: "warm pool too big", patch: templatespec.Patch{WarmPoolSize: ptr(11)}, code: apierr.CodeInvalidRequest, field: "warmPoolSize"},
		{name: "warm pool", patch: templatespec.Patch{WarmPoolSize: ptr(3)}, check: func(t *testing.T, tpl *state.Template) {
			if tpl.WarmPoolSize != 3 {
				t.Fatalf("%+v", tpl)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := tt.plan
			if plan == "" {
				plan = state.PlanPaid
			}
			w := newWorld(t, plan)
			tpl, _, err := w.svc.Create(context.Background(), templatespec.Create{Workspace: w.ws, By: w.acct, SiteID: "site_ready", Name: "Demo"})
			if err != nil {
				t.Fatal(err)
			}
			next, err := w.svc.Update(context.Background(), tpl, tt.patch)
			stored, _ := w.store.Template(tpl.ID)
			if tt.code != "" {
				if code(err) != tt.code || (tt.field != "" && field(err) != tt.field) {
					t.Fatalf("err %v, want %s field %q", err, tt.code, tt.field)
				}
				if stored.UpdatedAt != tpl.UpdatedAt || stored.Name != tpl.Name || stored.Launch != tpl.Launch {
					t.Fatalf("a refused PATCH changed the template: %+v", stored)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, stored)
			if stored.Launch != next.Launch || stored.Name != next.Name {
				t.Fatalf("answer %+v, stored %+v", next, stored)
			}
		})
	}
}

// TestLaunchTokenIsKept: turning launch off and on keeps the token.
func TestLaunchTokenIsKept(t *testing.T) {
	w := newWorld(t, state.PlanPaid)
	ctx := context.Background()
	tpl, _, err := w.svc.Create(ctx, templatespec.Create{Workspace: w.ws, By: w.acct, SiteID: "site_ready", Name: "Demo"})
	if err != nil {
		t.Fatal(err)
	}
	on, err := w.svc.Update(ctx, tpl, templatespec.Patch{LaunchEnabled: ptr(true)})
	if err != nil {
		t.Fatal(err)
	}
	off, err := w.svc.Update(ctx, on, templatespec.Patch{LaunchEnabled: ptr(false)})
	if err != nil {
		t.Fatal(err)
	}
	again, err := w.svc.Update(ctx, off, templatespec.Patch{LaunchEnabled: ptr(true)})
	if err != nil {
		t.Fatal(err)
	}
	if on.Launch.Token == "" || off.Launch.Token != on.Launch.Token || again.Launch.Token != on.Launch.Token {
		t.Fatalf("tokens %q %q %q", on.Launch.Token, off.Launch.Token, again.Launch.Token)
	}
}

// TestReadyAndDelete: sites are made only from a ready template of the
// workspace; a deleted template is gone for every caller.
func TestReadyAndDelete(t *testing.T) {
	w := newWorld(t, state.PlanPaid)
	ctx := context.Background()
	tpl, _, err := w.svc.Create(ctx, templatespec.Create{Workspace: w.ws, By: w.acct, SiteID: "site_ready", Name: "Demo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Ready(w.store, w.ws.ID, tpl.ID, "templateId"); code(err) != apierr.CodeInvalidRequest {
		t.Fatalf("building template: %v", err)
	}
	if _, err := Ready(w.store, w.other.ID, tpl.ID, "templateId"); code(err) != apierr.CodeTemplateNotFound {
		t.Fatalf("another workspace: %v", err)
	}
	ready := *tpl
	ready.Status = state.TemplateReady
	if _, err := fsm.NewLocal(w.store).Apply(ctx, fsm.PutTemplate{Template: ready}); err != nil {
		t.Fatal(err)
	}
	if got, err := Ready(w.store, w.ws.ID, tpl.ID, "templateId"); err != nil || got.ID != tpl.ID {
		t.Fatalf("ready template: %v", err)
	}
	if err := w.svc.Delete(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.In(w.ws.ID, tpl.ID); code(err) != apierr.CodeTemplateNotFound {
		t.Fatalf("deleted template: %v", err)
	}
}

// TestPatchDoesNotUndoAFreeze: a PATCH whose caller read the template
// before its freeze job recorded it ready applies to the ready template;
// the job's outcome is not written back over.
func TestPatchDoesNotUndoAFreeze(t *testing.T) {
	w := newWorld(t, state.PlanPaid)
	ctx := context.Background()
	tpl, _, err := w.svc.Create(ctx, templatespec.Create{Workspace: w.ws, By: w.acct, SiteID: "site_ready", Name: "Demo"})
	if err != nil {
		t.Fatal(err)
	}
	stale := *tpl
	ready := *tpl
	ready.Status, ready.SizeBytes, ready.UpdatedAt = state.TemplateReady, 42, tpl.UpdatedAt.Add(time.Second)
	if _, err := fsm.NewLocal(w.store).Apply(ctx, fsm.PutTemplate{Template: ready}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.Update(ctx, &stale, templatespec.Patch{Name: ptr("Renamed")}); err != nil {
		t.Fatal(err)
	}
	got, _ := w.store.Template(tpl.ID)
	if got.Status != state.TemplateReady || got.SizeBytes != 42 || got.Name != "Renamed" || !got.UpdatedAt.After(ready.UpdatedAt) {
		t.Fatalf("after the PATCH: %+v", got)
	}
}
