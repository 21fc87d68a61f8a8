package sitejobs

import (
	"context"
	"errors"
	"strings"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// BlueprintRunner carries out a Blueprint run on its ready site; Abort
// ends a run that cannot start. Run's error wraps ErrRunFailed when the
// run itself failed.
type BlueprintRunner interface {
	Run(ctx context.Context, runID string, progress func(int)) error
	Abort(ctx context.Context, runID, reason string) error
	Failed(err error) bool
}

func failureMessage(err error) string {
	var f *jobs.Failure
	if errors.As(err, &f) {
		return f.Message
	}
	return err.Error()
}

func (r *Runners) abortRun(ctx context.Context, runID, reason string) {
	if r.Blueprints != nil {
		_ = r.Blueprints.Abort(context.WithoutCancel(ctx), runID, reason)
	}
}

// runBlueprint runs a Blueprint (the run records its site's login entry); a
// failed run fails the job with the run's reason.
func (r *Runners) runBlueprint(ctx context.Context, runID string, progress func(int)) error {
	if r.Blueprints == nil {
		return &jobs.Failure{Code: "blueprints_unavailable", Message: "this control plane runs no Blueprints"}
	}
	err := r.Blueprints.Run(ctx, runID, progress)
	switch {
	case err != nil && r.Blueprints.Failed(err):
		// A run stopped by a limit (the site's disk full) fails with the
		// limit's code; any other with the run's.
		var limit *jobs.Failure
		if errors.As(err, &limit) {
			return &jobs.Failure{Code: limit.Code, Message: strings.TrimSuffix(err.Error(), limit.Error()), Details: limit.Details}
		}
		return &jobs.Failure{Code: "blueprint_run_failed", Message: err.Error()}
	case err != nil && ctx.Err() != nil:
		return err // leadership lost: the next leader carries the run on
	case err != nil:
		// The job will not be tried again: the run ends with it.
		r.abortRun(ctx, runID, "the run could not be carried on: "+err.Error())
		return &jobs.Failure{Code: "blueprint_run_failed", Message: err.Error()}
	}
	return nil // the run saved its site's login entry as it succeeded
}

// apply runs a Blueprint on a ready site.
func (r *Runners) apply(ctx context.Context, j *state.Job, progress func(int)) error {
	p, err := payloadOf[jobspec.RunPayload](j)
	if err != nil {
		return err
	}
	return r.runBlueprint(ctx, p.RunID, progress)
}

// bake makes the scratch site, runs the Blueprint on it, freezes it into
// the run's template and removes it. A rebake's template then takes the
// place of the one it rebuilds. Whatever fails, the scratch site goes.
func (r *Runners) bake(ctx context.Context, j *state.Job, progress func(int)) error {
	p, err := payloadOf[jobspec.CreatePayload](j)
	if err != nil {
		return err
	}
	run, err := r.Store.BlueprintRun(p.RunID)
	if err != nil || run == nil {
		return err
	}
	tpl, err := r.Store.Template(run.TemplateID)
	if err != nil {
		return err
	}
	if tpl == nil { // deleted meanwhile
		r.abortRun(ctx, run.ID, "the template being baked was deleted")
		return r.discardScratch(ctx, j.SiteID)
	}
	if run.Status == state.RunSucceeded && tpl.Status == state.TemplateReady {
		// Run again after it finished (a new leader): only what follows
		// the freeze is left.
		return r.afterBake(ctx, j, run, tpl)
	}
	if err := r.create(ctx, j, func(pc int) { progress(pc * 7 / 10) }); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.Join(r.templateFailed(ctx, tpl, err), r.discardScratch(ctx, j.SiteID))
	}
	run, err = r.Store.BlueprintRun(p.RunID)
	if err != nil || run == nil {
		return err
	}
	s, err := r.site(j)
	if err != nil {
		return r.templateFailed(ctx, tpl, err)
	}
	entry := state.SiteEntry{User: run.LoginUser, Path: run.LandingPage}
	if err := r.freezeInto(ctx, j, s, tpl, func(pc int) { progress(70 + pc/4) }, func(t *state.Template) {
		t.Entry = entry
		if entry.Path != "" && (t.Launch.LandingPath == "" || t.Launch.LandingPath == "/wp-admin/") {
			t.Launch.LandingPath = entry.Path
		}
	}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.Join(err, r.discardScratch(ctx, j.SiteID))
	}
	progress(95)
	return r.afterBake(ctx, j, run, tpl)
}

// afterBake retires the template a rebake replaces and the scratch site.
func (r *Runners) afterBake(ctx context.Context, j *state.Job, run *state.BlueprintRun, tpl *state.Template) error {
	if run.ReplacesTemplateID != "" {
		_, err := r.Raft.Apply(ctx, fsm.ReplaceTemplate{OldID: run.ReplacesTemplateID, NewID: tpl.ID, At: r.now()})
		if errors.Is(err, state.ErrNotFound) {
			// The template was deleted meanwhile (or the fold is done):
			// an internal rebuild left behind goes too.
			_, err = r.Raft.Apply(ctx, fsm.DeleteTemplate{ID: tpl.ID})
			if errors.Is(err, state.ErrNotFound) {
				err = nil
			}
		}
		if err != nil {
			return err
		}
	}
	return r.discardScratch(ctx, j.SiteID)
}

// discardScratch queues the removal of a bake's scratch site.
func (r *Runners) discardScratch(ctx context.Context, siteID string) error {
	s, err := r.Store.Site(siteID)
	if err != nil || s == nil || s.Status == state.SiteDeleting {
		return err
	}
	j, err := jobs.New(jobspec.DeleteSite, s.WorkspaceID, s.ID, nil, r.now())
	if err != nil {
		return err
	}
	_, err = r.Raft.Apply(context.WithoutCancel(ctx), fsm.UpdateSiteWithJob{Update: state.SiteUpdate{ID: s.ID, Status: state.SiteDeleting, At: r.now()}, Job: j})
	return err
}
