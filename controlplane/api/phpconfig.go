package api

import (
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// PHPConfig is a site's allow-listed php.ini settings.
type PHPConfig struct {
	Settings map[string]string `json:"settings"`
}

// PHPConfigRequest is the body of PUT …/php-config. Values may be strings
// or numbers.
type PHPConfigRequest struct {
	Settings map[string]any `json:"settings"`
}

type phpConfigResponse struct {
	PHPConfig PHPConfig `json:"phpConfig"`
}

type phpConfigJobResponse struct {
	PHPConfig PHPConfig `json:"phpConfig"`
	JobID     string    `json:"jobId"`
}

// phpConfigRoutes are a site's php.ini settings.
type phpConfigRoutes struct {
	*base
	sites SiteChanges
}

func (a phpConfigRoutes) register(r *rest.Router) {
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/php-config", Tag: "sites", Params: siteParam,
		Summary: "The site's allow-listed php.ini settings in effect.", Response: phpConfigResponse{},
		Errors: []string{apierr.CodeSiteNotFound}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, phpConfigResponse{PHPConfig: PHPConfig{Settings: sitespec.EffectivePHP(s.PHPConfig)}})
		}})
	a.bearer(r, g, rest.Route{Method: "PUT", Path: "/api/app/sites/{id}/php-config", Tag: "sites", Params: siteParam,
		Status: http.StatusAccepted, Request: PHPConfigRequest{}, Response: phpConfigJobResponse{},
		Summary: "Change php.ini settings (memory_limit, upload_max_filesize, post_max_size, max_execution_time, " +
			"max_input_time, max_input_vars, display_errors); a job applies them without taking the site down.",
		Errors:  []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, apierr.CodePayloadTooLarge},
		Handler: a.putPHPConfig})
}

func (a phpConfigRoutes) putPHPConfig(w http.ResponseWriter, req *http.Request) error {
	var body PHPConfigRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	if _, err := sitespec.ParsePHPSettings(body.Settings); err != nil {
		return err // before the site: a bad body is 400 whatever the id
	}
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	settings, job, err := a.sites.SetPHPConfig(req.Context(), s, body.Settings)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusAccepted, phpConfigJobResponse{PHPConfig: PHPConfig{Settings: settings}, JobID: job})
}
