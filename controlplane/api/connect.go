package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/oauthspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// OAuth is what the connector flow's REST routes need.
type OAuth interface {
	Register(ctx context.Context, m oauthspec.ClientMetadata) (*oauthspec.ClientInfo, error)
	Exchange(ctx context.Context, r oauthspec.TokenRequest) (*oauthspec.TokenResponse, error)
}

// connectRoutes are the connector's OAuth registration and token exchange.
type connectRoutes struct {
	*base
	oauth OAuth
}

func (a connectRoutes) register(r *rest.Router) {
	if a.oauth == nil {
		return
	}
	r.Handle(rest.Route{Method: "POST", Path: "/api/connect/register", Tag: "oauth", Status: http.StatusCreated,
		Summary: "Register a public OAuth client (RFC 7591) for the connector flow: exact redirect URIs (https, or http " +
			"on localhost-like hosts; no fragment; at most 5 of at most 512 characters), token_endpoint_auth_method none. " +
			"No secret is issued; metadata this server does not know is ignored. An address registers at most 20 " +
			"clients an hour by default (429 rate_limited, details.limit oauth_registrations, Retry-After); while the " +
			"cluster holds its most clients (10,000 by default) registrations are refused with 429 rate_limited, " +
			"details.limit oauth_clients. A client that never gets a token is removed after 24 hours, one whose " +
			"tokens are all revoked or expired 30 days after that.",
		Request: oauthspec.ClientMetadata{}, Response: oauthspec.ClientInfo{}, MaxBody: 64 << 10,
		Errors: []string{apierr.CodeInvalidRequest, oauthspec.CodeInvalidRedirectURI, oauthspec.CodeInvalidClientMetadata,
			apierr.CodeRateLimited, apierr.CodePayloadTooLarge},
		Handler: a.registerClient})
	r.Handle(rest.Route{Method: "POST", Path: "/api/connect/token", Tag: "oauth",
		Summary: "Exchange an authorization code with its PKCE verifier (S256) for a scoped access token " +
			"(application/json or application/x-www-form-urlencoded). No refresh token; a code works once, and " +
			"presenting it again revokes the token it gave.",
		Request: oauthspec.TokenRequest{}, Response: oauthspec.TokenResponse{}, MaxBody: 64 << 10,
		Errors: []string{apierr.CodeInvalidRequest, oauthspec.CodeInvalidGrant, oauthspec.CodeUnsupportedGrantType,
			apierr.CodeRateLimited, apierr.CodePayloadTooLarge},
		Handler: a.exchangeCode})
}

// clientsFullRetry is the Retry-After of a registration refused while
// the cluster holds its most clients: unused ones are collected hourly.
const clientsFullRetry = time.Hour

func (a connectRoutes) registerClient(w http.ResponseWriter, req *http.Request) error {
	if err := a.limits.write(req, ""); err != nil {
		return err
	}
	if err := a.limits.registration(req); err != nil {
		return err
	}
	accepted := false
	defer func() {
		if !accepted {
			a.limits.unregistered(req)
		}
	}()
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt != "application/json" {
		return apierr.Invalid("", "Content-Type must be application/json")
	}
	var m oauthspec.ClientMetadata
	if err := json.NewDecoder(req.Body).Decode(&m); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return apierr.New(http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge, "the registration is too large")
		}
		return apierr.New(http.StatusBadRequest, oauthspec.CodeInvalidClientMetadata, "the body is not a JSON client metadata object")
	}
	info, err := a.oauth.Register(req.Context(), m)
	if errors.Is(err, oauthspec.ErrTooManyClients) {
		a.limits.metrics.RateLimited(LimitClients)
		return apierr.RateLimited(clientsFullRetry, LimitClients,
			"this service holds as many registered OAuth clients as it keeps; unused ones are removed over time, retry later")
	}
	if err != nil {
		// A registration that may have been committed stays charged.
		accepted = errors.Is(err, writes.ErrOutcomeUnknown)
		return writeError("", err)
	}
	accepted = true
	w.Header().Set("Cache-Control", "no-store")
	return rest.JSON(w, http.StatusCreated, info)
}

func (a connectRoutes) exchangeCode(w http.ResponseWriter, req *http.Request) error {
	if err := a.limits.authGate(req); err != nil {
		return err
	}
	if err := a.limits.write(req, ""); err != nil {
		return err
	}
	var tr oauthspec.TokenRequest
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		if err := json.NewDecoder(req.Body).Decode(&tr); err != nil {
			return apierr.Invalid("", "the body is not a JSON object")
		}
	case "application/x-www-form-urlencoded":
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return apierr.Invalid("", "the body could not be read")
		}
		f, err := url.ParseQuery(string(body))
		if err != nil {
			return apierr.Invalid("", "the form is malformed")
		}
		for k, v := range f {
			if len(v) > 1 {
				return apierr.Invalid(k, "%s is repeated", k)
			}
		}
		tr = oauthspec.TokenRequest{GrantType: f.Get("grant_type"), Code: f.Get("code"), ClientID: f.Get("client_id"),
			RedirectURI: f.Get("redirect_uri"), CodeVerifier: f.Get("code_verifier"), Resource: f.Get("resource")}
	default:
		return apierr.Invalid("", "Content-Type must be application/json or application/x-www-form-urlencoded")
	}
	res, err := a.oauth.Exchange(req.Context(), tr)
	if errors.Is(err, oauthspec.ErrBadGrant) {
		// A wrong code or verifier counts like a wrong token.
		a.limits.authFailed(req, apierr.AuthRequired())
	}
	if err != nil {
		var ae *apierr.Error
		if errors.As(err, &ae) {
			return ae
		}
		return writeError("", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	return rest.JSON(w, http.StatusOK, res)
}
