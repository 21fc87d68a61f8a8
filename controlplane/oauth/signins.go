package oauth

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/ratelimit"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// signinLife is how long a mailed sign-in link works (its retention).
const signinLife = 15 * time.Minute

// maxSignins bounds the mailed sign-in links in flight, whatever a flood
// of requests from many addresses for many accounts does: each holds the
// authorization request (up to 8 KB), so at most about 8 MiB.
const maxSignins = 1024

// MaxApprovalsPerMinute bounds the approvals one account makes on the
// consent page: each stores an authorization code through Raft, and the
// page is no API route, so the API's write limits do not cover it.
const MaxApprovalsPerMinute = 20

// signinCookie binds a mailed sign-in link to the browser that asked for
// it (over https __Host-sbx_signin): the link signs in only a browser
// that carries it, so a link requested in someone else's browser, or
// read from a mailbox, signs in nobody else.
const signinCookie = "sbx_signin"

// signinPurpose is what the sign-in cookie's MAC is for.
const signinPurpose = "connect signin browser v1"

// signins are the one-time sign-in links in flight, by their hash, with
// the rate limits of asking for them. They live on the leader only: a
// link from before a leader change is asked for again.
type signins struct {
	max     int
	now     func() time.Time
	byIP    *ratelimit.Limiter
	byEmail *ratelimit.Limiter
	tokens  *ratelimit.Limiter
	// approvals are per account: each is a Raft entry, and the consent
	// page is outside the API's write limits.
	approvals *ratelimit.Limiter

	mu      sync.Mutex
	pending map[string]pendingSignin
}

type pendingSignin struct {
	userID string
	next   string
	// browser is the hash of the asking browser's sign-in cookie value.
	browser string
	expires time.Time
}

// newSignins keeps at most max links; now is the clock (nil: time.Now).
func newSignins(max int, now func() time.Time) *signins {
	if now == nil {
		now = time.Now
	}
	return &signins{max: max, now: now, pending: map[string]pendingSignin{},
		byIP:      ratelimit.New(ratelimit.PerMinute(10), 10000, now),
		byEmail:   ratelimit.New(ratelimit.Rule{Rate: 3.0 / 3600, Burst: 3}, 10000, now),
		tokens:    ratelimit.New(ratelimit.PerMinute(10), 10000, now),
		approvals: ratelimit.New(ratelimit.PerMinute(MaxApprovalsPerMinute), 10000, now)}
}

// add keeps p under hash, expiring in signinLife. Expired links go
// first; at the bound the link closest to its expiry makes room.
func (s *signins) add(hash string, p pendingSignin) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	p.expires = now.Add(signinLife)
	for k, q := range s.pending {
		if !now.Before(q.expires) {
			delete(s.pending, k)
		}
	}
	for len(s.pending) >= s.max && len(s.pending) > 0 {
		oldest := ""
		for k, q := range s.pending {
			if oldest == "" || q.expires.Before(s.pending[oldest].expires) {
				oldest = k
			}
		}
		delete(s.pending, oldest)
	}
	s.pending[hash] = p
}

// signinResult is what became of a sign-in link.
type signinResult int

const (
	signinOK           signinResult = iota
	signinUnknown                   // used, expired or never sent
	signinOtherBrowser              // valid, but not opened where it was asked for
)

// take returns and forgets the link of hash when browser (the value of
// the opening browser's sign-in cookie) is the one that asked for it. A
// link opened elsewhere is kept for the browser that asked.
func (s *signins) take(hash, browser string) (pendingSignin, signinResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pending[hash]
	switch {
	case !ok:
		return p, signinUnknown
	case !s.now().Before(p.expires):
		delete(s.pending, hash)
		return p, signinUnknown
	case browser == "" || !secret.Equal(p.browser, secret.Hash(browser)):
		return p, signinOtherBrowser
	}
	delete(s.pending, hash)
	return p, signinOK
}

// count is the number of links kept.
func (s *signins) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// limitKey is an address's rate-limit bucket: IPv4 itself, IPv6 its /64
// (one host holds a whole /64).
func limitKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	switch {
	case err != nil:
		return ip
	case a.Is6() && !a.Is4In6():
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.Unmap().String()
}

// signinBrowser is this browser's sign-in cookie value, minted when it
// has none this service signed; the cookie is set again either way, to
// last as long as the newest link.
func (s *Service) signinBrowser(w http.ResponseWriter, r *http.Request) string {
	n, ok := s.jar.Signed(r, signinCookie, signinPurpose)
	if !ok {
		n = secret.New("")
	}
	s.jar.Set(w, signinCookie, s.jar.Sign(signinPurpose, n), "/connect/", signinLife)
	return n
}

// mailSignin sends a one-time sign-in link to the account of email, if
// there is one, that works only in the browser whose sign-in cookie is
// browser; the answer never says whether there was an account.
func (s *Service) mailSignin(ctx context.Context, ip, email string, req *request, browser string) {
	if ok, _ := s.signins.byIP.Allow(limitKey(ip)); !ok || email == "" || len(email) > 254 {
		return
	}
	if ok, _ := s.signins.byEmail.Allow(strings.ToLower(email)); !ok {
		return
	}
	acct, err := s.cfg.Store.AccountByEmail(email)
	if err != nil || acct == nil {
		return
	}
	tok := secret.New("")
	s.signins.add(secret.Hash(tok), pendingSignin{userID: acct.ID, next: "/connect/authorize?" + req.raw, browser: secret.Hash(browser)})
	link := strings.TrimRight(s.cfg.PublicURL, "/") + "/connect/signin?t=" + url.QueryEscape(tok)
	m := state.Mail{ID: ids.New(ids.Mail), To: acct.Email, Subject: "Sign in to connect " + req.client.Name,
		Text: fmt.Sprintf("Someone (hopefully you) asked to connect %q to your account.\n\nSign in with this link within 15 minutes, "+
			"in the browser you asked from (it works only there):\n\n%s\n\nIf it was not you, ignore this message.\n", req.client.Name, link), CreatedAt: s.now()}
	if err := s.cfg.Mailer.Send(ctx, m); err != nil {
		s.cfg.Log.Warn("send sign-in link", "err", err)
	}
}

func (s *Service) signin(w http.ResponseWriter, r *http.Request) {
	s.headers(w)
	browser, _ := s.jar.Signed(r, signinCookie, signinPurpose)
	p, res := s.signins.take(secret.Hash(r.URL.Query().Get("t")), browser)
	switch res {
	case signinUnknown:
		s.render(w, http.StatusBadRequest, page{Title: "Sign-in link", Error: "This sign-in link was used or has expired; ask for a new one."})
		return
	case signinOtherBrowser:
		s.render(w, http.StatusForbidden, page{Title: "Open this link where you started",
			Error: "This sign-in link works only in the browser where you asked for it. Open it there (copy the link into that " +
				"browser's address bar), or start connecting again in this browser and ask for a new link."})
		return
	}
	s.setSession(w, p.userID)
	http.Redirect(w, r, p.next, http.StatusSeeOther)
}
