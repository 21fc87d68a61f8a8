package api

import (
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

type jobResponse struct {
	Job JobView `json:"job"`
}

// jobRoutes are the workspace's jobs.
type jobRoutes struct {
	*base
}

func (a jobRoutes) register(r *rest.Router) {
	a.bearer(r, guard{scope: scopeWorkspace}, rest.Route{Method: "GET", Path: "/api/app/jobs/{id}", Tag: "jobs",
		Summary: "Poll an asynchronous job.", Params: map[string]string{"id": "job"}, Response: jobResponse{},
		Errors: []string{apierr.CodeJobNotFound}, Handler: a.getJob})
}

func (a jobRoutes) getJob(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	j, err := a.store.Job(req.PathValue("id"))
	if err != nil {
		return err
	}
	if j == nil || j.WorkspaceID != c.Workspace.ID {
		return apierr.NotFound(apierr.CodeJobNotFound, "job")
	}
	return rest.JSON(w, http.StatusOK, jobResponse{Job: jobView(j)})
}
