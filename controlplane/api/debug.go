package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// SiteTools is what the toolbox routes need from the sites service:
// calls to the agent holding a ready site, with its failures already in
// the contract's terms.
type SiteTools interface {
	MagicLogin(ctx context.Context, s *state.Site) (*sitespec.LoginLink, error)
	Debug(ctx context.Context, s *state.Site) (*sitespec.DebugSettings, error)
	SetDebug(ctx context.Context, s *state.Site, p sitespec.DebugPatch) (*sitespec.DebugSettings, error)
	DebugLog(ctx context.Context, s *state.Site, lines int) (*sitespec.DebugLog, error)
	TruncateDebugLog(ctx context.Context, s *state.Site) error
	Database(ctx context.Context, s *state.Site) (*sitespec.DatabaseAccess, error)
	Emails(ctx context.Context, s *state.Site) ([]sitespec.Email, error)
	ClearEmails(ctx context.Context, s *state.Site) error
	Plugins(ctx context.Context, s *state.Site) ([]sitespec.InstalledPlugin, error)
	Files(ctx context.Context, s *state.Site, op sitespec.FileOp) (*sitespec.FileAnswer, error)
}

type debugResponse struct {
	Debug *sitespec.DebugSettings `json:"debug"`
}

type okResponse struct {
	OK bool `json:"ok"`
}

// debugRoutes are a site's WordPress debug settings and log.
type debugRoutes struct {
	*base
	tools SiteTools
}

func (a debugRoutes) register(r *rest.Router) {
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	errs := []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/debug", Tag: "sites", Params: siteParam,
		Summary: "WordPress debug settings of a ready site.", Response: debugResponse{}, Errors: errs, Handler: a.getDebug})
	a.bearer(r, g, rest.Route{Method: "PUT", Path: "/api/app/sites/{id}/debug", Tag: "sites", Params: siteParam,
		Summary: "Change any of wpDebug, wpDebugLog, wpDebugDisplay, scriptDebug; applies from the next request.",
		Request: sitespec.DebugPatch{}, Response: debugResponse{}, Errors: append(errs, apierr.CodePayloadTooLarge), Handler: a.putDebug})
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/debug/log", Tag: "sites", Params: siteParam,
		Query:   map[string]string{"lines": "Trailing lines to return, clamped to 1..2000; 500 when omitted or not a number."},
		Summary: "Tail wp-content/debug.log.", Response: sitespec.DebugLog{}, Errors: errs, Handler: a.tailDebugLog})
	a.bearer(r, g, rest.Route{Method: "DELETE", Path: "/api/app/sites/{id}/debug/log", Tag: "sites", Params: siteParam,
		Summary: "Truncate wp-content/debug.log; a missing log counts as success.", Response: okResponse{}, Errors: errs,
		Handler: a.truncateDebugLog})
}

func (a debugRoutes) getDebug(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	d, err := a.tools.Debug(req.Context(), s)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, debugResponse{Debug: d})
}

func (a debugRoutes) putDebug(w http.ResponseWriter, req *http.Request) error {
	var body sitespec.DebugPatch
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	d, err := a.tools.SetDebug(req.Context(), s, body)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, debugResponse{Debug: d})
}

// logLines reads ?lines=: clamped to 1..2000, 500 when omitted or not a
// number, as the contract says.
func logLines(req *http.Request) int {
	n, err := strconv.Atoi(req.URL.Query().Get("lines"))
	switch {
	case err != nil:
		return sitespec.DefaultLogLines
	case n < 1:
		return 1
	case n > sitespec.MaxLogLines:
		return sitespec.MaxLogLines
	}
	return n
}

func (a debugRoutes) tailDebugLog(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	l, err := a.tools.DebugLog(req.Context(), s, logLines(req))
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, l)
}

func (a debugRoutes) truncateDebugLog(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	if err := a.tools.TruncateDebugLog(req.Context(), s); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, okResponse{OK: true})
}
