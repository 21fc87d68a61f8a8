package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// The MCP server gives an AI agent the whole loop on disposable
// WordPress sites: make one (stock, from a template or a Blueprint),
// change it (files, PHP, SQL, plugins, php.ini), look at it (a
// screenshot as an image, its debug log and mail), keep and restore
// checkpoints, fork it, and throw it away.
//
// Every tool is a call of the REST API's own routes, made in-process
// with the agent's credential: the same guards (workspace, capability),
// plan limits, rate limits and Idempotency-Key answers hold, and a
// tool's error is the API's error (its code, message and details).
// Long tools wait for their job and report its progress.

// MCPPath is where AI agents reach the service's MCP tools.
const MCPPath = "/mcp"

// LicenseToolName is the one path that may read a Library license key.
const LicenseToolName = "service_get_plugin_license"

// viaMCPKey marks a request the MCP server made of a tool call; nothing
// outside this process can set it.
type viaMCPKey struct{}

// viaMCP reports whether a request is a tool call of the MCP server.
func viaMCP(r *http.Request) bool { v, _ := r.Context().Value(viaMCPKey{}).(bool); return v }

// mcpRoutes are the MCP server for AI agents.
type mcpRoutes struct {
	*base
	library Library
	// routes is the API the tools call.
	routes http.Handler
	// resource is the endpoint's URL (the audience of its tokens) and
	// metadata its protected resource metadata's (RFC 9728).
	resource, metadata string
}

func (a mcpRoutes) register(r *rest.Router) {
	h := mcp.NewStreamableHTTPHandler(func(req *http.Request) *mcp.Server {
		c := CallerFrom(req.Context())
		if c == nil {
			return nil
		}
		return a.mcpServer(&mcpSession{a: a, caller: c, auth: req.Header.Get("Authorization"), remote: req.RemoteAddr})
	}, &mcp.StreamableHTTPOptions{Stateless: true, Logger: a.log})
	rt := a.bearerRoute(guard{scope: scopeWorkspace, oauthScope: state.ScopeMCP}, rest.Route{Method: "POST", Path: MCPPath, Tag: "mcp",
		Summary: "Model Context Protocol endpoint for AI agents (streamable HTTP, stateless; answers as server-sent events). " +
			"A personal token, or an OAuth token with scope mcp issued for this endpoint (RFC 8707; discovery at " +
			"/.well-known/oauth-protected-resource). tools/list names every tool with its input and output schema; each is a call " +
			"of this API's routes with the caller's capabilities, and its errors carry the API's codes. " + LicenseToolName +
			" {plugin} returns a Library entry's license key (needs reusables) and stamps licenseKeyLastReadAt.",
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			c := CallerFrom(req.Context())
			if c.Token.Kind == state.TokenOAuth && c.Token.Resource != "" && c.Token.Resource != a.resource {
				// A token issued for another resource is none here.
				w.Header().Set("WWW-Authenticate", a.challenge(`error="invalid_token", error_description="the token was issued for another resource"`))
				return apierr.AuthRequired()
			}
			h.ServeHTTP(w, req)
			return nil
		}})
	inner := rt.Handler
	rt.Handler = func(w http.ResponseWriter, req *http.Request) error {
		err := inner(w, req)
		var ae *apierr.Error
		if errors.As(err, &ae) && ae.Code == apierr.CodeAuthRequired && w.Header().Get("WWW-Authenticate") == "" {
			// How an MCP client given only this URL finds where to sign in.
			w.Header().Set("WWW-Authenticate", a.challenge(""))
		}
		return err
	}
	r.Handle(rt)
}

// challenge is the endpoint's WWW-Authenticate value (RFC 9728 5.1).
func (a mcpRoutes) challenge(extra string) string {
	v := `Bearer resource_metadata="` + a.metadata + `", scope="` + state.ScopeMCP + `"`
	if extra != "" {
		v += ", " + extra
	}
	return v
}

// mcpSession is one MCP request's caller, whose credential every tool
// call of it carries.
type mcpSession struct {
	a      mcpRoutes
	caller *Caller
	auth   string
	remote string
}

// toolError is an API error as a tool answers it: its envelope, as JSON.
type toolError struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
}

func (e *toolError) Error() string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": e.Code, "message": e.Message, "details": e.Details}})
	return string(b)
}

// maxToolAnswer bounds what one tool reads from a route.
const maxToolAnswer = 64 << 20

// recorder keeps a route's answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len()+len(p) > maxToolAnswer {
		return 0, errors.New("the answer is too large for a tool")
	}
	return r.body.Write(p)
}

// call makes one API call as the session's caller and decodes its answer
// into out (nil: none); an error answer is a *toolError.
func (s *mcpSession) call(ctx context.Context, method, path string, query url.Values, body any, key string, out any) error {
	_, err := s.raw(ctx, method, path, query, body, key, out)
	return err
}

// raw is call, answering the body as it came too.
func (s *mcpSession) raw(ctx context.Context, method, path string, query url.Values, body any, key string, out any) ([]byte, error) {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(context.WithValue(ctx, viaMCPKey{}, true), method, path, rd)
	if err != nil {
		return nil, err
	}
	req.RemoteAddr = s.remote
	req.Header.Set("Authorization", s.auth)
	req.Header.Set(WorkspaceHeader, s.caller.Workspace.ID)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(IdempotencyHeader, key)
	}
	rec := &recorder{header: http.Header{}}
	s.a.routes.ServeHTTP(rec, req)
	if rec.status >= 300 && rec.status < 400 {
		// A path the router would redirect (an id such as ".."): no
		// resource of the API's.
		return nil, &toolError{Status: http.StatusNotFound, Code: apierr.CodeNotFound, Message: "no such resource"}
	}
	if rec.status >= 400 {
		var env struct {
			Error struct {
				Code    string         `json:"code"`
				Message string         `json:"message"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		if json.Unmarshal(rec.body.Bytes(), &env) != nil || env.Error.Code == "" {
			return nil, &toolError{Status: rec.status, Code: apierr.CodeInternal, Message: strings.TrimSpace(rec.body.String())}
		}
		return nil, &toolError{Status: rec.status, Code: env.Error.Code, Message: env.Error.Message, Details: env.Error.Details}
	}
	if out != nil {
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			return nil, fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return rec.body.Bytes(), nil
}

// progress tells the client how far a long tool is, when it asked.
func progress(ctx context.Context, req *mcp.CallToolRequest, done float64, msg string) {
	if req == nil || req.Session == nil {
		return
	}
	tok := req.Params.GetProgressToken()
	if tok == nil {
		return
	}
	_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: done, Total: 100, Message: msg})
}

// jobWait bounds how long a tool waits for its job.
const jobWait = 10 * time.Minute

// pollEvery is how long a tool waits between two looks at its job.
func pollEvery(since time.Time) time.Duration {
	if time.Since(since) < 15*time.Second {
		return 25 * time.Millisecond
	}
	return 500 * time.Millisecond
}

// waitJob follows a job to its end, reporting its progress; a failed job
// is the tool's error, with the job's code.
func (s *mcpSession) waitJob(ctx context.Context, req *mcp.CallToolRequest, id, what string) (*JobView, error) {
	ctx, cancel := context.WithTimeout(ctx, jobWait)
	defer cancel()
	last := -1
	// A job's state is a read of this server's replica: polled often for
	// its first seconds (most jobs end within them), then less.
	for start, wait := time.Now(), 25*time.Millisecond; ; wait = pollEvery(start) {
		var r jobResponse
		if err := s.call(ctx, "GET", "/api/app/jobs/"+url.PathEscape(id), nil, nil, "", &r); err != nil {
			return nil, err
		}
		j := r.Job
		if j.Progress != last {
			last = j.Progress
			progress(ctx, req, float64(j.Progress), what+": "+j.Status)
		}
		switch j.Status {
		case state.JobSucceeded:
			progress(ctx, req, 100, what+": done")
			return &j, nil
		case state.JobFailed:
			te := &toolError{Status: http.StatusConflict, Code: "job_failed", Message: what + " failed",
				Details: map[string]any{"jobId": j.ID}}
			if j.Error != nil {
				te.Code, te.Message = j.Error.Code, what+" failed: "+j.Error.Message
			}
			return nil, te
		}
		select {
		case <-ctx.Done():
			return nil, &toolError{Status: http.StatusGatewayTimeout, Code: "job_pending",
				Message: what + " is still running; follow it with job_get", Details: map[string]any{"jobId": id}}
		case <-time.After(wait):
		}
	}
}

// waitRun follows a Blueprint run to its end.
func (s *mcpSession) waitRun(ctx context.Context, req *mcp.CallToolRequest, run RunView) (*RunView, error) {
	ctx, cancel := context.WithTimeout(ctx, jobWait)
	defer cancel()
	bp := run.BlueprintID
	if bp == "" {
		bp = "unsaved"
	}
	for start, wait := time.Now(), 50*time.Millisecond; ; wait = pollEvery(start) {
		var r runResponse
		if err := s.call(ctx, "GET", "/api/app/blueprints/"+url.PathEscape(bp)+"/runs/"+url.PathEscape(run.ID), nil, nil, "", &r); err != nil {
			return nil, err
		}
		done := 0
		for _, st := range r.Run.Steps {
			if st.Status != state.RunPending && st.Status != state.RunRunning {
				done++
			}
		}
		if n := len(r.Run.Steps); n > 0 {
			progress(ctx, req, float64(100*done/n), fmt.Sprintf("Blueprint: %d of %d steps", done, n))
		}
		switch r.Run.Status {
		case state.RunSucceeded:
			return &r.Run, nil
		case state.RunFailed:
			return nil, &toolError{Status: http.StatusConflict, Code: "blueprint_failed", Message: r.Run.FailureReason,
				Details: map[string]any{"runId": r.Run.ID, "log": r.Run.Log}}
		}
		select {
		case <-ctx.Done():
			return nil, &toolError{Status: http.StatusGatewayTimeout, Code: "job_pending", Message: "the Blueprint is still running",
				Details: map[string]any{"runId": r.Run.ID}}
		case <-time.After(wait):
		}
	}
}
