// Package oauth is the authorization server of the connector flow: a
// public client registers (RFC 7591: exact redirect URIs, no secret), the
// account holder signs in on the consent page and approves, and the
// client exchanges the single-use code with its PKCE verifier (S256
// only) for a token limited to the import scopes. Codes and tokens are
// stored as hashes; a code presented twice revokes what it gave.
package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/oauthspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/hostcookie"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// Scopes a client may ask for. ScopeAccount is the whole account, as a
// personal API token: only a native client (every redirect URI on a
// loopback address, RFC 8252 7.3) may register it, and only alone.
const (
	ScopeImportRead  = "import:read"
	ScopeImportWrite = "import:write"
	ScopeMCP         = state.ScopeMCP
	ScopeAccount     = state.ScopeAccount
)

// AllScopes are every scope, in order.
var AllScopes = []string{ScopeImportRead, ScopeImportWrite, ScopeMCP, ScopeAccount}

// ConnectorScopes are what an authorization request that names no scope
// (and no resource) gets: the connector plugin's.
var ConnectorScopes = []string{ScopeImportRead, ScopeImportWrite}

// DefaultClientScopes are what a client registered without a scope may
// ask for: the connector's and an MCP client's (which asks for mcp).
var DefaultClientScopes = []string{ScopeImportRead, ScopeImportWrite, ScopeMCP}

// AccountTokenLife is how long a command-line login's token works.
const AccountTokenLife = 90 * 24 * time.Hour

// CodeLife is how long an authorization code can be exchanged.
const CodeLife = 60 * time.Second

// TokenLife is how long a connector's token works.
const TokenLife = 30 * 24 * time.Hour

// ClonerSoftwareID marks the connector plugin's registrations: their
// token answers also carry the account's email and the site's URL.
const ClonerSoftwareID = "sandboxd-connector"

// Bounds of a registration's metadata: what one anonymous request can
// make every server keep.
const (
	MaxRedirectURIs   = 5
	MaxRedirectURILen = 512
	MaxClientNameLen  = 100 // characters
	MaxClientURILen   = 512
	MaxScopeLen       = 100
	MaxSoftwareLen    = 64
)

// Defaults of Limits.
const (
	DefaultMaxClients  = 10_000
	DefaultUnusedAfter = 24 * time.Hour
	DefaultIdleAfter   = 30 * 24 * time.Hour
)

// Limits bound the registered clients, which anyone may add.
type Limits struct {
	// MaxClients caps the clients registered in the whole cluster; zero
	// means DefaultMaxClients, below zero no cap.
	MaxClients int
	// UnusedAfter removes a client that never got a token this long
	// after it registered; zero means DefaultUnusedAfter.
	UnusedAfter time.Duration
	// IdleAfter removes a client this long after its last token was
	// gone (revoked, or expired); zero means DefaultIdleAfter.
	IdleAfter time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxClients == 0 {
		l.MaxClients = DefaultMaxClients
	}
	if l.MaxClients < 0 {
		l.MaxClients = 0 // the command's "no cap"
	}
	if l.UnusedAfter <= 0 {
		l.UnusedAfter = DefaultUnusedAfter
	}
	if l.IdleAfter <= 0 {
		l.IdleAfter = DefaultIdleAfter
	}
	return l
}

// Mailer sends the consent page's sign-in links.
type Mailer interface {
	Send(ctx context.Context, m state.Mail) error
}

// Config wires the service.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	// Mailer delivers sign-in links (SMTP, or the outbox).
	Mailer Mailer
	// PublicURL is the API's base URL, for sign-in links.
	PublicURL string
	// Key signs the consent page's sessions, forms and sign-in browser
	// cookies; every server derives the same one from the sealing key.
	Key []byte
	// Secure is true when the API's public URL is https (TLS may end at
	// a proxy): cookies are then Secure and __Host- prefixed.
	Secure bool
	// Limits bound the registered clients.
	Limits Limits
	// MCPResource is the MCP endpoint's URL: the protected resource (RFC
	// 8707, RFC 9728) an mcp token is issued for; empty: the public URL's
	// /mcp.
	MCPResource string
	Now         func() time.Time
	Log         *slog.Logger
}

// Service registers clients, issues codes and exchanges them.
type Service struct {
	cfg     Config
	jar     hostcookie.Jar
	signins *signins
}

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.MCPResource == "" {
		cfg.MCPResource = strings.TrimSuffix(cfg.PublicURL, "/") + "/mcp"
	}
	return &Service{cfg: cfg, jar: hostcookie.Jar{Secure: cfg.Secure, Key: cfg.Key}, signins: newSignins(maxSignins, cfg.Now)}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

func oauthErr(code, format string, args ...any) *apierr.Error {
	return apierr.New(http.StatusBadRequest, code, format, args...)
}

// LocalHost reports whether host (no port) is a development host on
// which a plain-http redirect URI is allowed.
func LocalHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// loopbackRedirect reports whether a redirect URI is a native client's
// loopback listener: plain http on a loopback IP literal (RFC 8252 7.3),
// which no web site can take.
func loopbackRedirect(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return false
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

// checkRedirect validates a redirect URI a client registers.
func checkRedirect(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case len(raw) > MaxRedirectURILen:
		return oauthErr(oauthspec.CodeInvalidRedirectURI, "a redirect URI may be at most %d characters", MaxRedirectURILen)
	case err != nil || !u.IsAbs() || u.Host == "":
		return oauthErr(oauthspec.CodeInvalidRedirectURI, "redirect URI %q is not an absolute URL", raw)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return oauthErr(oauthspec.CodeInvalidRedirectURI, "redirect URI %q has a fragment", raw)
	case u.User != nil:
		return oauthErr(oauthspec.CodeInvalidRedirectURI, "redirect URI %q carries credentials", raw)
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && LocalHost(u.Hostname()):
		return nil
	case u.Scheme == "http":
		return oauthErr(oauthspec.CodeInvalidRedirectURI, "redirect URI %q must use https (plain http is for localhost only)", raw)
	}
	return oauthErr(oauthspec.CodeInvalidRedirectURI, "redirect URI %q must be an https URL", raw)
}

// normalScope checks a space-separated scope request against allowed and
// returns it in canonical order; empty asks for all of allowed.
func normalScope(raw string, allowed []string) (string, bool) {
	want := strings.Fields(raw)
	if len(want) == 0 {
		return strings.Join(allowed, " "), true
	}
	var out []string
	for _, sc := range AllScopes {
		if slices.Contains(want, sc) {
			if !slices.Contains(allowed, sc) {
				return "", false
			}
			out = append(out, sc)
		}
	}
	for _, w := range want {
		if !slices.Contains(AllScopes, w) {
			return "", false
		}
	}
	return strings.Join(out, " "), true
}

var softwareRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Register adds a public client.
func (s *Service) Register(ctx context.Context, m oauthspec.ClientMetadata) (*oauthspec.ClientInfo, error) {
	if len(m.RedirectURIs) == 0 {
		return nil, oauthErr(oauthspec.CodeInvalidRedirectURI, "redirect_uris must list at least one URI")
	}
	if len(m.RedirectURIs) > MaxRedirectURIs {
		return nil, oauthErr(oauthspec.CodeInvalidRedirectURI, "at most %d redirect URIs", MaxRedirectURIs)
	}
	for _, u := range m.RedirectURIs {
		if err := checkRedirect(u); err != nil {
			return nil, err
		}
	}
	if m.TokenEndpointAuthMethod != "" && m.TokenEndpointAuthMethod != "none" {
		return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "token_endpoint_auth_method must be none: clients are public and get no secret")
	}
	// A client that would also refresh (an MCP client's default) is
	// registered for codes alone: there are no refresh tokens, and the
	// answer says so (RFC 7591 3.2.1).
	if len(m.GrantTypes) > 0 && (!slices.Contains(m.GrantTypes, "authorization_code") ||
		slices.ContainsFunc(m.GrantTypes, func(g string) bool { return g != "authorization_code" && g != "refresh_token" })) {
		return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "grant_types must be [authorization_code] (there are no refresh tokens)")
	}
	if len(m.ResponseTypes) > 0 && !slices.Equal(m.ResponseTypes, []string{"code"}) {
		return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "response_types must be [code]")
	}
	if len(m.Scope) > MaxScopeLen {
		return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "scope may be at most %d characters", MaxScopeLen)
	}
	scope, ok := normalScope(m.Scope, AllScopes)
	if strings.TrimSpace(m.Scope) == "" {
		scope = strings.Join(DefaultClientScopes, " ")
		if m.SoftwareID == ClonerSoftwareID {
			scope = strings.Join(ConnectorScopes, " ") // the connector plugin imports, nothing more
		}
	}
	if !ok {
		return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "scope must be within %s", strings.Join(AllScopes, " "))
	}
	if slices.Contains(strings.Fields(scope), ScopeAccount) {
		if scope != ScopeAccount {
			return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "scope %s cannot be combined with other scopes", ScopeAccount)
		}
		for _, u := range m.RedirectURIs {
			if !loopbackRedirect(u) {
				return nil, oauthErr(oauthspec.CodeInvalidRedirectURI,
					"scope %s is for command-line clients: every redirect URI must be http on a loopback address (http://127.0.0.1:PORT/…), not %q", ScopeAccount, u)
			}
		}
	}
	name := strings.TrimSpace(m.ClientName)
	if name == "" {
		name = "Unnamed client"
	}
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxClientNameLen || strings.ContainsAny(name, "\x00\r\n") {
		return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "client_name must be at most %d characters on one line", MaxClientNameLen)
	}
	if m.ClientURI != "" {
		if len(m.ClientURI) > MaxClientURILen {
			return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "client_uri may be at most %d characters", MaxClientURILen)
		}
		if u, err := url.Parse(m.ClientURI); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "client_uri must be an http(s) URL")
		}
	}
	if m.SoftwareID != "" && !softwareRE.MatchString(m.SoftwareID) {
		return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "software_id must be 1 to %d letters, digits, dots, dashes or underscores", MaxSoftwareLen)
	}
	if len(m.SoftwareVersion) > MaxSoftwareLen {
		return nil, oauthErr(oauthspec.CodeInvalidClientMetadata, "software_version may be at most %d characters", MaxSoftwareLen)
	}
	c := state.OAuthClient{ID: "cli_" + ids.Random(16), Name: name, RedirectURIs: slices.Clone(m.RedirectURIs), Scope: scope,
		SoftwareID: m.SoftwareID, ClientURI: m.ClientURI, CreatedAt: s.now()}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.RegisterOAuthClient{Client: c, MaxClients: s.cfg.Limits.MaxClients}); err != nil {
		return nil, fmt.Errorf("register client: %w", err)
	}
	return infoOf(&c), nil
}

// MaxClients is the cap on registered clients (zero: none).
func (s *Service) MaxClients() int { return s.cfg.Limits.MaxClients }

// Collect removes the clients nobody uses (Limits.UnusedAfter,
// Limits.IdleAfter) and says how many; the leader calls it on a timer.
func (s *Service) Collect(ctx context.Context) (int, error) {
	res, err := s.cfg.Raft.Apply(ctx, fsm.PruneOAuthClients{At: s.now(), UnusedAfter: s.cfg.Limits.UnusedAfter, IdleAfter: s.cfg.Limits.IdleAfter})
	if err != nil {
		return 0, fmt.Errorf("collect oauth clients: %w", err)
	}
	n, _ := res.(int)
	return n, nil
}

func infoOf(c *state.OAuthClient) *oauthspec.ClientInfo {
	return &oauthspec.ClientInfo{ClientID: c.ID, ClientIDIssuedAt: c.CreatedAt.Unix(), ClientName: c.Name, RedirectURIs: c.RedirectURIs,
		TokenEndpointAuthMethod: "none", GrantTypes: []string{"authorization_code"}, ResponseTypes: []string{"code"},
		Scope: c.Scope, ClientURI: c.ClientURI, SoftwareID: c.SoftwareID}
}

var verifierRE = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)

// challengeOf is the S256 challenge of a verifier.
func challengeOf(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func badGrant(format string, args ...any) error {
	return fmt.Errorf("%w: %w", oauthspec.ErrBadGrant, oauthErr(oauthspec.CodeInvalidGrant, format, args...))
}

// Exchange turns a code into a token. A code already exchanged revokes
// the token it gave (RFC 6749 4.1.2) and is refused.
func (s *Service) Exchange(ctx context.Context, r oauthspec.TokenRequest) (*oauthspec.TokenResponse, error) {
	switch {
	case r.GrantType != "authorization_code":
		return nil, oauthErr(oauthspec.CodeUnsupportedGrantType, "grant_type must be authorization_code")
	case r.Code == "" || r.ClientID == "" || r.RedirectURI == "":
		return nil, oauthErr(apierr.CodeInvalidRequest, "code, client_id and redirect_uri are required")
	case r.CodeVerifier == "":
		return nil, oauthErr(apierr.CodeInvalidRequest, "code_verifier is required: this server takes PKCE (S256) only")
	}
	hash := secret.Hash(r.Code)
	code, err := s.cfg.Store.OAuthCode(hash)
	if err != nil {
		return nil, err
	}
	now := s.now()
	if code == nil || (!code.Used && !now.Before(code.ExpiresAt)) {
		return nil, badGrant("the code is unknown or has expired")
	}
	if code.Used {
		if _, err := s.cfg.Raft.Apply(ctx, fsm.RedeemOAuthCode{CodeHash: hash, At: now}); err != nil {
			return nil, err
		}
		s.cfg.Log.Warn("authorization code presented twice; the token it gave is revoked", "client_id", code.ClientID)
		return nil, badGrant("the code was already used; the token it gave is revoked")
	}
	if code.ClientID != r.ClientID {
		return nil, badGrant("the code was issued to another client")
	}
	if code.RedirectURI != r.RedirectURI {
		return nil, badGrant("redirect_uri differs from the one the code was issued for")
	}
	if !verifierRE.MatchString(r.CodeVerifier) ||
		subtle.ConstantTimeCompare([]byte(challengeOf(r.CodeVerifier)), []byte(code.Challenge)) != 1 {
		return nil, badGrant("code_verifier does not match the code's challenge")
	}
	client, err := s.cfg.Store.OAuthClient(code.ClientID)
	if err != nil {
		return nil, err
	}
	acct, err := s.cfg.Store.Account(code.UserID)
	if err != nil {
		return nil, err
	}
	if client == nil || acct == nil {
		return nil, badGrant("the code's client or account is gone")
	}
	plain := secret.New(secret.TokenPrefix)
	life, name := TokenLife, "OAuth: "+client.Name
	if code.Scope == ScopeAccount {
		life, name = AccountTokenLife, client.Name
	}
	// The token's audience is the resource the authorization named; a
	// token request may repeat it, not change it (RFC 8707 2.2).
	if r.Resource != "" && r.Resource != code.Resource {
		return nil, fmt.Errorf("%w: %w", oauthspec.ErrBadGrant, oauthErr(oauthspec.CodeInvalidTarget,
			"resource differs from the one the authorization was granted for"))
	}
	exp := now.Add(life)
	tok := state.Token{ID: ids.New(ids.Token), UserID: acct.ID, Name: name, Hash: secret.Hash(plain),
		Prefix: secret.Display(plain), CreatedAt: now, ExpiresAt: &exp, Kind: state.TokenOAuth, Scope: code.Scope,
		ClientID: client.ID, ClientName: client.Name, WorkspaceID: code.WorkspaceID, Resource: code.Resource}
	res, err := s.cfg.Raft.Apply(ctx, fsm.RedeemOAuthCode{CodeHash: hash, Token: tok, At: now})
	if errors.Is(err, state.ErrNotFound) {
		return nil, badGrant("the code has expired")
	}
	if err != nil {
		return nil, err
	}
	if red, ok := res.(*state.Redemption); ok && red.Reused {
		return nil, badGrant("the code was already used; the token it gave is revoked")
	}
	out := &oauthspec.TokenResponse{AccessToken: plain, TokenType: "Bearer", ExpiresIn: int64(life / time.Second), Scope: code.Scope}
	if client.SoftwareID == ClonerSoftwareID {
		out.AccountEmail = &acct.Email
		site := client.ClientURI
		out.SiteURL = &site
	}
	return out, nil
}
