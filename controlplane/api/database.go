package api

import (
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

type databaseResponse struct {
	Database *sitespec.DatabaseAccess `json:"database"`
}

// databaseRoutes are a site's database access.
type databaseRoutes struct {
	*base
	tools SiteTools
}

func (a databaseRoutes) register(r *rest.Router) {
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/database", Tag: "sites", Params: siteParam,
		Summary:  "The site's database credentials and a one-time Adminer link signed in to that database only.",
		Response: databaseResponse{}, Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest},
		Handler: a.getDatabase})
}

func (a databaseRoutes) getDatabase(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	db, err := a.tools.Database(req.Context(), s)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, databaseResponse{Database: db})
}
