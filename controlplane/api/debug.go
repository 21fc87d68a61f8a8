package api

import (
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// DebugSettings are WordPress's debug constants of a site.
type DebugSettings struct {
	WPDebug        bool `json:"wpDebug"`
	WPDebugLog     bool `json:"wpDebugLog"`
	WPDebugDisplay bool `json:"wpDebugDisplay"`
	ScriptDebug    bool `json:"scriptDebug"`
}

// DebugPatch is the body of PUT …/debug: any subset of the settings.
type DebugPatch struct {
	WPDebug        *bool `json:"wpDebug,omitempty"`
	WPDebugLog     *bool `json:"wpDebugLog,omitempty"`
	WPDebugDisplay *bool `json:"wpDebugDisplay,omitempty"`
	ScriptDebug    *bool `json:"scriptDebug,omitempty"`
}

type debugResponse struct {
	Debug DebugSettings `json:"debug"`
}

// DebugLog is the contract's debug log result.
type DebugLog struct {
	Content string `json:"content"`
	Exists  bool   `json:"exists"`
	Lines   int    `json:"lines"`
	// Truncated says the log is longer than the end that was read (1 MiB).
	Truncated bool `json:"truncated" doc:"The log is longer than the last MiB that was read; older lines are not shown."`
}

type okResponse struct {
	OK bool `json:"ok"`
}

// Tail lengths of the debug log, from the contract.
const (
	DefaultLogLines = 500
	MaxLogLines     = 2000
)

func (a *API) registerDebug(r *rest.Router) {
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	errs := []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/debug", Tag: "sites", Params: siteParam,
		Summary: "WordPress debug settings of a ready site.", Response: debugResponse{}, Errors: errs, Handler: a.getDebug})
	a.bearer(r, g, rest.Route{Method: "PUT", Path: "/api/app/sites/{id}/debug", Tag: "sites", Params: siteParam,
		Summary: "Change any of wpDebug, wpDebugLog, wpDebugDisplay, scriptDebug; applies from the next request.",
		Request: DebugPatch{}, Response: debugResponse{}, Errors: append(errs, apierr.CodePayloadTooLarge), Handler: a.putDebug})
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/debug/log", Tag: "sites", Params: siteParam,
		Query:   map[string]string{"lines": "Trailing lines to return, clamped to 1..2000; 500 when omitted or not a number."},
		Summary: "Tail wp-content/debug.log.", Response: DebugLog{}, Errors: errs, Handler: a.tailDebugLog})
	a.bearer(r, g, rest.Route{Method: "DELETE", Path: "/api/app/sites/{id}/debug/log", Tag: "sites", Params: siteParam,
		Summary: "Truncate wp-content/debug.log; a missing log counts as success.", Response: okResponse{}, Errors: errs,
		Handler: a.truncateDebugLog})
}

// readyAgent returns a ready site of the caller's workspace and a client
// for the agent holding it.
func (a *API) readyAgent(req *http.Request) (*state.Site, agentv1connect.AgentServiceClient, error) {
	s, err := a.siteIn(req)
	if err != nil {
		return nil, nil, err
	}
	if s.Status != state.SiteReady {
		return nil, nil, notReady(s)
	}
	agent, err := a.cfg.Nodes.Agent(s.NodeID)
	if err != nil {
		return nil, nil, apierr.Unavailable("the site's node is not reachable")
	}
	return s, agent, nil
}

// agentError turns an agent call's failure into an API error.
func agentError(err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return apierr.Unavailable("the site is not on its node")
	case connect.CodeInvalidArgument:
		return apierr.Invalid("", "%s", connect.NewError(connect.CodeInvalidArgument, err).Message())
	}
	return apierr.Unavailable("the site's node did not answer")
}

func debugView(d *agentv1.DebugSettings) DebugSettings {
	return DebugSettings{WPDebug: d.WpDebug, WPDebugLog: d.WpDebugLog, WPDebugDisplay: d.WpDebugDisplay, ScriptDebug: d.ScriptDebug}
}

func (a *API) getDebug(w http.ResponseWriter, req *http.Request) error {
	s, agent, err := a.readyAgent(req)
	if err != nil {
		return err
	}
	resp, err := agent.GetDebug(req.Context(), connect.NewRequest(&agentv1.SiteRef{SiteId: s.ID}))
	if err != nil {
		return agentError(err)
	}
	return rest.JSON(w, http.StatusOK, debugResponse{Debug: debugView(resp.Msg)})
}

func (a *API) putDebug(w http.ResponseWriter, req *http.Request) error {
	var body DebugPatch
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	s, agent, err := a.readyAgent(req)
	if err != nil {
		return err
	}
	resp, err := agent.SetDebug(req.Context(), connect.NewRequest(&agentv1.SetDebugRequest{SiteId: s.ID,
		WpDebug: body.WPDebug, WpDebugLog: body.WPDebugLog, WpDebugDisplay: body.WPDebugDisplay, ScriptDebug: body.ScriptDebug}))
	if err != nil {
		return agentError(err)
	}
	return rest.JSON(w, http.StatusOK, debugResponse{Debug: debugView(resp.Msg)})
}

// logLines reads ?lines=: clamped to 1..2000, 500 when omitted or not a
// number, as the contract says.
func logLines(req *http.Request) int {
	n, err := strconv.Atoi(req.URL.Query().Get("lines"))
	switch {
	case err != nil:
		return DefaultLogLines
	case n < 1:
		return 1
	case n > MaxLogLines:
		return MaxLogLines
	}
	return n
}

func (a *API) tailDebugLog(w http.ResponseWriter, req *http.Request) error {
	s, agent, err := a.readyAgent(req)
	if err != nil {
		return err
	}
	resp, err := agent.TailDebugLog(req.Context(), connect.NewRequest(&agentv1.TailDebugLogRequest{SiteId: s.ID, Lines: int32(logLines(req))}))
	if err != nil {
		return agentError(err)
	}
	return rest.JSON(w, http.StatusOK, DebugLog{Content: resp.Msg.Content, Exists: resp.Msg.Exists, Lines: int(resp.Msg.Lines),
		Truncated: resp.Msg.Truncated})
}

func (a *API) truncateDebugLog(w http.ResponseWriter, req *http.Request) error {
	s, agent, err := a.readyAgent(req)
	if err != nil {
		return err
	}
	if _, err := agent.TruncateDebugLog(req.Context(), connect.NewRequest(&agentv1.SiteRef{SiteId: s.ID})); err != nil {
		return agentError(err)
	}
	return rest.JSON(w, http.StatusOK, okResponse{OK: true})
}
