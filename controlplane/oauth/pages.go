package oauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/logincode"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// sessionCookie holds the consent page's signed-in account (over https
// it is __Host-sbx_connect, so a site under a shared parent domain
// cannot sign a browser into an account of its choosing).
const sessionCookie = "sbx_connect"

// sessionPurpose is what the session cookie's MAC is for.
const sessionPurpose = "connect session v1"

// sessionLife is how long a consent page sign-in lasts.
const sessionLife = 30 * time.Minute

// Routes are the consent page's handlers, by ServeMux pattern.
func (s *Service) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /connect/authorize":  http.HandlerFunc(s.authorize),
		"POST /connect/authorize": http.HandlerFunc(s.decide),
		"GET /connect/signin":     http.HandlerFunc(s.signin),
		// Discovery: an MCP client given only the endpoint's URL finds
		// the authorization server (RFC 9728), then how to register and
		// sign in (RFC 8414).
		"GET " + ProtectedResourcePath:          http.HandlerFunc(s.resourceMetadata),
		"GET " + ProtectedResourcePath + "/mcp": http.HandlerFunc(s.resourceMetadata),
		"GET " + AuthServerPath:                 http.HandlerFunc(s.serverMetadata),
		"GET " + AuthServerPath + "/{rest...}":  http.HandlerFunc(s.serverMetadata),
	}
}

// request is a checked authorization request.
type request struct {
	raw       string
	client    *state.OAuthClient
	redirect  string
	state     string
	scope     string
	challenge string
	resource  string
}

// pageError is shown when the request cannot go back to the client (its
// client or redirect URI is wrong: RFC 6749 4.1.2.1).
type pageError struct{ msg string }

// parseRequest checks an authorization request. An error that can be
// sent to the client comes back as a redirect URL; one that cannot, as
// a pageError.
func (s *Service) parseRequest(raw string) (*request, string, *pageError) {
	q, err := url.ParseQuery(raw)
	if err != nil || len(raw) > 8000 {
		return nil, "", &pageError{"The authorization request is malformed."}
	}
	one := func(k string) string {
		if len(q[k]) > 1 {
			return "\x00dup"
		}
		return q.Get(k)
	}
	clientID, redirect := one("client_id"), one("redirect_uri")
	client, err := s.cfg.Store.OAuthClient(clientID)
	if err != nil || client == nil || clientID == "" {
		return nil, "", &pageError{"This application is not registered (unknown client_id)."}
	}
	registered := false
	for _, u := range client.RedirectURIs {
		if u == redirect { // exact match: no prefix, no normalisation
			registered = true
		}
	}
	if !registered {
		return nil, "", &pageError{"The redirect_uri is not one this application registered."}
	}
	st := one("state")
	back := func(code, desc string) string {
		return withParams(redirect, "error", code, "error_description", desc, "state", st)
	}
	switch {
	case st == "\x00dup" || len(st) > 1000:
		return nil, back("invalid_request", "state is repeated or too long"), nil
	case one("response_type") != "code":
		return nil, back("unsupported_response_type", "response_type must be code"), nil
	case one("code_challenge_method") != "S256":
		return nil, back("invalid_request", "PKCE is required with code_challenge_method S256"), nil
	}
	challenge := one("code_challenge")
	if len(challenge) != 43 || strings.Trim(challenge, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		return nil, back("invalid_request", "code_challenge must be the base64url SHA-256 of the verifier (43 characters)"), nil
	}
	// The resource (RFC 8707) the token is for: the MCP endpoint is the
	// one this server knows; asking for it without a scope asks for mcp.
	resource, raws := one("resource"), one("scope")
	switch {
	case resource == "" || resource == s.cfg.MCPResource:
	case resource == strings.TrimSuffix(s.cfg.MCPResource, "/mcp"):
		resource = s.cfg.MCPResource // the server's own URL names its one resource
	default:
		return nil, back("invalid_target", "resource must be "+s.cfg.MCPResource), nil
	}
	if strings.TrimSpace(raws) == "" {
		raws = strings.Join(ConnectorScopes, " ")
		if resource != "" {
			raws = ScopeMCP
		}
	}
	scope, ok := normalScope(raws, strings.Fields(client.Scope))
	if !ok {
		return nil, back("invalid_scope", "the scope must be within "+client.Scope), nil
	}
	if slices.Contains(strings.Fields(scope), ScopeMCP) {
		resource = s.cfg.MCPResource // an mcp token is always bound to the MCP endpoint
	}
	return &request{raw: raw, client: client, redirect: redirect, state: st, scope: scope, challenge: challenge, resource: resource}, "", nil
}

// withParams adds query parameters to a redirect URI (keeping its own).
func withParams(base string, kv ...string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" || kv[i] == "code" {
			q.Set(kv[i], kv[i+1])
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func (s *Service) headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func (s *Service) authorize(w http.ResponseWriter, r *http.Request) {
	s.headers(w)
	req, back, perr := s.parseRequest(r.URL.RawQuery)
	switch {
	case perr != nil:
		s.render(w, http.StatusBadRequest, page{Title: "Cannot authorize", Error: perr.msg})
		return
	case back != "":
		http.Redirect(w, r, back, http.StatusSeeOther)
		return
	}
	s.show(w, r, req, "")
}

// show renders the consent page for the signed-in account, or the
// sign-in form.
func (s *Service) show(w http.ResponseWriter, r *http.Request, req *request, notice string) {
	p := page{Title: "Connect " + req.client.Name, Client: req.client.Name, Request: req.raw, Notice: notice,
		Scopes: scopeText(req.scope)}
	if req.scope == ScopeAccount {
		p.Account, p.LoginCode = true, logincode.Of(req.challenge)
	}
	if u, err := url.Parse(req.redirect); err == nil {
		p.RedirectHost = u.Host
	}
	if acct := s.account(r); acct != nil {
		p.Email = acct.Email
		p.CSRF = s.csrf(r, req.raw)
		if !p.Account {
			p.Workspaces = s.workspaceChoices(acct)
		}
	}
	s.render(w, http.StatusOK, p)
}

// workspaceChoice is a workspace the consent page offers.
type workspaceChoice struct {
	ID, Name string
	Selected bool
}

// workspaceChoices are the account's workspaces, its personal one first
// and chosen; a connector's token reaches only the one approved.
func (s *Service) workspaceChoices(acct *state.Account) []workspaceChoice {
	ms, err := s.cfg.Store.MembershipsOf(acct.ID)
	if err != nil {
		s.cfg.Log.Warn("list workspaces for consent", "err", err)
	}
	var out []workspaceChoice
	for _, m := range ms {
		ws, err := s.cfg.Store.Workspace(m.WorkspaceID)
		if err != nil || ws == nil {
			continue
		}
		c := workspaceChoice{ID: ws.ID, Name: ws.Name, Selected: ws.ID == acct.PersonalWorkspaceID}
		if c.Selected {
			out = append([]workspaceChoice{c}, out...)
		} else {
			out = append(out, c)
		}
	}
	return out
}

// chosenWorkspace is the workspace approved in the form: one of the
// account's, its personal one when none is named; "" when the form names
// one that is not the account's.
func (s *Service) chosenWorkspace(acct *state.Account, id string) string {
	if id == "" {
		return acct.PersonalWorkspaceID
	}
	if m, err := s.cfg.Store.Member(id, acct.ID); err != nil || m == nil {
		return ""
	}
	return id
}

func scopeText(scope string) []string {
	var out []string
	for _, sc := range strings.Fields(scope) {
		switch sc {
		case ScopeImportRead:
			out = append(out, "See the imports it made and their sandboxes")
		case ScopeImportWrite:
			out = append(out, "Upload sites as imports, which make new sandboxes in the workspace you choose")
		case ScopeMCP:
			out = append(out, "Work in the workspace you choose through an AI agent's tools (MCP): make, change, checkpoint, "+
				"photograph and delete its sites, run PHP and SQL in them, as far as your role there allows")
		case ScopeAccount:
			out = append(out, "Act as you everywhere: make and delete sites, tokens and workspaces, as a personal API token does (for a command-line tool on this computer)")
		}
	}
	return out
}

// sameOrigin refuses a form posted from another site.
func sameOrigin(r *http.Request) bool {
	if sfs := r.Header.Get("Sec-Fetch-Site"); sfs != "" {
		return sfs == "same-origin"
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return true
}

func (s *Service) decide(w http.ResponseWriter, r *http.Request) {
	s.headers(w)
	if !sameOrigin(r) {
		s.render(w, http.StatusForbidden, page{Title: "Cannot authorize", Error: "This form was sent from another site."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		s.render(w, http.StatusBadRequest, page{Title: "Cannot authorize", Error: "The form could not be read."})
		return
	}
	req, back, perr := s.parseRequest(r.PostForm.Get("request"))
	switch {
	case perr != nil:
		s.render(w, http.StatusBadRequest, page{Title: "Cannot authorize", Error: perr.msg})
		return
	case back != "":
		http.Redirect(w, r, back, http.StatusSeeOther)
		return
	}
	ip := clientIP(r)
	switch r.PostForm.Get("action") {
	case "token":
		if ok, _ := s.signins.tokens.Allow(limitKey(ip)); !ok {
			s.show(w, r, req, "Too many attempts; wait a minute.")
			return
		}
		acct := s.personalTokenAccount(r.PostForm.Get("token"))
		if acct == nil {
			s.show(w, r, req, "That is not a valid personal API token.")
			return
		}
		s.setSession(w, acct.ID)
		http.Redirect(w, r, "/connect/authorize?"+req.raw, http.StatusSeeOther)
	case "email":
		// The link mailed works only in this browser: it is bound to the
		// browser's sign-in cookie, set whether or not the account exists.
		s.mailSignin(r.Context(), ip, strings.TrimSpace(r.PostForm.Get("email")), req, s.signinBrowser(w, r))
		s.show(w, r, req, "If an account has that address, a sign-in link is on its way. Open it in this browser.")
	case "approve", "deny":
		acct := s.account(r)
		if acct == nil || !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(s.csrf(r, req.raw))) {
			s.show(w, r, req, "Your sign-in expired; sign in again.")
			return
		}
		if r.PostForm.Get("action") == "deny" {
			http.Redirect(w, r, withParams(req.redirect, "error", "access_denied", "error_description",
				"the account holder denied access", "state", req.state), http.StatusSeeOther)
			return
		}
		if ok, _ := s.signins.approvals.Allow(acct.ID); !ok {
			s.show(w, r, req, "Too many approvals in a minute; wait a minute and approve again.")
			return
		}
		wsID := ""
		if req.scope != ScopeAccount {
			if wsID = s.chosenWorkspace(acct, r.PostForm.Get("workspace")); wsID == "" {
				s.show(w, r, req, "That workspace is not one of yours; choose another.")
				return
			}
		}
		code := secret.New("")
		c := state.OAuthCode{ID: secret.Hash(code), ClientID: req.client.ID, UserID: acct.ID, RedirectURI: req.redirect,
			Challenge: req.challenge, Scope: req.scope, WorkspaceID: wsID, Resource: req.resource, ExpiresAt: s.now().Add(CodeLife)}
		if _, err := s.cfg.Raft.Apply(r.Context(), fsm.CreateOAuthCode{Code: c, At: s.now()}); err != nil {
			s.cfg.Log.Warn("store authorization code", "err", err)
			s.render(w, http.StatusServiceUnavailable, page{Title: "Cannot authorize", Error: "The service is busy; go back and try again."})
			return
		}
		http.Redirect(w, r, withParams(req.redirect, "code", code, "state", req.state), http.StatusSeeOther)
	default:
		s.show(w, r, req, "")
	}
}

// personalTokenAccount is the account of a valid personal API token (a
// connector's own token does not sign in).
func (s *Service) personalTokenAccount(tok string) *state.Account {
	tok = strings.TrimSpace(tok)
	if !secret.LooksLikeToken(tok) {
		return nil
	}
	t, err := s.cfg.Store.TokenByHash(secret.Hash(tok))
	if err != nil || t == nil || t.Scoped() || (t.ExpiresAt != nil && !s.now().Before(*t.ExpiresAt)) {
		return nil
	}
	acct, err := s.cfg.Store.Account(t.UserID)
	if err != nil {
		return nil
	}
	return acct
}

func (s *Service) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.cfg.Key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Service) setSession(w http.ResponseWriter, userID string) {
	exp := s.now().Add(sessionLife).Unix()
	v := userID + "." + strconv.FormatInt(exp, 10)
	s.jar.Set(w, sessionCookie, s.jar.Sign(sessionPurpose, v), "/connect/", sessionLife)
}

// account is the consent page's signed-in account, or nil.
func (s *Service) account(r *http.Request) *state.Account {
	acct, _ := s.session(r)
	return acct
}

// session is the signed-in account and its cookie's value: the first
// cookie of the scheme's name that this service signed and that has not
// expired (one planted beside it is skipped).
func (s *Service) session(r *http.Request) (*state.Account, string) {
	for _, raw := range s.jar.Values(r, sessionCookie) {
		v, ok := s.jar.Open(sessionPurpose, raw)
		if !ok {
			continue
		}
		userID, expRaw, ok := strings.Cut(v, ".")
		exp, err := strconv.ParseInt(expRaw, 10, 64)
		if !ok || err != nil || s.now().Unix() >= exp {
			continue
		}
		if acct, err := s.cfg.Store.Account(userID); err == nil && acct != nil {
			return acct, raw
		}
	}
	return nil, ""
}

// csrf binds the consent form to the session and the request.
func (s *Service) csrf(r *http.Request, raw string) string {
	_, c := s.session(r)
	if c == "" {
		return ""
	}
	return s.mac("csrf", c, raw)
}

// clientIP is the client's address as the server's middleware found it
// (trusted proxies honoured), or the TCP peer's.
func clientIP(r *http.Request) string {
	if ip := rest.ClientIP(r.Context()); ip.IsValid() {
		return ip.String()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

type page struct {
	// Account is a command-line login asking for the whole account;
	// LoginCode is the code its terminal shows.
	Account      bool
	LoginCode    string
	Title        string
	Error        string
	Notice       string
	Client       string
	RedirectHost string
	Scopes       []string
	Request      string
	Email        string
	CSRF         string
	// Workspaces are the account's, for a connector: its token reaches
	// only the one chosen.
	Workspaces []workspaceChoice
}

func (s *Service) render(w http.ResponseWriter, status int, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := pageTmpl.Execute(w, p); err != nil {
		s.cfg.Log.Warn("render consent page", "err", err)
	}
}

var pageTmpl = template.Must(template.New("consent").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body{font:16px/1.5 system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#1d2327}
h1{font-size:1.4rem} .box{border:1px solid #dcdcde;border-radius:8px;padding:1rem 1.25rem;margin:1rem 0}
.err{color:#b32d2e} .note{background:#f0f6fc;padding:.5rem .75rem;border-radius:6px}
input[type=text],input[type=email],input[type=password]{width:100%;box-sizing:border-box;padding:.5rem;margin:.25rem 0 .5rem}
button{padding:.5rem 1rem;font-size:1rem;cursor:pointer} .row{display:flex;gap:.75rem}
.host{font-family:ui-monospace,monospace}
</style></head><body>
<h1>{{.Title}}</h1>
{{if .Error}}<p class="err" id="error">{{.Error}}</p>{{else}}
{{if .Notice}}<p class="note" id="notice">{{.Notice}}</p>{{end}}
<div class="box">
<p><strong>{{.Client}}</strong> asks for access to your account. After you approve, your browser goes back to
<span class="host" id="redirect-host">{{.RedirectHost}}</span>.</p>
<p>It will be able to:</p><ul id="scopes">{{range .Scopes}}<li>{{.}}</li>{{end}}</ul>
{{if .Account}}<p class="err" id="account-warning">This gives a command-line tool full access to your account, as a personal API
token does. Approve only if you just ran <code>sandboxctl login</code> yourself, on this computer, and it shows this code:</p>
<p><strong class="host" id="login-code">{{.LoginCode}}</strong></p>{{else}}
<p>It reaches only the workspace you choose, and there only the imports it made and the sandboxes they made.
It will not see your password or personal API tokens, and cannot reach anything else in your account.</p>{{end}}
</div>
{{if .Email}}
<p>Signed in as <strong id="account">{{.Email}}</strong>.</p>
<form method="post" action="/connect/authorize">
<input type="hidden" name="request" value="{{.Request}}"><input type="hidden" name="csrf" value="{{.CSRF}}">
{{if gt (len .Workspaces) 1}}<p><label for="workspace">Workspace it may import into</label>
<select name="workspace" id="workspace">{{range .Workspaces}}<option value="{{.ID}}"{{if .Selected}} selected{{end}}>{{.Name}}</option>{{end}}</select></p>
{{else}}{{range .Workspaces}}<input type="hidden" name="workspace" value="{{.ID}}"><p>Workspace: <strong id="workspace-name">{{.Name}}</strong></p>{{end}}{{end}}
<div class="row"><button type="submit" name="action" value="approve" id="approve">Approve</button>
<button type="submit" name="action" value="deny" id="deny">Deny</button></div>
</form>
{{else}}
<div class="box"><h2>Sign in</h2>
<form method="post" action="/connect/authorize">
<input type="hidden" name="request" value="{{.Request}}">
<label for="email">Email a one-time sign-in link to</label>
<input type="email" name="email" id="email" autocomplete="email">
<button type="submit" name="action" value="email" id="signin-email">Send link</button>
</form>
<form method="post" action="/connect/authorize">
<input type="hidden" name="request" value="{{.Request}}">
<label for="token">Or paste a personal API token (it is not kept)</label>
<input type="password" name="token" id="token" autocomplete="off">
<button type="submit" name="action" value="token" id="signin-token">Sign in</button>
</form></div>
{{end}}{{end}}
</body></html>`))
