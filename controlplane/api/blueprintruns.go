package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/blueprintspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// BlueprintRuns is what the run routes need from the Blueprints service.
type BlueprintRuns interface {
	CreateSite(ctx context.Context, c blueprintspec.Caller, b *state.Blueprint, name string) (*state.Site, *state.BlueprintRun, error)
	Apply(ctx context.Context, c blueprintspec.Caller, site *state.Site, b *state.Blueprint, src []byte) (*state.BlueprintRun, error)
	Bake(ctx context.Context, c blueprintspec.Caller, b *state.Blueprint, name, description, rebake string) (*state.Template, *state.BlueprintRun, error)
	Runs(b *state.Blueprint) ([]*state.BlueprintRun, error)
	RunIn(workspaceID, blueprintID, runID string) (*state.BlueprintRun, error)
}

// RunView is the contract's Blueprint run.
type RunView struct {
	ID                string          `json:"id"`
	BlueprintID       string          `json:"blueprintId" doc:"Empty for a source applied without saving it (its run is at /api/app/blueprints/unsaved/runs/{runId})."`
	OrgID             string          `json:"orgId"`
	CreatedByUserID   string          `json:"createdByUserId"`
	BlueprintRevision int             `json:"blueprintRevision"`
	SiteID            string          `json:"siteId"`
	JobID             string          `json:"jobId"`
	Mode              string          `json:"mode" enum:"@runMode"`
	Status            string          `json:"status" enum:"@runStatus"`
	Steps             []RunStepView   `json:"steps"`
	Log               string          `json:"log" doc:"What each step did, and the error of the one that failed."`
	RunnerVersion     string          `json:"runnerVersion"`
	FailureReason     string          `json:"failureReason" doc:"The failed step (its place in the source and name) and why."`
	TemplateID        string          `json:"templateId,omitempty" doc:"The template a bake makes."`
	StartedAt         *time.Time      `json:"startedAt"`
	FinishedAt        *time.Time      `json:"finishedAt"`
	CreatedAt         time.Time       `json:"createdAt"`
	Source            json.RawMessage `json:"-"`
}

// RunStepView is one step of a run.
type RunStepView struct {
	Name       string `json:"name"`
	Status     string `json:"status" enum:"@stepStatus"`
	DurationMs int64  `json:"durationMs"`
	Caption    string `json:"caption"`
	Path       string `json:"path" doc:"Where the step is in the source: steps[3], or a shorthand (plugins[0], siteOptions, login)."`
}

func runView(r *state.BlueprintRun) RunView {
	steps := make([]RunStepView, 0, len(r.Steps))
	for _, s := range r.Steps {
		steps = append(steps, RunStepView{Name: s.Name, Status: s.Status, DurationMs: s.DurationMs, Caption: s.Caption, Path: s.Path})
	}
	tpl := r.TemplateID
	if r.ReplacesTemplateID != "" {
		tpl = r.ReplacesTemplateID // a rebake makes the template it rebuilds anew, under its id
	}
	return RunView{ID: r.ID, BlueprintID: r.BlueprintID, OrgID: r.WorkspaceID, CreatedByUserID: r.CreatedByUserID,
		BlueprintRevision: r.BlueprintRevision, SiteID: r.SiteID, JobID: r.JobID, Mode: r.Mode, Status: r.Status, Steps: steps,
		Log: r.Log, RunnerVersion: r.RunnerVersion, FailureReason: r.FailureReason, TemplateID: tpl,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, CreatedAt: r.CreatedAt}
}

type runResponse struct {
	Run RunView `json:"run"`
}

type runsResponse struct {
	Runs []RunView `json:"runs"`
}

type siteRunResponse struct {
	Site SiteView `json:"site"`
	Run  RunView  `json:"run"`
}

type bakeResponse struct {
	Template TemplateView `json:"template"`
	Run      RunView      `json:"run"`
}

// BlueprintSiteRequest is the body of POST /api/app/blueprints/{id}/sites.
type BlueprintSiteRequest struct {
	Name string `json:"name,omitempty" doc:"Default: the Blueprint's name."`
}

// ApplyBlueprintRequest is the body of POST /api/app/sites/{id}/blueprint.
type ApplyBlueprintRequest struct {
	BlueprintID string          `json:"blueprintId,omitempty" doc:"A saved Blueprint of the workspace; or give source."`
	Source      json.RawMessage `json:"source,omitempty" doc:"A Blueprint JSON (object or string) run without saving it."`
}

// BakeRequest is the body of POST /api/app/blueprints/{id}/bake.
type BakeRequest struct {
	Name        string `json:"name,omitempty" doc:"Default: the Blueprint's (or, on a rebake, the template's) name."`
	Description string `json:"description,omitempty"`
	TemplateID  string `json:"templateId,omitempty" doc:"Only to rebake a template already baked from this Blueprint: the rebuilt template takes its slug, launch token and settings, warm pool and leads once ready, and it is retired."`
}

// runRoutes are a saved Blueprint's runs, and Blueprints applied to sites.
type runRoutes struct {
	*base
	runs BlueprintRuns
}

func (a runRoutes) register(r *rest.Router) {
	read := guard{scope: scopeWorkspace}
	create := guard{scope: scopeWorkspace, capability: access.Create}
	reuse := guard{scope: scopeWorkspace, capability: access.Reusables}
	nf := []string{apierr.CodeBlueprintNotFound}
	runParams := map[string]string{"id": "blueprint", "runId": "run"}
	caller := func(req *http.Request, ans *writes.Answer[sitespec.Made]) blueprintspec.Caller {
		c := CallerFrom(req.Context())
		return blueprintspec.Caller{Workspace: c.Workspace, By: c.Account, Answer: ans}
	}
	a.bearer(r, create, rest.Route{Method: "POST", Path: "/api/app/blueprints/{id}/sites", Tag: "blueprints", Status: http.StatusAccepted,
		Summary: "Make a site from a saved Blueprint: the site is made (PHP from preferredVersions), then the Blueprint runs on it step by step. " +
			"Poll the run (and the site). A Blueprint with error findings is refused with them.",
		Params: blueprintParam, Request: BlueprintSiteRequest{}, Response: siteRunResponse{}, Idempotent: true,
		Errors: append(nf, apierr.CodeInvalidRequest, apierr.CodePlanLimitReached, apierr.CodePHPVersionUnavailable),
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			b, err := a.blueprintIn(req)
			if err != nil {
				return err
			}
			var body BlueprintSiteRequest
			if err := rest.DecodeJSON(req, &body); err != nil {
				return err
			}
			ans := answer(a.base, req, http.StatusAccepted, func(m sitespec.Made) any {
				return siteRunResponse{Site: siteView(&m.Site), Run: runView(m.Run)}
			})
			_, _, err = a.runs.CreateSite(req.Context(), caller(req, ans), b, body.Name)
			return respond(a.base, w, req, ans, err)
		}})
	a.bearer(r, create, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/blueprint", Tag: "blueprints", Status: http.StatusAccepted,
		Summary: "Run a Blueprint (saved: blueprintId; or a source, not saved) on a ready site, on the site's own PHP and WordPress. " +
			"Poll GET /api/app/blueprints/{id}/runs/{runId} (id \"unsaved\" for a source).",
		Params: siteParam, Request: ApplyBlueprintRequest{}, Response: runResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeBlueprintNotFound, apierr.CodeInvalidRequest},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			site, err := a.siteIn(req)
			if err != nil {
				return err
			}
			var body ApplyBlueprintRequest
			if err := rest.DecodeJSON(req, &body); err != nil {
				return err
			}
			var b *state.Blueprint
			var src []byte
			switch {
			case body.BlueprintID != "" && len(body.Source) > 0:
				return apierr.Invalid("source", "give blueprintId or source, not both")
			case body.BlueprintID != "":
				if b, err = blueprintspec.In(a.store, site.WorkspaceID, body.BlueprintID); err != nil {
					return err
				}
			default:
				if src, err = sourceOf(body.Source, nil, true); err != nil {
					return err
				}
			}
			ans := answer(a.base, req, http.StatusAccepted, func(m sitespec.Made) any { return runResponse{Run: runView(m.Run)} })
			_, err = a.runs.Apply(req.Context(), caller(req, ans), site, b, src)
			return respond(a.base, w, req, ans, err)
		}})
	a.bearer(r, reuse, rest.Route{Method: "POST", Path: "/api/app/blueprints/{id}/bake", Tag: "blueprints", Status: http.StatusAccepted,
		Summary: "Bake a saved Blueprint into a Template: a scratch site is made, the Blueprint run on it, the site frozen into the template " +
			"(building until then) and removed. Poll the run and the template. With templateId, rebake a template baked from this Blueprint.",
		Params: blueprintParam, Request: BakeRequest{}, Response: bakeResponse{}, Idempotent: true,
		Errors: append(nf, apierr.CodeInvalidRequest, apierr.CodeTemplateNotFound, apierr.CodePlanLimitReached),
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			b, err := a.blueprintIn(req)
			if err != nil {
				return err
			}
			var body BakeRequest
			if err := rest.DecodeJSON(req, &body); err != nil {
				return err
			}
			ans := answer(a.base, req, http.StatusAccepted, func(m sitespec.Made) any {
				tpl := m.Template
				if tpl.RebuildOf != "" { // a rebake answers the template it rebuilds, which keeps its id
					if old, err := a.store.Template(tpl.RebuildOf); err == nil && old != nil {
						tpl = old
					}
				}
				return bakeResponse{Template: templateView(tpl), Run: runView(m.Run)}
			})
			_, _, err = a.runs.Bake(req.Context(), caller(req, ans), b, body.Name, body.Description, body.TemplateID)
			return respond(a.base, w, req, ans, err)
		}})
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/blueprints/{id}/runs", Tag: "blueprints",
		Summary: "A saved Blueprint's runs, newest first.", Params: blueprintParam, Response: runsResponse{}, Errors: nf,
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			b, err := a.blueprintIn(req)
			if err != nil {
				return err
			}
			rs, err := a.runs.Runs(b)
			if err != nil {
				return err
			}
			out := make([]RunView, 0, len(rs))
			for _, r := range rs {
				out = append(out, runView(r))
			}
			return rest.JSON(w, http.StatusOK, runsResponse{Runs: out})
		}})
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/blueprints/{id}/runs/{runId}", Tag: "blueprints",
		Summary: "One run: each step's status, duration and caption, the log and the failure's reason. id is \"unsaved\" for a source applied without saving.",
		Params:  runParams, Response: runResponse{}, Errors: nf,
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			run, err := a.runs.RunIn(CallerFrom(req.Context()).Workspace.ID, req.PathValue("id"), req.PathValue("runId"))
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, runResponse{Run: runView(run)})
		}})
}
