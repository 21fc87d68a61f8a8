// Package api holds the REST handlers of the control plane: accounts,
// tokens, workspaces, members, roles, invitations, jobs, sites and their
// toolbox (files, database, debug, PHP settings, plugins, mail, magic
// login), the Library, MCP and the operator routes. It is HTTP only:
// routes, guards, decoding, views and error mapping. Site operations and
// the Library are services the server hands in as small interfaces, so
// this package reaches no agent, scheduler or job runner. Every route
// declares its credential, workspace scope and capability; one wrapper
// (guard) enforces them before a handler runs, and creates take an
// Idempotency-Key.
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/seal"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/accountspec"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// ClusterView answers operators' questions about the Raft cluster.
type ClusterView interface {
	// Local is this server's own view.
	Local() RaftStatus
	// Cluster is every configured server, each asked for its own view.
	Cluster(ctx context.Context) ClusterStatus
}

// Accounts makes accounts and changes their plan, tokens and SSH keys.
type Accounts interface {
	Create(ctx context.Context, ans *writes.Answer[state.Account], email, plan string) (*state.Account, error)
	SetPlan(ctx context.Context, email, plan string) (*state.Account, error)
	CreateToken(ctx context.Context, ans *writes.Answer[accountspec.TokenMade], acct *state.Account, name string, expiresInDays *int) (*accountspec.TokenMade, error)
	OperatorToken(ctx context.Context, ans *writes.Answer[accountspec.TokenMade], email, name string) (*accountspec.TokenMade, error)
	RevokeToken(ctx context.Context, acct *state.Account, tokenID string) error
	AddSSHKey(ctx context.Context, ans *writes.Answer[state.SSHKey], acct *state.Account, name, publicKey string) (*state.SSHKey, error)
	DeleteSSHKey(ctx context.Context, acct *state.Account, id string) error
}

// Workspaces makes workspaces and changes their roles, invitations and
// members.
type Workspaces interface {
	Create(ctx context.Context, ans *writes.Answer[accountspec.WorkspaceMade], owner *state.Account, name string) (*state.Workspace, error)
	CreateRole(ctx context.Context, ans *writes.Answer[state.Role], ws *state.Workspace, name string, caps []string) (*state.Role, error)
	UpdateRole(ctx context.Context, ws *state.Workspace, id string, name *string, caps *[]string) (*state.Role, error)
	DeleteRole(ctx context.Context, ws *state.Workspace, id string) error
	Invite(ctx context.Context, ans *writes.Answer[state.Invitation], ws *state.Workspace, by *state.Account, email, customRoleID string) (*state.Invitation, error)
	RevokeInvitation(ctx context.Context, ws *state.Workspace, id string) error
	Accept(ctx context.Context, acct *state.Account, id string) (*state.Member, error)
	SetMemberRole(ctx context.Context, ws *state.Workspace, userID string, roleID *string) (*state.Member, error)
	RemoveMember(ctx context.Context, ws *state.Workspace, userID string) error
}

// Fleet is what operators change in the fleet: drains, snapshots,
// servers.
type Fleet interface {
	Drain(ctx context.Context, nodeID string, on bool) error
	Snapshot(ctx context.Context, ans *writes.Answer[sitespec.Made], siteID string) (string, error)
	RemoveServer(ctx context.Context, id string) error
}

// Config wires the handlers to the rest of the control plane.
type Config struct {
	Store *state.Store
	Plans plans.Config
	// Members checks operator tokens and manages the fleet's
	// credentials (join tokens, operator tokens, members).
	Members Members
	// Fleet changes nodes' drains, snapshots sites, removes servers.
	Fleet Fleet
	// Cluster describes the Raft cluster for operators.
	Cluster ClusterView
	Now     func() time.Time
	Logger  *slog.Logger
	// Accounts changes accounts, their tokens and SSH keys.
	Accounts Accounts
	// Workspaces changes workspaces, their roles, invitations, members.
	Workspaces Workspaces
	// Sites changes sites (create, delete, reset, PHP, deploys).
	Sites SiteChanges
	// Tools reaches a ready site's toolbox on its node.
	Tools SiteTools
	// Checkpoints keeps sites' checkpoints and makes forks (nil: no
	// checkpoint or fork routes).
	Checkpoints Checkpoints
	// Code runs PHP and SQL in sites (nil: no such routes).
	Code CodeRunner
	// Screenshots takes pictures of sites' pages (nil: no such route).
	Screenshots Screenshots
	// MCPResource is the MCP endpoint's URL (its OAuth tokens' audience)
	// and MCPResourceMetadata its protected resource metadata's.
	MCPResource, MCPResourceMetadata string
	// Templates makes, changes and deletes templates.
	Templates Templates
	// Blueprints checks and keeps Blueprints.
	Blueprints Blueprints
	// Runs starts and reads Blueprint runs (nil: no run routes).
	Runs BlueprintRuns
	// Imports keeps imports and their uploads (nil: no import routes).
	Imports Imports
	// OAuth registers connector clients and exchanges their codes (nil:
	// no connect routes).
	OAuth OAuth
	// Webhooks keeps the workspace's demo-launch webhook.
	Webhooks Webhooks
	// Domains keeps sites' custom domains (nil: no domain routes).
	Domains Domains
	// Repositories keeps sites' connected Git repositories (nil: none).
	Repositories Repositories
	// Library keeps the workspace Library's entries and ZIPs.
	Library Library
	// PeerBlobs serves and takes ZIPs for peer servers.
	PeerBlobs PeerBlobs
	// ReplaySealer seals the answers kept for Idempotency-Key replays
	// (they can carry a new token's secret).
	ReplaySealer *seal.Sealer
	// Sealing lists the servers' sealing keys and rotates them (nil: no
	// sealing key routes).
	Sealing Sealing
	// RateLimits bounds failed authentications and writes; the zero value
	// limits nothing.
	RateLimits RateLimits
	// Metrics counts rate-limited requests; nil counts nothing.
	Metrics *rest.Metrics
}

// API serves the control plane's REST routes.
type API struct {
	*base
	cfg Config
}

// base is what every family of routes shares: authentication and the
// caller's workspace, rate limits, Idempotency-Key answers and replays,
// reads of the replicated state. A family's routes hold it and only the
// services they call.
type base struct {
	store     *state.Store
	log       *slog.Logger
	limits    *limiters
	operators Operators
	sealer    *seal.Sealer // seals stored answers
	clock     func() time.Time
}

// Operators tells operator tokens.
type Operators interface {
	IsOperator(token string) bool
}

// New returns the handlers; call Register to mount them.
func New(cfg Config) *API {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &base{store: cfg.Store, log: cfg.Logger.With("component", "api"), limits: newLimiters(cfg.RateLimits, cfg.Now, cfg.Metrics),
		sealer: cfg.ReplaySealer, clock: cfg.Now}
	if cfg.Members != nil {
		b.operators = cfg.Members
	}
	return &API{base: b, cfg: cfg}
}

func (a *base) now() time.Time { return a.clock().UTC().Truncate(time.Millisecond) }

// scope says which workspace a route works in.
type scope int

const (
	// scopeAccount routes act on the caller's own account.
	scopeAccount scope = iota
	// scopeWorkspace routes act in the selected workspace.
	scopeWorkspace
	// scopePathWorkspace routes name the workspace in {id}; it must be the
	// selected one.
	scopePathWorkspace
)

// guard describes who may call a route.
type guard struct {
	scope scope
	// capability the caller's role must hold in the workspace.
	capability string
	// ownerOnly routes are for the workspace owner alone.
	ownerOnly bool
	// oauthScope, when set, lets a scoped OAuth token call the route if
	// it holds this scope (anyScope: any); without it a scoped token is
	// unauthenticated.
	oauthScope string
}

// anyScope lets any scoped token call a route (account identity).
const anyScope = "*"

// Caller is the authenticated account making a request, with the
// workspace it selected and what it may do there.
type Caller struct {
	Account   *state.Account
	Token     *state.Token
	Workspace *state.Workspace
	Member    *state.Member
	Caps      access.Set
}

type callerKey struct{}

// CallerFrom returns the request's caller; nil on unauthenticated routes.
func CallerFrom(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// WorkspaceHeader selects the workspace; LegacyWorkspaceHeader is its alias.
const (
	WorkspaceHeader       = "X-Service-Workspace"
	LegacyWorkspaceHeader = "X-Service-Organization"
)

// bearer handles the route with token authentication, the rate limits
// (RateLimits) and the guard's workspace and capability checks; rt
// documents it.
func (a *base) bearer(r *rest.Router, g guard, rt rest.Route) {
	r.Handle(a.bearerRoute(g, rt))
}

// maybeBearer handles a route that anyone may call and a bearer may
// call as itself: with an Authorization header it is a bearer route
// (guarded by g), without one the handler runs with no caller.
func (a *base) maybeBearer(r *rest.Router, g guard, rt rest.Route) {
	public := rt.Handler
	guarded := a.bearerRoute(g, rt)
	rt = guarded
	rt.OptionalAuth = true
	rt.Handler = func(w http.ResponseWriter, req *http.Request) error {
		if req.Header.Get("Authorization") != "" {
			return guarded.Handler(w, req)
		}
		if err := a.limits.write(req, ""); err != nil {
			return err
		}
		return writeError(req.Header.Get(IdempotencyHeader), public(w, req))
	}
	r.Handle(rt)
}

// bearerRoute is rt guarded by g for a bearer token.
func (a *base) bearerRoute(g guard, rt rest.Route) rest.Route {
	rt.Security = "bearer"
	idempotent := rt.Idempotent
	if g.capability != "" {
		rt.Capability = g.capability
	}
	rt.Errors = append([]string{apierr.CodeAuthRequired}, rt.Errors...)
	if g.scope != scopeAccount {
		rt.Errors = append(rt.Errors, apierr.CodeWorkspaceNotFound)
	}
	if g.capability != "" {
		rt.Errors = append(rt.Errors, apierr.CodeCapabilityRequired)
	}
	if g.ownerOnly {
		rt.Errors = append(rt.Errors, apierr.CodeOwnerRequired)
	}
	if g.oauthScope != "" {
		rt.OAuthScope = g.oauthScope
		rt.Errors = append(rt.Errors, apierr.CodeInsufficientScope)
	}
	rt.Errors = append(rt.Errors, writeErrors(rt)...)
	next := rt.Handler
	rt.Handler = func(w http.ResponseWriter, req *http.Request) error {
		if err := a.limits.authGate(req); err != nil {
			return err
		}
		c, err := a.authenticate(req)
		if err != nil {
			a.limits.authFailed(req, err)
			return err
		}
		// A token issued for one resource (RFC 8707: the MCP endpoint) is
		// a credential there alone, whatever else its scopes name.
		if c.Token.Resource != "" && rt.Path != MCPPath && !viaMCP(req) {
			return apierr.AuthRequired()
		}
		// An MCP token's tool calls are the API's routes, made by the MCP
		// server: there it is its account's member, in its one workspace.
		mcpCall := viaMCP(req) && c.Token.Scoped() && hasScope(c.Token.Scope, state.ScopeMCP)
		if c.Token.Scoped() && !mcpCall {
			// A connector's token works only where its scopes do; on any
			// other route it is no credential at all.
			if g.oauthScope == "" {
				return apierr.AuthRequired()
			}
			if !hasScope(c.Token.Scope, g.oauthScope) {
				return apierr.New(http.StatusForbidden, apierr.CodeInsufficientScope, "this token lacks the %s scope", g.oauthScope).
					With("scope", g.oauthScope)
			}
		}
		if err := a.limits.write(req, c.Token.ID); err != nil {
			return err
		}
		if g.scope != scopeAccount {
			if err := a.selectWorkspace(req, c, g.scope == scopePathWorkspace); err != nil {
				return err
			}
			if g.ownerOnly && c.Member.Role != state.RoleOwner {
				return apierr.New(http.StatusForbidden, apierr.CodeOwnerRequired, "only the workspace owner can do this")
			}
			if g.capability != "" && !c.Caps.Has(g.capability) {
				return apierr.CapabilityRequired(g.capability)
			}
		}
		req = req.WithContext(context.WithValue(req.Context(), callerKey{}, c))
		if idempotent {
			ws := ""
			if c.Workspace != nil {
				ws = c.Workspace.ID
			}
			// A connector's keys are its own: another client of the
			// account cannot replay its answers.
			scope := c.Account.ID
			if c.Token.Scoped() {
				scope += "/" + c.Token.ClientID
			}
			return writeError(req.Header.Get(IdempotencyHeader), a.idempotent(w, req, scope, ws, next))
		}
		return writeError(req.Header.Get(IdempotencyHeader), next(w, req))
	}
	return rt
}

// operator handles a route authenticated with an operator token. Failed
// attempts count against the address like any other; operators and
// peers are not write-limited.
func (a *base) operator(r *rest.Router, rt rest.Route) {
	rt.Security = "operator"
	rt.Tag = "operator"
	rt.Errors = append(append([]string{apierr.CodeAuthRequired}, rt.Errors...), writeErrors(rt)...)
	idempotent := rt.Idempotent
	next := rt.Handler
	rt.Handler = func(w http.ResponseWriter, req *http.Request) error {
		if err := a.limits.authGate(req); err != nil {
			return err
		}
		tok, ok := bearerToken(req)
		if !ok || a.operators == nil || !a.operators.IsOperator(tok) {
			err := apierr.AuthRequired()
			a.limits.authFailed(req, err)
			return err
		}
		if idempotent {
			return writeError(req.Header.Get(IdempotencyHeader), a.idempotent(w, req, "operator", "", next))
		}
		return writeError(req.Header.Get(IdempotencyHeader), next(w, req))
	}
	r.Handle(rt)
}

// writeErrors are the codes every authenticated route can answer besides
// its own: rate limits and an unreachable leader; a write can also lose
// its answer (outcome_unknown), and a create can meet a reused key.
func writeErrors(rt rest.Route) []string {
	codes := []string{apierr.CodeRateLimited, apierr.CodeServiceUnavailable}
	if rt.Request != nil || len(rt.Multipart) > 0 || rt.Idempotent {
		codes = append(codes, apierr.CodeInvalidRequest, apierr.CodePayloadTooLarge)
	}
	if rt.Method != http.MethodGet {
		codes = append(codes, apierr.CodeOutcomeUnknown)
	}
	if rt.Idempotent {
		codes = append(codes, apierr.CodeIdempotencyKeyReused)
	}
	return codes
}

// hasScope reports whether a space-separated scope list holds want
// ("*": any scope).
func hasScope(list, want string) bool {
	for _, s := range strings.Fields(list) {
		if s == want || want == anyScope {
			return true
		}
	}
	return false
}

func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// authenticate resolves the bearer token to an account. Tokens are looked
// up by hash; an expired, revoked or unknown token is auth_required.
func (a *base) authenticate(r *http.Request) (*Caller, error) {
	tok, ok := bearerToken(r)
	if !ok || !secret.LooksLikeToken(tok) {
		return nil, apierr.AuthRequired()
	}
	t, err := a.store.TokenByHash(secret.Hash(tok))
	if err != nil {
		return nil, err
	}
	if t == nil || (t.ExpiresAt != nil && !a.now().Before(*t.ExpiresAt)) {
		return nil, apierr.AuthRequired()
	}
	acct, err := a.store.Account(t.UserID)
	if err != nil {
		return nil, err
	}
	if acct == nil {
		return nil, apierr.AuthRequired()
	}
	return &Caller{Account: acct, Token: t}, nil
}

// selectWorkspace resolves the workspace header (or the personal
// workspace) to a membership. A workspace the caller does not belong to
// is indistinguishable from one that does not exist, and so is, for a
// connector's token, any workspace but the one it is bound to.
func (a *base) selectWorkspace(r *http.Request, c *Caller, mustMatchPath bool) error {
	id := r.Header.Get(WorkspaceHeader)
	if id == "" {
		id = r.Header.Get(LegacyWorkspaceHeader)
	}
	notFound := apierr.NotFound(apierr.CodeWorkspaceNotFound, "workspace")
	if bound := c.Token.Bound(c.Account.PersonalWorkspaceID); bound != "" {
		// A connector's token reaches the one workspace approved on the
		// consent page; to it, every other is one that does not exist.
		if id != "" && id != bound {
			return notFound
		}
		id = bound
	}
	if id == "" {
		id = c.Account.PersonalWorkspaceID
	}
	if mustMatchPath && r.PathValue("id") != id {
		return notFound.With("selectedWorkspaceId", id)
	}
	m, err := a.store.Member(id, c.Account.ID)
	if err != nil {
		return err
	}
	if m == nil {
		return notFound
	}
	ws, err := a.store.Workspace(id)
	if err != nil {
		return err
	}
	if ws == nil {
		return notFound
	}
	var role *state.Role
	if m.CustomRoleID != "" {
		if role, err = a.store.Role(m.CustomRoleID); err != nil {
			return err
		}
	}
	c.Workspace, c.Member, c.Caps = ws, m, access.Of(m, role)
	return nil
}

// writeError turns what a write through Raft can fail with, directly or
// from a service, into the API's errors: store sentinels become their
// codes, a lost leadership a 503 the client can retry, an unknown
// outcome its own 503; key is the request's Idempotency-Key. Anything
// else passes through unchanged.
func writeError(key string, err error) error {
	var quota *state.QuotaError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &quota):
		return plans.Error(quota.Quota)
	case errors.Is(err, writes.ErrNotLeader):
		return apierr.Unavailable("leadership changed; nothing was written, retry the request")
	case errors.Is(err, writes.ErrOutcomeUnknown):
		return apierr.OutcomeUnknown("leadership changed while writing: the change may or may not have been applied; " +
			"retry with the same Idempotency-Key, or check before retrying without one")
	case errors.Is(err, state.ErrIdempotencyKeyReused):
		return keyReused(key)
	case errors.Is(err, state.ErrRoleInUse):
		return apierr.New(http.StatusConflict, apierr.CodeRoleInUse, "%s", message(err))
	case errors.Is(err, state.ErrConflict):
		return apierr.Conflict("%s", message(err))
	case errors.Is(err, state.ErrStale):
		return apierr.Conflict("it changed while this request was applied; retry the request")
	case errors.Is(err, state.ErrInvalid):
		return apierr.Invalid("", "%s", message(err))
	}
	return err
}

// message is the part of a store error after its sentinel, which the
// store writes to be shown to clients.
func message(err error) string {
	s := err.Error()
	for _, sentinel := range []error{state.ErrConflict, state.ErrRoleInUse, state.ErrInvalid, state.ErrNotFound} {
		s = strings.TrimPrefix(s, sentinel.Error()+": ")
	}
	return s
}

// Register mounts every route of this package.
func (a *API) Register(r *rest.Router) {
	accountRoutes{a.base, a.cfg.Accounts, a.cfg.Workspaces, a.cfg.Plans}.register(r)
	sshKeyRoutes{a.base, a.cfg.Accounts}.register(r)
	workspaceRoutes{a.base, a.cfg.Workspaces}.register(r)
	roleRoutes{a.base, a.cfg.Workspaces}.register(r)
	jobRoutes{a.base}.register(r)
	siteRoutes{a.base, a.cfg.Sites, a.cfg.Tools}.register(r)
	if a.cfg.Checkpoints != nil {
		checkpointRoutes{a.base, a.cfg.Checkpoints}.register(r)
	}
	if a.cfg.Code != nil {
		codeRoutes{a.base, a.cfg.Code}.register(r)
	}
	if a.cfg.Screenshots != nil {
		screenshotRoutes{a.base, a.cfg.Screenshots}.register(r)
	}
	templateRoutes{a.base, a.cfg.Sites, a.cfg.Templates}.register(r)
	webhookRoutes{a.base, a.cfg.Webhooks}.register(r)
	blueprintRoutes{a.base, a.cfg.Blueprints}.register(r)
	if a.cfg.Runs != nil {
		runRoutes{a.base, a.cfg.Runs}.register(r)
	}
	importRoutes{a.base, a.cfg.Imports, a.cfg.Tools}.register(r)
	connectRoutes{a.base, a.cfg.OAuth}.register(r)
	debugRoutes{a.base, a.cfg.Tools}.register(r)
	fileRoutes{a.base, a.cfg.Tools}.register(r)
	databaseRoutes{a.base, a.cfg.Tools}.register(r)
	libraryRoutes{a.base, a.cfg.Library, a.cfg.PeerBlobs}.registerLibrary(r)
	pluginRoutes{a.base, a.cfg.Sites, a.cfg.Tools}.register(r)
	mcpRoutes{base: a.base, library: a.cfg.Library, routes: r, resource: a.cfg.MCPResource, metadata: a.cfg.MCPResourceMetadata}.register(r)
	libraryRoutes{a.base, a.cfg.Library, a.cfg.PeerBlobs}.registerBlobs(r)
	phpConfigRoutes{a.base, a.cfg.Sites}.register(r)
	emailRoutes{a.base, a.cfg.Tools}.register(r)
	phpVersionRoutes{a.base, a.cfg.Sites}.register(r)
	domainRoutes{a.base, a.cfg.Domains}.register(r)
	sshRoutes{a.base}.register(r)
	repositoryRoutes{a.base, a.cfg.Repositories}.register(r)
	adminRoutes{a.base, a.cfg.Accounts, a.cfg.Fleet, a.cfg.Cluster}.register(r)
	members := memberRoutes{a.base, a.cfg.Members, a.cfg.Fleet}
	members.register(r)
	members.registerNodes(r)
	members.registerFleet(r)
	if a.cfg.Sealing != nil {
		sealingRoutes{a.base, a.cfg.Sealing}.register(r)
	}
}

// internal handles a route servers call on one another (blob
// replication): only the cluster port serves it, to a server's
// certificate (see server.clusterHandler); it is left out of the
// document.
func (a *base) internal(r *rest.Router, rt rest.Route) {
	rt.Internal = true
	next := rt.Handler
	rt.Handler = func(w http.ResponseWriter, req *http.Request) error {
		if peer, ok := rpcauth.Peer(req.Context()); !ok || peer.Role != pki.RoleServer {
			return apierr.AuthRequired()
		}
		return next(w, req)
	}
	r.Handle(rt)
}
