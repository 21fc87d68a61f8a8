package api

import (
	"context"
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// CodeRunner runs an agent's PHP and SQL in a site.
type CodeRunner interface {
	RunPHP(ctx context.Context, s *state.Site, code string, timeoutSeconds int) (*sitespec.PHPRun, error)
	RunSQL(ctx context.Context, s *state.Site, query string, timeoutSeconds int) (*sitespec.SQLRun, error)
}

// PHPRequest is the body of POST /api/app/sites/{id}/php.
type PHPRequest struct {
	Code           string `json:"code" doc:"A PHP file's content (<?php …), run by the PHP CLI as the site's user from its WordPress root: require 'wp-load.php'; loads WordPress. At most 1 MiB."`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty" doc:"1..120; default 30."`
}

// SQLRequest is the body of POST /api/app/sites/{id}/sql.
type SQLRequest struct {
	Query          string `json:"query" doc:"One statement, run in the site's database over the site's own database account (which reaches nothing else). At most 1 MiB."`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty" doc:"1..120; default 30."`
}

// codeRoutes run PHP and SQL in a site.
type codeRoutes struct {
	*base
	code CodeRunner
}

func (a codeRoutes) register(r *rest.Router) {
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	errs := []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, apierr.CodePayloadTooLarge, apierr.CodePlanLimitReached}
	a.bearer(r, g, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/php", Tag: "sites", Params: siteParam,
		Summary: "Run a PHP script in the site as its user; a non-zero exit is an answer, not an error.",
		Request: PHPRequest{}, Response: sitespec.PHPRun{}, Errors: errs,
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			var body PHPRequest
			if err := rest.DecodeJSON(req, &body); err != nil {
				return err
			}
			out, err := a.code.RunPHP(req.Context(), s, body.Code, body.TimeoutSeconds)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, out)
		}})
	a.bearer(r, g, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/sql", Tag: "sites", Params: siteParam,
		Summary: "Run one SQL statement in the site's database; a statement the database refuses is 400 invalid_request with its reason.",
		Request: SQLRequest{}, Response: sitespec.SQLRun{}, Errors: errs,
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			var body SQLRequest
			if err := rest.DecodeJSON(req, &body); err != nil {
				return err
			}
			out, err := a.code.RunSQL(req.Context(), s, body.Query, body.TimeoutSeconds)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, out)
		}})
}

// Screenshots takes pictures of sites' pages.
type Screenshots interface {
	Screenshot(ctx context.Context, s *state.Site, in sitespec.ScreenshotRequest) (*sitespec.Screenshot, error)
}

type screenshotResponse struct {
	Screenshot *sitespec.Screenshot `json:"screenshot"`
}

// screenshotRoutes take pictures of sites' pages.
type screenshotRoutes struct {
	*base
	shots Screenshots
}

func (a screenshotRoutes) register(r *rest.Router) {
	a.bearer(r, guard{scope: scopeWorkspace}, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/screenshot", Tag: "sites", Params: siteParam,
		Summary: "A PNG of a page of the site, taken by its node's headless browser (which reaches that site alone) and kept for 15 " +
			"minutes at the URL answered; a page still loading after 10 s is taken as it is then (loaded false).",
		Request: sitespec.ScreenshotRequest{}, Response: screenshotResponse{},
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, apierr.CodeServiceUnavailable},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			var body sitespec.ScreenshotRequest
			if err := rest.DecodeJSON(req, &body); err != nil {
				return err
			}
			shot, err := a.shots.Screenshot(req.Context(), s, body)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, screenshotResponse{Screenshot: shot})
		}})
}
