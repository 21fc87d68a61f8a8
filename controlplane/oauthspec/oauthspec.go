// Package oauthspec is what the API and the OAuth service say to each
// other: registrations, exchanges and their error codes. It holds no Raft
// command.
package oauthspec

import (
	"errors"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// Error codes of the registration and token endpoints (RFC 7591 3.2.2,
// RFC 6749 5.2), in the error envelope.
const (
	CodeInvalidRedirectURI    = "invalid_redirect_uri"
	CodeInvalidClientMetadata = "invalid_client_metadata"
	CodeInvalidClient         = "invalid_client"
	CodeInvalidGrant          = "invalid_grant"
	CodeUnsupportedGrantType  = "unsupported_grant_type"
	CodeInvalidScope          = "invalid_scope"
	// CodeInvalidTarget: a resource (RFC 8707) this server does not serve,
	// or not the one the authorization was for.
	CodeInvalidTarget = "invalid_target"
)

// ClientMetadata is a registration request (RFC 7591 2).
type ClientMetadata struct {
	RedirectURIs            []string `json:"redirect_uris" doc:"Exact redirect URIs: https, or http on a localhost-like host; no fragment."`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method,omitempty" enum:"none" doc:"none (public client) or omitted."`
	GrantTypes              []string `json:"grant_types,omitempty" doc:"authorization_code (refresh_token may be listed too; it is dropped: there are no refresh tokens)."`
	ResponseTypes           []string `json:"response_types,omitempty" doc:"code only."`
	ClientName              string   `json:"client_name,omitempty"`
	ClientURI               string   `json:"client_uri,omitempty"`
	Scope                   string   `json:"scope,omitempty" doc:"Space-separated, within import:read import:write mcp (the default; the connector plugin's: import:read import:write); or account alone (a command-line login: every redirect URI on a loopback IP)."`
	SoftwareID              string   `json:"software_id,omitempty"`
	SoftwareVersion         string   `json:"software_version,omitempty"`
}

// ClientInfo is a registered client (RFC 7591 3.2.1); it has no secret.
type ClientInfo struct {
	ClientID                string   `json:"client_id"`
	ClientIDIssuedAt        int64    `json:"client_id_issued_at"`
	ClientName              string   `json:"client_name"`
	RedirectURIs            []string `json:"redirect_uris"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	Scope                   string   `json:"scope"`
	ClientURI               string   `json:"client_uri,omitempty"`
	SoftwareID              string   `json:"software_id,omitempty"`
}

// TokenRequest is an exchange at the token endpoint (RFC 6749 4.1.3,
// RFC 7636 4.5).
type TokenRequest struct {
	GrantType    string `json:"grant_type"`
	Code         string `json:"code"`
	ClientID     string `json:"client_id"`
	RedirectURI  string `json:"redirect_uri"`
	CodeVerifier string `json:"code_verifier"`
	// Resource (RFC 8707) repeats the authorization's; another is refused.
	Resource string `json:"resource,omitempty"`
}

// TokenResponse is what an exchange gives (RFC 6749 5.1); there is no
// refresh token.
type TokenResponse struct {
	AccessToken  string  `json:"access_token"`
	TokenType    string  `json:"token_type" enum:"Bearer"`
	ExpiresIn    int64   `json:"expires_in"`
	Scope        string  `json:"scope"`
	AccountEmail *string `json:"account_email,omitempty" doc:"Cloner exchanges (the connector plugin): the account that approved."`
	SiteURL      *string `json:"site_url,omitempty" doc:"Cloner exchanges: the site the connector was registered from (its client_uri)."`
}

// ErrBadGrant is an exchange refused for its code, client, redirect URI
// or verifier; callers count it as a failed authentication.
var ErrBadGrant = errors.New("oauth: bad grant")

// ErrTooManyClients refuses a registration while the cluster holds
// Limits.MaxClients clients.
var ErrTooManyClients = state.ErrTooManyClients
