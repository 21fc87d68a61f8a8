package api

import (
	"net/http"
	"strings"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// PHPVersionRequest is the body of PUT …/php-version.
type PHPVersionRequest struct {
	PHPVersion string `json:"phpVersion" doc:"One of 8.5 8.4 8.3 8.2 8.1 7.4."`
}

type phpVersionResponse struct {
	PHPVersion string `json:"phpVersion"`
	JobID      string `json:"jobId"`
}

// phpVersionRoutes are a site's PHP version.
type phpVersionRoutes struct {
	*base
	sites SiteChanges
}

func (a phpVersionRoutes) register(r *rest.Router) {
	a.bearer(r, guard{scope: scopeWorkspace, capability: access.Internals}, rest.Route{Method: "PUT",
		Path: "/api/app/sites/{id}/php-version", Tag: "sites", Params: siteParam, Status: http.StatusAccepted,
		Summary: "Switch a ready site's PHP version. The site's phpVersion changes only once WordPress answers on the new " +
			"runtime; otherwise the job fails and the site keeps serving on its version.",
		Request: PHPVersionRequest{}, Response: phpVersionResponse{},
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodeSiteNotFound, apierr.CodePayloadTooLarge}, Handler: a.switchPHP})
}

func (a phpVersionRoutes) switchPHP(w http.ResponseWriter, req *http.Request) error {
	var body PHPVersionRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	if !sitespec.ValidPHP(body.PHPVersion) {
		return apierr.Invalid("phpVersion", "phpVersion must be one of %s", strings.Join(sitespec.PHPVersions, ", ")).
			With("allowed", sitespec.PHPVersions)
	}
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	job, err := a.sites.SwitchPHP(req.Context(), s, body.PHPVersion)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusAccepted, phpVersionResponse{PHPVersion: body.PHPVersion, JobID: job})
}
