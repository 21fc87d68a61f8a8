package blueprints

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/sandboxd/sandboxd/blueprint"
	"github.com/sandboxd/sandboxd/controlplane/blueprintspec"
	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/naming"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/templates"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// SiteMaker makes sites (the sites service).
type SiteMaker interface {
	Create(ctx context.Context, in sitespec.Create) (*state.Site, string, error)
}

// runnable checks that a source can run here now; the error is the
// contract's 400 with the findings that stop it.
func (s *Service) runnable(src []byte, env blueprint.Env) (*blueprint.Blueprint, error) {
	res := blueprint.Check(src, env)
	if res.Valid {
		return res.Blueprint, nil
	}
	var errs []blueprint.Finding
	for _, f := range res.Report {
		if f.Severity == blueprint.SeverityError {
			errs = append(errs, f)
		}
	}
	msg := "the Blueprint cannot run here"
	if len(errs) > 0 {
		msg += ": " + errs[0].Path + ": " + errs[0].Message
		if len(errs) > 1 {
			msg += " (and more: see compatReport)"
		}
	}
	return nil, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "%s", msg).With("compatReport", errs)
}

func (s *Service) newRun(c blueprintspec.Caller, b *state.Blueprint, src []byte, mode string) state.BlueprintRun {
	run := state.BlueprintRun{ID: ids.New(ids.Run), WorkspaceID: c.Workspace.ID, CreatedByUserID: c.By.ID, Mode: mode,
		Status: state.RunPending, Source: src, Steps: []state.RunStep{}, CreatedAt: s.now()}
	if b != nil {
		run.BlueprintID, run.BlueprintRevision, run.BundleSHA256 = b.ID, b.Revision, b.BundleSHA256
	}
	return run
}

// phpFor is the PHP image a Blueprint's preferredVersions pick ("" for
// the default).
func (s *Service) phpFor(bp *blueprint.Blueprint, env blueprint.Env) string {
	switch v := bp.PHPVersion; {
	case v == "" || len(env.PHPVersions) == 0:
		return ""
	case v == "latest":
		return env.PHPVersions[len(env.PHPVersions)-1]
	case v == "7.2" || v == "7.3":
		return "7.4"
	default:
		return v
	}
}

// CreateSite makes a site from a saved Blueprint: the site (creating)
// and its run (pending), which its job carries out once the site is up.
func (s *Service) CreateSite(ctx context.Context, c blueprintspec.Caller, b *state.Blueprint, name string) (*state.Site, *state.BlueprintRun, error) {
	if s.cfg.Sites == nil {
		return nil, nil, apierr.Unavailable("sites cannot be made here")
	}
	env := s.EnvOf(b)
	env.Reach = nil
	bp, err := s.runnable(b.Source, env)
	if err != nil {
		return nil, nil, err
	}
	if strings.TrimSpace(name) == "" {
		name = b.Name
	}
	run := s.newRun(c, b, b.Source, state.RunCreate)
	site, _, err := s.cfg.Sites.Create(ctx, sitespec.Create{Workspace: c.Workspace, By: c.By, Name: name,
		PHPVersion: s.phpFor(bp, env), Run: &run, Answer: c.Answer})
	if err != nil {
		return nil, nil, err
	}
	return site, &run, nil
}

// Apply runs a saved Blueprint (b) or a source on a ready site.
func (s *Service) Apply(ctx context.Context, c blueprintspec.Caller, site *state.Site, b *state.Blueprint, src []byte) (*state.BlueprintRun, error) {
	if site.Status != state.SiteReady || site.Move != nil {
		return nil, apierr.Invalid("siteId", "the site is %s; a Blueprint runs on a ready site", site.Status).With("status", site.Status)
	}
	env := s.EnvOf(b)
	env.Reach = nil
	if b != nil {
		src = b.Source
	} else if len(src) > blueprintspec.MaxSource {
		return nil, apierr.Invalid("source", "source is larger than %d KiB", blueprintspec.MaxSource>>10)
	}
	// A Blueprint applied to a site runs on the site's own versions (its
	// preferredVersions pick those of sites made from it).
	if _, err := s.runnable(src, env); err != nil {
		return nil, err
	}
	run := s.newRun(c, b, src, state.RunApply)
	run.SiteID = site.ID
	job, err := jobs.New(jobspec.ApplyBlueprint, c.Workspace.ID, site.ID, jobspec.RunPayload{RunID: run.ID}, run.CreatedAt)
	if err != nil {
		return nil, err
	}
	run.JobID = job.ID
	if _, err := commit.Apply(ctx, s.cfg.Raft, c.Answer, fsm.CreateRunWithJob{Run: run, Job: job}, sitespec.Made{Site: *site, JobID: job.ID, Run: &run}); err != nil {
		return nil, err
	}
	return &run, nil
}

// Bake makes a template from a saved Blueprint: a scratch site, the run,
// the freeze. With rebake set (a ready template baked from this
// Blueprint), the rebuild is folded into that template once ready: it
// keeps its id, slug and launch token, and is what Bake returns.
func (s *Service) Bake(ctx context.Context, c blueprintspec.Caller, b *state.Blueprint, name, description, rebake string) (*state.Template, *state.BlueprintRun, error) {
	if s.cfg.Sites == nil {
		return nil, nil, apierr.Unavailable("sites cannot be made here")
	}
	var old *state.Template
	if rebake != "" {
		t, err := s.cfg.Store.Template(rebake)
		if err != nil {
			return nil, nil, err
		}
		if t == nil || t.WorkspaceID != c.Workspace.ID {
			return nil, nil, apierr.NotFound(apierr.CodeTemplateNotFound, "template")
		}
		if t.SourceBlueprintID != b.ID {
			return nil, nil, apierr.Invalid("templateId", "template %s is not baked from this Blueprint; rebake only a template made from it", t.ID)
		}
		if t.Status != state.TemplateReady {
			return nil, nil, apierr.Invalid("templateId", "template %s is %s; rebake it once it is ready", t.ID, t.Status)
		}
		old = t
	}
	if name == "" {
		name = b.Name
		if old != nil {
			name = old.Name
		}
	}
	nm, err := naming.Name(name)
	if err != nil {
		return nil, nil, err
	}
	if description == "" && old != nil {
		description = old.Description
	}
	desc, err := naming.Description(description)
	if err != nil {
		return nil, nil, err
	}
	env := s.EnvOf(b)
	env.Reach = nil
	bp, err := s.runnable(b.Source, env)
	if err != nil {
		return nil, nil, err
	}
	plan, err := s.cfg.Store.PlanOf(c.Workspace)
	if err != nil {
		return nil, nil, err
	}
	quota, err := s.cfg.Plans.Quota(plan, plans.Templates)
	if err != nil {
		return nil, nil, err
	}
	ts, err := s.cfg.Store.TemplatesOf(c.Workspace.ID)
	if err != nil {
		return nil, nil, err
	}
	taken := map[string]bool{}
	for _, t := range ts {
		taken[t.Slug] = true
	}
	now := s.now()
	tpl := state.Template{ID: ids.New(ids.Template), WorkspaceID: c.Workspace.ID, UserID: c.Workspace.OwnerID, CreatedByUserID: c.By.ID,
		Name: nm, Description: desc, Status: state.TemplateBuilding, Launch: templates.DefaultLaunch,
		SourceBlueprintID: b.ID, SourceBlueprintRevision: b.Revision, CreatedAt: now, UpdatedAt: now}
	if old != nil {
		// Building beside the old one, internal and under a slug of its
		// own, until it is folded into the old one (same id, slug and
		// launch token).
		tpl.RebuildOf = old.ID
		tpl.Slug = naming.Slug(old.Slug+"-rebake", "template", taken, true)
	} else {
		tpl.Slug = naming.Slug(nm, "template", taken, false)
	}
	run := s.newRun(c, b, b.Source, state.RunBake)
	run.TemplateID = tpl.ID
	if old != nil {
		run.ReplacesTemplateID = old.ID
	}
	_, _, err = s.cfg.Sites.Create(ctx, sitespec.Create{Workspace: c.Workspace, By: c.By, Name: "Bake: " + nm,
		PHPVersion: s.phpFor(bp, env), Run: &run, Bake: &tpl, BakeQuota: quota, Answer: c.Answer})
	if err != nil {
		if errors.Is(err, state.ErrConflict) {
			return nil, nil, apierr.Invalid("name", "another template took the slug meanwhile; try again")
		}
		return nil, nil, err
	}
	if old != nil {
		return old, &run, nil
	}
	return &tpl, &run, nil
}

// Runs lists a Blueprint's runs, newest first.
func (s *Service) Runs(b *state.Blueprint) ([]*state.BlueprintRun, error) {
	return s.cfg.Store.RunsOf(b.ID)
}

// RunIn returns a run of the workspace under the Blueprint id (or
// UnsavedID for a source applied without saving); any other is not found.
func (s *Service) RunIn(workspaceID, blueprintID, runID string) (*state.BlueprintRun, error) {
	r, err := s.cfg.Store.BlueprintRun(runID)
	if err != nil {
		return nil, err
	}
	want := blueprintID
	if want == UnsavedID {
		want = ""
	}
	if r == nil || r.WorkspaceID != workspaceID || r.BlueprintID != want {
		return nil, apierr.NotFound(apierr.CodeBlueprintNotFound, "blueprint run")
	}
	return r, nil
}

// UnsavedID stands for the Blueprint of a run of a source applied
// without saving it: GET /api/app/blueprints/unsaved/runs/{runId}.
const UnsavedID = "unsaved"
