package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ratelimit"
)

// RateLimits bounds how fast one client may fail to authenticate and how
// fast it may write. Requests over a limit are answered 429 rate_limited
// with Retry-After. A zero Rule limits nothing; server.DefaultConfig sets
// DefaultRateLimits.
//
// Limits are kept by the server that serves the request: the leader for
// every /api/ route (followers forward those and count nothing, so
// nothing is counted twice, and the leader sees the client's address,
// which a follower vouches for over the cluster port), and any server
// for the routes it serves locally (peer blobs). A new leader starts
// with full buckets.
type RateLimits struct {
	// AuthFailures are failed authentications (a missing, malformed,
	// unknown, expired or revoked API token; a wrong operator token) per
	// client address. Once they are spent, every request from that
	// address that needs a credential is answered 429 before its token is
	// looked at, valid or not, until one failure's worth has refilled:
	// answering a valid token would tell a guesser who ignores the 429s
	// exactly when a guess is right, so the limit would slow nothing. The
	// cost, a valid client behind the same address as a guesser, is a
	// wait of at most one refill (6 s at the default rate), and other
	// addresses are never affected.
	AuthFailures ratelimit.Rule
	// TokenWrites are POST, PUT, PATCH and DELETE requests per API token.
	// Operators (operator tokens) are not write-limited.
	TokenWrites ratelimit.Rule
	// IPWrites are writes per client address, all its tokens together
	// (an office or a CI runner behind one address holds several).
	IPWrites ratelimit.Rule
	// Registrations are OAuth clients registered per client address
	// (POST /api/connect/register needs no login, and each client is
	// kept by every server until it is collected); a refused
	// registration costs nothing.
	Registrations ratelimit.Rule
	// MaxKeys bounds the buckets each limit keeps (addresses or tokens);
	// zero means ratelimit.DefaultMaxKeys. IPv6 clients are keyed by
	// their /64, so one host cannot flood the table by rotating
	// addresses.
	MaxKeys int
}

// DefaultRegistrationsPerHour is how many OAuth clients one address may
// register an hour by default: a connector registers once per site, a
// command-line login once per login.
const DefaultRegistrationsPerHour = 20

// DefaultRateLimits are generous for people and scripts and tight for
// guessers: 10 failed authentications a minute per address; 20 writes a
// second per token (bursts of 60) and 50 a second per address (bursts of
// 150); 20 OAuth client registrations an hour per address. A write is a
// Raft commit: a single token at its limit is still far below what a
// cluster commits.
func DefaultRateLimits() RateLimits {
	return RateLimits{
		AuthFailures:  ratelimit.PerMinute(10),
		TokenWrites:   ratelimit.Rule{Rate: 20, Burst: 60},
		IPWrites:      ratelimit.Rule{Rate: 50, Burst: 150},
		Registrations: ratelimit.PerHour(DefaultRegistrationsPerHour),
	}
}

// Limit names: details.limit of a 429 and the label of
// sandboxd_http_rate_limited_total.
const (
	LimitAuthFailures = "auth_failures"
	LimitTokenWrites  = "token_writes"
	LimitIPWrites     = "ip_writes"
	// LimitRegistrations: OAuth client registrations per address.
	LimitRegistrations = "oauth_registrations"
	// LimitClients: the cluster holds its most registered OAuth clients.
	LimitClients = "oauth_clients"
)

// limiters are the live buckets of the RateLimits.
type limiters struct {
	authFailures, tokenWrites, ipWrites, registrations *ratelimit.Limiter
	metrics                                            *rest.Metrics
}

func newLimiters(cfg RateLimits, now func() time.Time, m *rest.Metrics) *limiters {
	return &limiters{
		authFailures:  ratelimit.New(cfg.AuthFailures, cfg.MaxKeys, now),
		tokenWrites:   ratelimit.New(cfg.TokenWrites, cfg.MaxKeys, now),
		ipWrites:      ratelimit.New(cfg.IPWrites, cfg.MaxKeys, now),
		registrations: ratelimit.New(cfg.Registrations, cfg.MaxKeys, now),
		metrics:       m,
	}
}

// clientKey is the bucket key of the request's client address: the
// address for IPv4, its /64 for IPv6 (what one subscriber is given).
func clientKey(req *http.Request) string {
	ip := rest.ClientIP(req.Context())
	if !ip.IsValid() {
		ip = rest.PeerIP(req)
	}
	switch {
	case !ip.IsValid():
		return "unknown"
	case ip.Is6():
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// authGate refuses a request from an address whose failed
// authentications are spent, before its credential is looked at (see
// RateLimits.AuthFailures).
func (l *limiters) authGate(req *http.Request) error {
	if wait := l.authFailures.Wait(clientKey(req)); wait > 0 {
		l.metrics.RateLimited(LimitAuthFailures)
		return apierr.RateLimited(wait, LimitAuthFailures, "too many failed authentications from your address; retry later")
	}
	return nil
}

// authFailed charges the request's address when err is a refused
// credential (not, say, a store error).
func (l *limiters) authFailed(req *http.Request, err error) {
	var ae *apierr.Error
	if errors.As(err, &ae) && ae.Code == apierr.CodeAuthRequired {
		l.authFailures.Allow(clientKey(req))
	}
}

// write charges a write to the token (none for an anonymous caller) and
// to the address; reads are free, and so is a refused write (both
// buckets are checked before either is charged; two writes racing for a
// last token may both pass).
func (l *limiters) write(req *http.Request, tokenID string) error {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	ip := clientKey(req)
	if wait := l.tokenWrites.Wait(tokenID); tokenID != "" && wait > 0 {
		l.metrics.RateLimited(LimitTokenWrites)
		return apierr.RateLimited(wait, LimitTokenWrites, "too many writes with this token; retry later")
	}
	if wait := l.ipWrites.Wait(ip); wait > 0 {
		l.metrics.RateLimited(LimitIPWrites)
		return apierr.RateLimited(wait, LimitIPWrites, "too many writes from your address; retry later")
	}
	if tokenID != "" {
		l.tokenWrites.Allow(tokenID)
	}
	l.ipWrites.Allow(ip)
	return nil
}

// registration takes one of the address's Registrations before an OAuth
// client is registered, refusing the request when they are spent: taken
// first, so registrations in flight at once (each committed while the
// others wait) cannot all pass the last one. A registration that is
// then not accepted gives it back (unregistered): a refused one costs
// nothing.
func (l *limiters) registration(req *http.Request) error {
	if ok, wait := l.registrations.Allow(registrationKey(req)); !ok {
		l.metrics.RateLimited(LimitRegistrations)
		return apierr.RateLimited(wait, LimitRegistrations, "too many OAuth clients registered from your address; retry later")
	}
	return nil
}

// unregistered gives back what registration took, for a registration
// that was not accepted.
func (l *limiters) unregistered(req *http.Request) { l.registrations.Refund(registrationKey(req)) }

// registrationKey buckets registrations by the client's IPv4 address or
// IPv6 /48 (a site's allocation): anonymous registrations share a
// cluster-wide cap, and one holder of a /48 must not spread over 65,536
// buckets of /64.
func registrationKey(req *http.Request) string {
	ip := rest.ClientIP(req.Context())
	if !ip.IsValid() {
		ip = rest.PeerIP(req)
	}
	if ip.IsValid() && ip.Is6() && !ip.Is4In6() {
		p, _ := ip.Prefix(48)
		return p.String()
	}
	return clientKey(req)
}
