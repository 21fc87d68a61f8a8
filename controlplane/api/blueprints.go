package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/blueprint"
	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/blueprintspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Blueprints is what the Blueprint routes need from their service.
type Blueprints interface {
	Validate(src []byte, adapt bool, saved *state.Blueprint, workspaceID string) (*blueprintspec.Validation, error)
	Import(ctx context.Context, url string) ([]byte, string, error)
	Upload(ctx context.Context, in blueprintspec.Upload) (*blueprintspec.UploadResult, error)
	Create(ctx context.Context, in blueprintspec.Create) (*state.Blueprint, error)
	Update(ctx context.Context, b *state.Blueprint, p blueprintspec.Patch) (*state.Blueprint, error)
	Delete(ctx context.Context, b *state.Blueprint) error
}

// BlueprintView is the contract's Blueprint.
type BlueprintView struct {
	ID                      string              `json:"id"`
	UserID                  string              `json:"userId"`
	OrgID                   string              `json:"orgId"`
	CreatedByUserID         string              `json:"createdByUserId"`
	Name                    string              `json:"name"`
	Slug                    string              `json:"slug"`
	Description             string              `json:"description"`
	SourceJSON              json.RawMessage     `json:"sourceJson" doc:"The recipe: WordPress Playground Blueprint JSON (format v1)."`
	SchemaVersion           int                 `json:"schemaVersion"`
	Revision                int                 `json:"revision" doc:"1 when saved; grows by one each time the source is replaced."`
	CompatReport            []blueprint.Finding `json:"compatReport" doc:"What keeps the recipe from running here (error), what runs differently (warning), notes (info). Codes: see POST /api/app/blueprints/validate."`
	HoistedPHPVersion       string              `json:"hoistedPhpVersion" doc:"preferredVersions.php as written; empty when not given."`
	HoistedWordPressVersion string              `json:"hoistedWordpressVersion"`
	HoistedMultisite        bool                `json:"hoistedMultisite"`
	BundleSizeBytes         int64               `json:"bundleSizeBytes"`
	BundleManifestDirectory string              `json:"bundleManifestDirectory"`
	CreatedAt               time.Time           `json:"createdAt"`
	UpdatedAt               time.Time           `json:"updatedAt"`
}

func blueprintView(b *state.Blueprint) BlueprintView {
	report := []blueprint.Finding{}
	_ = json.Unmarshal(b.CompatReport, &report)
	return BlueprintView{ID: b.ID, UserID: b.UserID, OrgID: b.WorkspaceID, CreatedByUserID: b.CreatedByUserID, Name: b.Name, Slug: b.Slug,
		Description: b.Description, SourceJSON: b.Source, SchemaVersion: b.SchemaVersion, Revision: b.Revision, CompatReport: report,
		HoistedPHPVersion: b.HoistedPHPVersion, HoistedWordPressVersion: b.HoistedWordPressVersion, HoistedMultisite: b.HoistedMultisite,
		BundleSizeBytes: b.BundleSizeBytes, BundleManifestDirectory: b.BundleManifestDirectory, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt}
}

type blueprintResponse struct {
	Blueprint BlueprintView `json:"blueprint"`
}

type blueprintsResponse struct {
	Blueprints []BlueprintView `json:"blueprints"`
}

// ValidateBlueprintRequest is the body of POST /api/app/blueprints/validate.
type ValidateBlueprintRequest struct {
	Source      json.RawMessage `json:"source,omitempty" doc:"The Blueprint JSON, as an object or a string. Optional with blueprintId (the saved source is checked)."`
	Adapt       bool            `json:"adapt,omitempty" doc:"Also return a source that runs here, with every change made."`
	BlueprintID string          `json:"blueprintId,omitempty" doc:"A saved Blueprint of the workspace; needs a bearer token."`
}

// SaveBlueprintRequest is the body of POST /api/app/blueprints.
type SaveBlueprintRequest struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Source      json.RawMessage `json:"source,omitempty" doc:"The Blueprint JSON, as an object or a string."`
	SourceJSON  json.RawMessage `json:"sourceJson,omitempty" doc:"Legacy alias of source."`
}

// PatchBlueprintRequest is the body of PATCH /api/app/blueprints/{id}.
type PatchBlueprintRequest struct {
	Name        *string         `json:"name,omitempty"`
	Description *string         `json:"description,omitempty"`
	Source      json.RawMessage `json:"source,omitempty" doc:"Replaces the source; the revision grows by one."`
	SourceJSON  json.RawMessage `json:"sourceJson,omitempty" doc:"Legacy alias of source."`
}

// ImportBlueprintRequest is the body of POST /api/app/blueprints/import.
type ImportBlueprintRequest struct {
	URL string `json:"url" doc:"http(s) URL of a Blueprint's JSON; a code host's page URL of the file is fetched raw. ZIP bundles go to POST /api/app/blueprints/upload."`
}

// ImportBlueprintResponse is what an import fetched.
type ImportBlueprintResponse struct {
	Source    string `json:"source" doc:"The JSON as fetched (not saved)."`
	SourceURL string `json:"sourceUrl" doc:"The URL fetched, after normalisation."`
}

// uploadResponse is an upload's answer: the Blueprint (on a preview, not
// saved and without an id) and the adaptation it needed.
type uploadResponse struct {
	Blueprint BlueprintView             `json:"blueprint"`
	Adapted   *blueprintspec.Adaptation `json:"adapted,omitempty" doc:"On a preview: the changes blueprint.json needs to run here (applied on save when none needs review, or with adaptationsAccepted)."`
}

var blueprintParam = map[string]string{"id": "blueprint"}

// blueprintRoutes are the workspace's saved Blueprints and their checks.
type blueprintRoutes struct {
	*base
	blueprints Blueprints
}

func (a blueprintRoutes) register(r *rest.Router) {
	read := guard{scope: scopeWorkspace}
	write := guard{scope: scopeWorkspace, capability: access.Reusables}
	nf := []string{apierr.CodeBlueprintNotFound}
	codes := "Finding codes: "
	for _, c := range []string{blueprint.CodeInvalidJSON, blueprint.CodeInvalidType, blueprint.CodeInvalidValue, blueprint.CodeUnknownProperty,
		blueprint.CodeMissingProperty, blueprint.CodeUnknownStep, blueprint.CodeUnknownResource, blueprint.CodeDeprecated,
		blueprint.CodeUnsupportedStep, blueprint.CodeUnsupportedVersion, blueprint.CodePHPVersionUnavailable, blueprint.CodeWPVersionUnavailable,
		blueprint.CodeWPCLIUnsupported, blueprint.CodeResourceUnreachable, blueprint.CodePathOutsideSite, blueprint.CodeIgnoredStep,
		blueprint.CodeBundledResource, blueprint.CodeBundledFileMissing, blueprint.CodeTooManyFindings, blueprint.CodeTooManySteps,
		blueprint.CodeReservedConstant, blueprint.CodeFromLibrary} {
		codes += c + " (" + blueprint.Codes[c] + ") "
	}
	a.maybeBearer(r, read, rest.Route{Method: "POST", Path: "/api/app/blueprints/validate", Tag: "blueprints",
		Summary: "Check a Blueprint without saving it; with adapt, also get a source that runs here and its changes. " +
			"Needs no token unless blueprintId is given. " + codes,
		Request: ValidateBlueprintRequest{}, Response: blueprintspec.Validation{}, Errors: append([]string{apierr.CodeInvalidRequest}, nf...),
		Handler: a.validateBlueprint})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/blueprints", Tag: "blueprints", Status: http.StatusCreated,
		Summary: "Save a Blueprint (with its compatibility report; one with error findings is saved but cannot run until they are fixed).",
		Request: SaveBlueprintRequest{}, Response: blueprintResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodePlanLimitReached}, Handler: a.saveBlueprint})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/blueprints/import", Tag: "blueprints",
		Summary: "Fetch a Blueprint's JSON from a URL without saving it (through the address guard; ZIPs refused).",
		Request: ImportBlueprintRequest{}, Response: ImportBlueprintResponse{}, Errors: []string{apierr.CodeInvalidRequest},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			var body ImportBlueprintRequest
			if err := rest.DecodeJSON(req, &body); err != nil {
				return err
			}
			src, u, err := a.blueprints.Import(req.Context(), body.URL)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, ImportBlueprintResponse{Source: string(src), SourceURL: u})
		}})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/blueprints/upload", Tag: "blueprints", Status: http.StatusCreated,
		Summary: "Save a Blueprint bundle: a ZIP (up to 64 MiB, the Library's ZIP rules) with exactly one blueprint.json at its root or in its one " +
			"top-level directory, and the files its bundled resources name. With preview=1 nothing is saved (200). Changes that need review " +
			"are applied only with adaptationsAccepted=true; a bundle that still cannot run is refused.",
		Multipart: map[string]string{"bundle": "file: the ZIP (or bundleUrl).", "bundleUrl": "http(s) URL of the ZIP.", "name": "Default: meta.title.",
			"description": "", "adaptationsAccepted": "true to accept changes that need review."},
		Query:      map[string]string{"preview": "1 to inspect compatibility and adaptations without saving (answers 200)."},
		AlsoStatus: map[int]string{http.StatusOK: "with preview=1: the Blueprint as it would be saved (without an id) and its adaptation; nothing is saved."},
		Response:   uploadResponse{}, MaxBody: blueprint.MaxBundle + 1<<20, Idempotent: true,
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodePayloadTooLarge, apierr.CodePlanLimitReached}, Handler: a.uploadBlueprint})
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/blueprints", Tag: "blueprints", Summary: "The workspace's saved Blueprints.",
		Response: blueprintsResponse{}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			bs, err := a.store.BlueprintsOf(CallerFrom(req.Context()).Workspace.ID)
			if err != nil {
				return err
			}
			out := make([]BlueprintView, 0, len(bs))
			for _, b := range bs {
				out = append(out, blueprintView(b))
			}
			return rest.JSON(w, http.StatusOK, blueprintsResponse{Blueprints: out})
		}})
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/blueprints/{id}", Tag: "blueprints", Summary: "One saved Blueprint.",
		Params: blueprintParam, Response: blueprintResponse{}, Errors: nf, Handler: func(w http.ResponseWriter, req *http.Request) error {
			b, err := a.blueprintIn(req)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, blueprintResponse{Blueprint: blueprintView(b)})
		}})
	a.bearer(r, write, rest.Route{Method: "PATCH", Path: "/api/app/blueprints/{id}", Tag: "blueprints",
		Summary: "Rename, describe, or replace the source of a saved Blueprint (a new source is checked again and its revision grows by one).",
		Params:  blueprintParam, Request: PatchBlueprintRequest{}, Response: blueprintResponse{},
		Errors: append(nf, apierr.CodeInvalidRequest), Handler: a.patchBlueprint})
	a.bearer(r, write, rest.Route{Method: "DELETE", Path: "/api/app/blueprints/{id}", Tag: "blueprints",
		Summary: "Delete a saved Blueprint; templates baked from it keep their content.", Params: blueprintParam,
		Response: deletedResponse{}, Errors: nf, Handler: func(w http.ResponseWriter, req *http.Request) error {
			b, err := a.blueprintIn(req)
			if err != nil {
				return err
			}
			if err := a.blueprints.Delete(req.Context(), b); err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
		}})
}

func (a *base) blueprintIn(req *http.Request) (*state.Blueprint, error) {
	return blueprintspec.In(a.store, CallerFrom(req.Context()).Workspace.ID, req.PathValue("id"))
}

func (a blueprintRoutes) validateBlueprint(w http.ResponseWriter, req *http.Request) error {
	var body ValidateBlueprintRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	var src []byte
	var saved *state.Blueprint
	if body.BlueprintID != "" {
		c := CallerFrom(req.Context())
		if c == nil {
			return apierr.AuthRequired()
		}
		b, err := blueprintspec.In(a.store, c.Workspace.ID, body.BlueprintID)
		if err != nil {
			return err
		}
		src, saved = b.Source, b
	}
	if len(body.Source) > 0 || src == nil {
		var err error
		if src, err = blueprintspec.Source(body.Source, "source"); err != nil {
			return err
		}
	}
	ws := ""
	if c := CallerFrom(req.Context()); c != nil && c.Workspace != nil {
		ws = c.Workspace.ID
	}
	v, err := a.blueprints.Validate(src, body.Adapt, saved, ws)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, v)
}

// sourceOf is a body's source, or its legacy sourceJson.
func sourceOf(source, legacy json.RawMessage, required bool) ([]byte, error) {
	switch {
	case len(source) > 0:
		return blueprintspec.Source(source, "source")
	case len(legacy) > 0:
		return blueprintspec.Source(legacy, "sourceJson")
	case required:
		return nil, apierr.Invalid("source", "source is required: the Blueprint JSON, as an object or a string")
	}
	return nil, nil
}

func (a blueprintRoutes) saveBlueprint(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body SaveBlueprintRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	src, err := sourceOf(body.Source, body.SourceJSON, true)
	if err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusCreated, func(b state.Blueprint) any { return blueprintResponse{Blueprint: blueprintView(&b)} })
	in := blueprintspec.Create{Workspace: c.Workspace, By: c.Account, Name: body.Name, Description: body.Description, Source: src, Answer: ans}
	_, err = a.blueprints.Create(req.Context(), in)
	return respond(a.base, w, req, ans, err)
}

func (a blueprintRoutes) patchBlueprint(w http.ResponseWriter, req *http.Request) error {
	b, err := a.blueprintIn(req)
	if err != nil {
		return err
	}
	var body PatchBlueprintRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	src, err := sourceOf(body.Source, body.SourceJSON, false)
	if err != nil {
		return err
	}
	next, err := a.blueprints.Update(req.Context(), b, blueprintspec.Patch{Name: body.Name, Description: body.Description, Source: src})
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, blueprintResponse{Blueprint: blueprintView(next)})
}

func (a blueprintRoutes) uploadBlueprint(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	f, err := rest.ReadForm(req, []string{"bundle"}, []string{"bundleUrl", "name", "description", "adaptationsAccepted"})
	if err != nil {
		return err
	}
	accepted := false
	switch v := f.Field["adaptationsAccepted"]; v {
	case "", "false", "0":
	case "true", "1":
		accepted = true
	default:
		return apierr.Invalid("adaptationsAccepted", "adaptationsAccepted is true or false")
	}
	in := blueprintspec.Upload{Workspace: c.Workspace, By: c.Account, Name: f.Field["name"], Description: f.Field["description"],
		Bundle: f.File, BundleURL: f.Field["bundleUrl"], AdaptationsAccepted: accepted, Preview: req.URL.Query().Get("preview") == "1"}
	if in.Preview {
		res, err := a.blueprints.Upload(req.Context(), in)
		if err != nil {
			return err
		}
		return rest.JSON(w, http.StatusOK, uploadResponse{Blueprint: blueprintView(res.Blueprint), Adapted: res.Adapted})
	}
	// The saved answer is the Blueprint as saved (its source adapted when
	// it was); preview=1 lists the changes.
	in.Answer = answer(a.base, req, http.StatusCreated, func(b state.Blueprint) any { return uploadResponse{Blueprint: blueprintView(&b)} })
	_, err = a.blueprints.Upload(req.Context(), in)
	return respond(a.base, w, req, in.Answer, err)
}
