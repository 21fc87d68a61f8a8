package state

import (
	"errors"
	"testing"
)

// TestRuns: a run keeps its identity and ends once; runs of a source
// applied without saving have no Blueprint and are not listed under one;
// an unfinished run keeps its bundle wanted.
func TestRuns(t *testing.T) {
	s := seed(t)
	run := BlueprintRun{ID: "bpr_1", BlueprintID: "bp_1", WorkspaceID: "ws_a", SiteID: "site_1", Mode: RunApply, Status: RunPending,
		Source: []byte(`{"steps":[]}`), BundleSHA256: "abc", CreatedAt: t0}
	must(t, s.Update(func(tx *Tx) error { return tx.CreateRun(run) }))
	if err := s.Update(func(tx *Tx) error { return tx.CreateRun(run) }); !errors.Is(err, ErrConflict) {
		t.Fatalf("a second run of one id: %v", err)
	}
	unsaved := run
	unsaved.ID, unsaved.BlueprintID, unsaved.BundleSHA256 = "bpr_2", "", ""
	must(t, s.Update(func(tx *Tx) error { return tx.CreateRun(unsaved) }))
	if rs, _ := s.RunsOf("bp_1"); len(rs) != 1 || rs[0].ID != "bpr_1" {
		t.Fatalf("runs of bp_1: %v", rs)
	}
	if b, _ := s.BlueprintBundles(); len(b) != 1 || b[0] != "abc" {
		t.Fatalf("bundles wanted by an unfinished run: %v", b)
	}
	for _, change := range []func(*BlueprintRun){
		func(r *BlueprintRun) { r.SiteID = "site_2" },
		func(r *BlueprintRun) { r.Source = []byte(`{}`) },
		func(r *BlueprintRun) { r.Mode = RunBake },
		func(r *BlueprintRun) { r.WorkspaceID = "ws_b" },
	} {
		next := run
		change(&next)
		if err := s.Update(func(tx *Tx) error { return tx.PutRun(next) }); !errors.Is(err, ErrConflict) {
			t.Fatalf("an identity change: %v", err)
		}
	}
	progress := run
	progress.Source, progress.Status = nil, RunRunning
	must(t, s.Update(func(tx *Tx) error { return tx.PutRun(progress) }))
	if got, _ := s.BlueprintRun("bpr_1"); string(got.Source) != `{"steps":[]}` || got.Status != RunRunning {
		t.Fatalf("a record without its source: %+v", got)
	}
	done := run
	done.Status, done.Log = RunSucceeded, "ok"
	must(t, s.Update(func(tx *Tx) error { return tx.PutRun(done) }))
	again := done
	again.Status = RunFailed
	if err := s.Update(func(tx *Tx) error { return tx.PutRun(again) }); !errors.Is(err, ErrConflict) {
		t.Fatalf("a finished run changed: %v", err)
	}
	if b, _ := s.BlueprintBundles(); len(b) != 0 {
		t.Fatalf("a finished run still wants its bundle: %v", b)
	}
}

// TestReplaceTemplate: a ready rebuild is folded into the template it
// rebuilds, which keeps its id, slug, launch settings and token, warm
// pool and leads and takes the rebuild's build, versions and name; the
// rebuild's row goes. A rebuild not ready yet is refused.
func TestReplaceTemplate(t *testing.T) {
	s := seed(t)
	seedTemplate(t, s) // tpl_1, slug starter
	old, _ := s.Template("tpl_1")
	o := *old
	o.Status, o.WarmPoolSize, o.Launch.Token = TemplateReady, 2, "tok123"
	must(t, s.Update(func(tx *Tx) error { return tx.PutTemplate(o, nil) }))
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateTemplate(Template{ID: "tpl_2", WorkspaceID: "ws_a", UserID: "usr_a", Slug: "starter-rebake-x", Name: "Starter v2",
			Status: TemplateBuilding, RebuildOf: "tpl_1", CreatedAt: t0}, Quota{})
	}))
	must(t, s.Update(func(tx *Tx) error {
		return tx.AddLead(Lead{ID: "lead_1", TemplateID: "tpl_1", WorkspaceID: "ws_a", Email: "a@b.c"})
	}))
	if err := s.Update(func(tx *Tx) error { return tx.ReplaceTemplate("tpl_1", "tpl_2", t0) }); !errors.Is(err, ErrConflict) {
		t.Fatalf("a building rebuild: %v", err)
	}
	n, _ := s.Template("tpl_2")
	ready := *n
	ready.Status, ready.PHPVersion, ready.ArtifactSHA256 = TemplateReady, "8.4", "sha-v2"
	must(t, s.Update(func(tx *Tx) error { return tx.PutTemplate(ready, nil) }))
	must(t, s.Update(func(tx *Tx) error { return tx.ReplaceTemplate("tpl_1", "tpl_2", t0) }))
	got, _ := s.Template("tpl_1")
	if gone, _ := s.Template("tpl_2"); gone != nil || got == nil || got.Slug != "starter" || got.Launch.Token != "tok123" ||
		got.WarmPoolSize != 2 || got.Launch.Branding.Headline != "Try it" {
		t.Fatalf("after the replace: rebuild %v, template %+v", gone, got)
	}
	if got.BuildID() != "tpl_2" || got.Name != "Starter v2" || got.PHPVersion != "8.4" || got.ArtifactSHA256 != "sha-v2" || got.RebuildOf != "" {
		t.Fatalf("the template did not take the rebuild's content: %+v", got)
	}
	if b, _ := s.TemplateByBuild("tpl_2"); b == nil || b.ID != "tpl_1" {
		t.Fatalf("the build tpl_2 belongs to %v", b)
	}
	if b, _ := s.TemplateByBuild("tpl_1"); b != nil {
		t.Fatalf("the replaced build still belongs to %v", b)
	}
	if tpl, _ := s.TemplateByLaunchToken("tok123"); tpl == nil || tpl.ID != "tpl_1" {
		t.Fatalf("the token leads to %v", tpl)
	}
	if leads, _ := s.LeadsOf("tpl_1"); len(leads) != 1 {
		t.Fatalf("leads kept: %v", leads)
	}
	if err := s.Update(func(tx *Tx) error { return tx.ReplaceTemplate("tpl_1", "tpl_2", t0) }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("replacing with a gone rebuild: %v", err)
	}
}
