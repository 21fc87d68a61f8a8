// Package rest is the HTTP framework of the API: a router whose routes
// carry the metadata the OpenAPI document is generated from, strict JSON
// decoding, the error envelope on every failure path, request ids,
// structured access logs and per-route metrics.
package rest

import (
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/internal/apierr"
)

// HandlerFunc serves one route. A returned error is written as the error
// envelope (an *apierr.Error as is; anything else as internal_error), so a
// handler writes only successes itself.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Route is one operation: how it is matched, served and documented.
type Route struct {
	Method string
	// Path in net/http pattern form: /api/app/workspaces/{id}/members.
	Path    string
	Summary string
	Tag     string
	// Security names the credential: "bearer", "operator" or "" for none.
	Security string
	// Internal routes are served on the cluster port only, to servers of
	// the cluster: not part of the public document.
	Internal bool
	// OptionalAuth marks a route that also answers without the credential.
	OptionalAuth bool
	// Capability is the workspace capability the route needs, if any.
	Capability string
	// OAuthScope is the scope a connector's OAuth token needs to call the
	// route; empty means such tokens are refused (401).
	OAuthScope string
	// Params names the kind of resource each path parameter identifies
	// (workspace, role, member, token, job, invitation). Tests use it to
	// build the cross-workspace matrix.
	Params map[string]string
	// Query documents query parameters: name → description.
	Query map[string]string
	// Request is a zero value of the JSON body type, or nil.
	Request any
	// Multipart documents a multipart/form-data body: field → description;
	// a field whose description starts with "file:" is a file part.
	Multipart map[string]string
	// Response is a zero value of the success body type.
	Response any
	// Status is the success status; zero means 200.
	Status int
	// AlsoStatus lists other success statuses the route answers, with the
	// same body as Status, each with when (a preview answering 200 where
	// a save answers 201).
	AlsoStatus map[int]string
	// Errors lists the error codes this route can answer.
	Errors []string
	// MaxBody caps the request body in bytes; zero means DefaultMaxBody.
	MaxBody int64
	// Idempotent routes create something and take an Idempotency-Key.
	Idempotent bool
	Handler    HandlerFunc
}

// Pattern is the ServeMux pattern of the route.
func (rt Route) Pattern() string { return rt.Method + " " + rt.Path }

// DefaultMaxBody bounds JSON request bodies.
const DefaultMaxBody = 1 << 20

// Router dispatches requests to routes and answers unmatched paths with
// the error envelope.
type Router struct {
	mux       *http.ServeMux
	routes    []Route
	byPattern map[string]Route
	log       *slog.Logger
}

// NewRouter returns an empty router.
func NewRouter(log *slog.Logger) *Router {
	return &Router{mux: http.NewServeMux(), byPattern: map[string]Route{}, log: log}
}

// Handle registers a route. It panics on a duplicate pattern, as ServeMux does.
func (rt *Router) Handle(r Route) {
	if r.Status == 0 {
		r.Status = http.StatusOK
	}
	if r.MaxBody == 0 {
		r.MaxBody = DefaultMaxBody
	}
	rt.routes = append(rt.routes, r)
	rt.byPattern[r.Pattern()] = r
	route := r
	rt.mux.HandleFunc(r.Pattern(), func(w http.ResponseWriter, req *http.Request) {
		if info := infoFrom(req.Context()); info != nil {
			info.route = route.Pattern()
		}
		req.Body = http.MaxBytesReader(w, req.Body, route.MaxBody)
		if err := route.Handler(w, req); err != nil {
			rt.fail(w, req, err)
		}
	})
}

// HandleRaw mounts a plain handler that is not part of the documented API
// (metrics, health).
func (rt *Router) HandleRaw(pattern string, h http.Handler) {
	rt.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if info := infoFrom(req.Context()); info != nil {
			info.route = pattern
		}
		h.ServeHTTP(w, req)
	}))
}

// Routes returns the documented (public) routes sorted by path and method.
func (rt *Router) Routes() []Route {
	var out []Route
	for _, r := range rt.routes {
		if !r.Internal {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Method < out[j].Method
	})
	return out
}

// Lookup returns the documented route a request reaches, so layers in
// front of the router (deadlines, forwarding) can treat API routes by
// their metadata; ok is false for raw handlers and unmatched paths.
func (rt *Router) Lookup(r *http.Request) (Route, bool) {
	_, pattern := rt.mux.Handler(r)
	route, ok := rt.byPattern[pattern]
	return route, ok
}

// Matches reports whether a request with this method and path reaches a
// registered handler.
func (rt *Router) Matches(method, path string) bool {
	req, err := http.NewRequest(method, path, nil)
	if err != nil {
		return false
	}
	_, pattern := rt.mux.Handler(req)
	return pattern != ""
}

func (rt *Router) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apierr.Error
	if !errors.As(err, &ae) {
		rt.log.Error("request failed", "request_id", RequestID(r.Context()), "method", r.Method,
			"route", routeOf(r), "err", err)
	}
	if info := infoFrom(r.Context()); info != nil {
		info.err = err
	}
	apierr.Write(w, err)
}

// ServeHTTP implements http.Handler.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// mux.Handler only finds the route; mux.ServeHTTP also fills in the
	// path values, so matched requests go through it.
	if _, pattern := rt.mux.Handler(r); pattern != "" {
		rt.mux.ServeHTTP(w, r)
		return
	}
	if allowed := rt.allowedMethods(r); len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		apierr.Write(w, apierr.New(http.StatusMethodNotAllowed, apierr.CodeMethodNotAllowed,
			"%s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	apierr.Write(w, apierr.New(http.StatusNotFound, apierr.CodeNotFound, "no route for %s %s", r.Method, r.URL.Path))
}

func (rt *Router) allowedMethods(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := rt.mux.Handler(probe); p != "" {
			out = append(out, m)
		}
	}
	return out
}
