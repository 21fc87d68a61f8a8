package api

import (
	"context"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Checkpoints keeps sites' checkpoints and makes forks: what the
// checkpoint and fork routes need from the sites service.
type Checkpoints interface {
	MakeCheckpoint(ctx context.Context, ans *writes.Answer[state.Checkpoint], s *state.Site, name string) (*state.Checkpoint, error)
	Checkpoints(ctx context.Context, s *state.Site) ([]*state.Checkpoint, error)
	DeleteCheckpoint(ctx context.Context, s *state.Site, id string) error
	RestoreCheckpoint(ctx context.Context, ans *writes.Answer[sitespec.Made], s *state.Site, id string) (*state.Site, string, error)
	Fork(ctx context.Context, in sitespec.Fork) (*state.Site, string, error)
}

// CheckpointView is the addendum's checkpoint.
type CheckpointView struct {
	ID     string `json:"id"`
	SiteID string `json:"siteId"`
	Name   string `json:"name"`
	// SizeBytes: see state.Checkpoint.
	SizeBytes int64     `json:"sizeBytes" doc:"What the checkpoint holds beyond the site: the data the site changed since (a checkpoint shares everything else with it)."`
	CreatedAt time.Time `json:"createdAt"`
}

func checkpointView(c *state.Checkpoint) CheckpointView {
	return CheckpointView{ID: c.ID, SiteID: c.SiteID, Name: c.Name, SizeBytes: c.SizeBytes, CreatedAt: c.CreatedAt}
}

type checkpointResponse struct {
	Checkpoint CheckpointView `json:"checkpoint"`
}

type checkpointsResponse struct {
	Checkpoints []CheckpointView `json:"checkpoints"`
}

// CheckpointRequest is the body of POST /api/app/sites/{id}/checkpoints.
type CheckpointRequest struct {
	Name string `json:"name,omitempty" doc:"At most 100 characters; default: the time it was made."`
}

// ForkRequest is the body of POST /api/app/sites/{id}/fork.
type ForkRequest struct {
	Name             string `json:"name,omitempty" doc:"Default: the source's name with (fork)."`
	ExpiresInMinutes *int   `json:"expiresInMinutes,omitempty" doc:"1..43200; the fork is deleted when it expires."`
}

// checkpointRoutes are a site's checkpoints and its forks.
type checkpointRoutes struct {
	*base
	checkpoints Checkpoints
}

var checkpointParams = map[string]string{"id": "site", "checkpointId": "checkpoint"}

func (a checkpointRoutes) register(r *rest.Router) {
	change := guard{scope: scopeWorkspace, capability: access.Create}
	member := guard{scope: scopeWorkspace}
	a.bearer(r, change, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/checkpoints", Tag: "checkpoints", Status: http.StatusCreated,
		Summary: "Keep the site's files and database as they are now, while it serves (a few hundred milliseconds whatever its size; " +
			"it costs only what the site changes afterwards).",
		Params: siteParam, Request: CheckpointRequest{}, Response: checkpointResponse{}, Idempotent: true,
		Errors:  []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, apierr.CodePlanLimitReached, apierr.CodeConflict},
		Handler: a.make})
	a.bearer(r, member, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/checkpoints", Tag: "checkpoints",
		Summary: "The site's checkpoints, newest first.", Params: siteParam, Response: checkpointsResponse{},
		Errors: []string{apierr.CodeSiteNotFound}, Handler: a.list})
	a.bearer(r, change, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/checkpoints/{checkpointId}/restore", Tag: "checkpoints",
		Status: http.StatusAccepted, Summary: "Put the site back as it was at the checkpoint, in place: same id, URL and domain. The checkpoint stays.",
		Params: checkpointParams, Response: siteJobResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeCheckpointNotFound, apierr.CodeInvalidRequest, apierr.CodeConflict}, Handler: a.restore})
	a.bearer(r, change, rest.Route{Method: "DELETE", Path: "/api/app/sites/{id}/checkpoints/{checkpointId}", Tag: "checkpoints",
		Summary: "Delete a checkpoint.", Params: checkpointParams, Response: deletedResponse{},
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeCheckpointNotFound, apierr.CodeInvalidRequest}, Handler: a.delete})
	a.bearer(r, change, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/fork", Tag: "sites", Status: http.StatusAccepted,
		Summary: "A new site with the source's files and database at its own URL (every URL in its database moved, serialized values " +
			"included), made on the source's node while the source serves on; no template needed.",
		Params: siteParam, Request: ForkRequest{}, Response: siteJobResponse{}, Idempotent: true,
		Errors:  []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, apierr.CodePlanLimitReached, apierr.CodeConflict},
		Handler: a.fork})
}

func (a checkpointRoutes) make(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	var body CheckpointRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusCreated, func(c state.Checkpoint) any { return checkpointResponse{Checkpoint: checkpointView(&c)} })
	_, err = a.checkpoints.MakeCheckpoint(req.Context(), ans, s, body.Name)
	return respond(a.base, w, req, ans, err)
}

func (a checkpointRoutes) list(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	list, err := a.checkpoints.Checkpoints(req.Context(), s)
	if err != nil {
		return err
	}
	out := make([]CheckpointView, 0, len(list))
	for _, c := range list {
		out = append(out, checkpointView(c))
	}
	return rest.JSON(w, http.StatusOK, checkpointsResponse{Checkpoints: out})
}

func (a checkpointRoutes) restore(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusAccepted, siteJobAnswer)
	_, _, err = a.checkpoints.RestoreCheckpoint(req.Context(), ans, s, req.PathValue("checkpointId"))
	return respond(a.base, w, req, ans, err)
}

func (a checkpointRoutes) delete(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	if err := a.checkpoints.DeleteCheckpoint(req.Context(), s, req.PathValue("checkpointId")); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
}

func (a checkpointRoutes) fork(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	var body ForkRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	in := sitespec.Fork{Source: s, By: CallerFrom(req.Context()).Account, Name: body.Name, ExpiresInMinutes: body.ExpiresInMinutes,
		Answer: answer(a.base, req, http.StatusAccepted, siteJobAnswer)}
	_, _, err = a.checkpoints.Fork(req.Context(), in)
	return respond(a.base, w, req, in.Answer, err)
}
