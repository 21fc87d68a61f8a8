package state

import (
	"errors"
	"testing"
	"time"
)

// TestTemplates: a template and its freeze job come together or not at
// all; the owner's quota counts templates across workspaces; slugs are
// unique per workspace; a template keeps its workspace, owner and slug.
func TestTemplates(t *testing.T) {
	s := seed(t)
	seedTemplate(t, s) // tpl_1, slug starter, in ws_a of usr_a
	tpl := func(id, slug string) Template {
		return Template{ID: id, WorkspaceID: "ws_a", UserID: "usr_a", Slug: slug, Status: TemplateBuilding, CreatedAt: t0}
	}
	job := func(id string) Job { return Job{ID: id, Type: "snapshot_template", WorkspaceID: "ws_a", CreatedAt: t0} }
	q := Quota{Plan: PlanFree, Resource: "templates", Limit: 2}

	err := s.Update(func(tx *Tx) error { return tx.CreateTemplateWithJob(tpl("tpl_2", "starter"), job("job_2"), q) })
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("a taken slug: %v", err)
	}
	must(t, s.Update(func(tx *Tx) error { return tx.CreateTemplateWithJob(tpl("tpl_2", "shop"), job("job_2"), q) }))
	var quota *QuotaError
	err = s.Update(func(tx *Tx) error { return tx.CreateTemplateWithJob(tpl("tpl_3", "blog"), job("job_3"), q) })
	if !errors.As(err, &quota) {
		t.Fatalf("a third template on a quota of two: %v", err)
	}
	if j, _ := s.Job("job_3"); j != nil {
		t.Fatal("a refused template left its job")
	}
	// A deleted template frees its place in the quota; an unknown
	// workspace is refused with nothing written.
	must(t, s.Update(func(tx *Tx) error { return tx.DeleteTemplate("tpl_2") }))
	orphan := tpl("tpl_4", "blog")
	orphan.WorkspaceID = "ws_gone"
	if err := s.Update(func(tx *Tx) error { return tx.CreateTemplateWithJob(orphan, job("job_4"), q) }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown workspace: %v", err)
	}
	if j, _ := s.Job("job_4"); j != nil {
		t.Fatal("the job of a refused template was kept")
	}
	must(t, s.Update(func(tx *Tx) error { return tx.CreateTemplateWithJob(tpl("tpl_5", "blog"), job("job_5"), q) }))

	got, _ := s.Template("tpl_1")
	next := *got
	next.Status, next.SizeBytes = TemplateReady, 1234
	must(t, s.Update(func(tx *Tx) error { return tx.PutTemplate(next, nil) }))
	moved := next
	moved.Slug = "other"
	if err := s.Update(func(tx *Tx) error { return tx.PutTemplate(moved, nil) }); !errors.Is(err, ErrConflict) {
		t.Fatalf("a slug change: %v", err)
	}
	missing := next
	missing.ID = "tpl_nope"
	if err := s.Update(func(tx *Tx) error { return tx.PutTemplate(missing, nil) }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a missing template: %v", err)
	}
	// A conditional write over a template that changed since it was read
	// is refused and writes nothing.
	cur, _ := s.Template("tpl_1")
	read := cur.UpdatedAt
	newer := *cur
	newer.Name, newer.UpdatedAt = "newer", read.Add(time.Second)
	must(t, s.Update(func(tx *Tx) error { return tx.PutTemplate(newer, &read) }))
	lost := *cur
	lost.Name = "lost"
	if err := s.Update(func(tx *Tx) error { return tx.PutTemplate(lost, &read) }); !errors.Is(err, ErrStale) {
		t.Fatalf("a stale write: %v", err)
	}
	if got, _ := s.Template("tpl_1"); got.Name != "newer" {
		t.Fatalf("after a stale write: %q", got.Name)
	}
	list, _ := s.TemplatesOf("ws_a")
	if len(list) != 2 {
		t.Fatalf("list %+v", list)
	}
	for _, l := range list {
		if l.ID == "tpl_1" && (l.Status != TemplateReady || l.SizeBytes != 1234) {
			t.Fatalf("tpl_1 listed as %+v", l)
		}
	}
	must(t, s.Update(func(tx *Tx) error { return tx.DeleteTemplate("tpl_1") }))
	must(t, s.Update(func(tx *Tx) error { return tx.DeleteTemplate("tpl_1") })) // missing is fine
}

// TestLeads: a lead is kept for a template of its own workspace only,
// once per id, listed newest first.
func TestLeads(t *testing.T) {
	s := seed(t)
	seedTemplate(t, s) // tpl_1 in ws_a
	lead := func(id, ws string, at int) Lead {
		return Lead{ID: id, TemplateID: "tpl_1", WorkspaceID: ws, Email: id + "@example.com", SiteID: "site_" + id,
			IPHash: "h", CreatedAt: t0.Add(time.Duration(at) * time.Minute)}
	}
	must(t, s.Update(func(tx *Tx) error { return tx.AddLead(lead("lead_a", "ws_a", 1)) }))
	must(t, s.Update(func(tx *Tx) error { return tx.AddLead(lead("lead_b", "ws_a", 2)) }))
	must(t, s.Update(func(tx *Tx) error { return tx.AddLead(lead("lead_a", "ws_a", 1)) })) // again: kept once
	if err := s.Update(func(tx *Tx) error { return tx.AddLead(lead("lead_x", "ws_b", 3)) }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a lead for another workspace's template: %v", err)
	}
	bad := lead("lead_y", "ws_a", 4)
	bad.TemplateID = "tpl_nope"
	if err := s.Update(func(tx *Tx) error { return tx.AddLead(bad) }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a lead for an unknown template: %v", err)
	}
	got, err := s.LeadsOf("tpl_1")
	if err != nil || len(got) != 2 || got[0].ID != "lead_b" || got[1].ID != "lead_a" {
		t.Fatalf("leads %+v %v", got, err)
	}
}
