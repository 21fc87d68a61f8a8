// Package launch is the service behind a template's public launch link:
// it finds the template a token opens, launches a demo sandbox for a
// visitor (from the warm pool when one is ready) within the link's quota,
// records the lead, lets only the launching browser into its demo, and,
// on the leader, turns demos' transitions into webhook events. It takes
// tokens, visitors and state records, never an HTTP request.
package launch

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/mail"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/webhooks"
	"github.com/sandboxd/sandboxd/controlplane/webhookspec"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// Sites is what a launch needs from the sites service.
type Sites interface {
	Create(ctx context.Context, in sitespec.Create) (*state.Site, string, error)
	LoginLink(ctx context.Context, site *state.Site, redirect string) (*sitespec.LoginLink, error)
}

// Config wires the service.
type Config struct {
	Store *state.Store
	// Raft applies the leader's demo transitions (Watch).
	Raft  fsm.Applier
	Sites Sites
	// IPKey keys the hash of a visitor's address (leads' ipHash): without
	// it the hashes of the few billion IPv4 addresses could be tabulated.
	IPKey []byte
	Now   func() time.Time
	Log   *slog.Logger
}

// Service launches demos.
type Service struct{ cfg Config }

// New returns the launch service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// ErrNotFound is an unknown or disabled link, or a demo that is not the
// visitor's: the launcher answers all of them with the same 404 page.
var ErrNotFound = errors.New("no such launch link")

// ErrUnavailable is a link whose template cannot launch now (still
// building, failed, or its owner's site quota is full).
var ErrUnavailable = errors.New("demos of this link cannot start right now")

// FormError is a visitor's input the launcher shows again with a message.
type FormError struct {
	Field   string
	Message string
}

func (e *FormError) Error() string { return e.Field + ": " + e.Message }

// OneDemoError refuses a second live demo from the same address under
// the visitor quota when the browser is not the one that launched the
// first (only that browser is let back in).
type OneDemoError struct {
	// Until is when the live demo ends; nil when it does not.
	Until *time.Time
}

func (e *OneDemoError) Error() string { return "a demo launched from this address is still running" }

// Visitor is who asks for a demo: Cookie is the visitor id from the
// launcher's signed visitor cookie (it identifies the browser; the
// launcher passes only an id it minted), IP the address the request
// came from, Email and Consent what the form carried.
type Visitor struct {
	Cookie  string
	IP      netip.Addr
	Email   string
	Consent bool
}

// Link returns the template a launch token opens: enabled, of an owner on
// the paid plan.
func (s *Service) Link(token string) (*state.Template, error) {
	t, err := s.cfg.Store.TemplateByLaunchToken(token)
	if err != nil {
		return nil, err
	}
	if t == nil || !t.Launch.Enabled {
		return nil, ErrNotFound
	}
	// Sharing is a paid-plan feature: a link whose owner left the paid
	// plan is off until they are back.
	if owner, err := s.cfg.Store.Account(t.UserID); err != nil {
		return nil, err
	} else if owner == nil || owner.Plan != state.PlanPaid {
		return nil, ErrNotFound
	}
	return t, nil
}

// VisitorHash is what is kept of a visitor cookie.
func VisitorHash(cookie string) string {
	sum := sha256.Sum256([]byte("sandboxd launch visitor\x00" + cookie))
	return hex.EncodeToString(sum[:])
}

// IPHash is the keyed hash of an address kept with leads and demos: an
// IPv4 address, or an IPv6 address's /64 (one subscriber's, so the
// visitor quota is not dodged by moving within it).
func (s *Service) IPHash(ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	key := ip.Unmap().String()
	if ip.Is6() && !ip.Is4In6() {
		p, _ := ip.Prefix(64) // what one subscriber is given
		key = p.String()
	}
	m := hmac.New(sha256.New, s.cfg.IPKey)
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// Live returns the visitor's live demo of the template when the link
// keeps one per visitor and the browser launched it; nil otherwise.
func (s *Service) Live(t *state.Template, cookie string) (*state.Demo, error) {
	if t.Launch.QuotaMode != "visitor" || cookie == "" {
		return nil, nil
	}
	d, err := s.cfg.Store.LiveDemoOf(t.ID, VisitorHash(cookie), "", s.now())
	if err != nil || d == nil || d.Visitor != VisitorHash(cookie) {
		return nil, err
	}
	return d, nil
}

// maxEmail bounds an email address (RFC 5321's path limit).
const maxEmail = 254

// checkEmail accepts one plain address.
func checkEmail(raw string) (string, error) {
	e := strings.TrimSpace(raw)
	if e == "" {
		return "", &FormError{Field: "email", Message: "Enter your email address."}
	}
	a, err := mail.ParseAddress(e)
	if len(e) > maxEmail || !utf8.ValidString(e) || err != nil || a.Address != e || a.Name != "" || !strings.Contains(e[strings.LastIndex(e, "@")+1:], ".") {
		return "", &FormError{Field: "email", Message: "Enter an email address such as name@example.com."}
	}
	return e, nil
}

// Launch starts a demo of the link's template for the visitor, or, under
// the visitor quota, returns the live demo the same browser launched
// before. The site, the demo, the lead and the launch count are written
// in one Raft entry.
func (s *Service) Launch(ctx context.Context, token string, v Visitor) (*state.Demo, error) {
	t, err := s.Link(token)
	if err != nil {
		return nil, err
	}
	if v.Cookie == "" {
		return nil, errors.New("launch: a visitor has a cookie")
	}
	l := t.Launch
	var email string
	if l.EntryMode == "email" {
		if email, err = checkEmail(v.Email); err != nil {
			return nil, err
		}
	}
	if t.Status != state.TemplateReady {
		return nil, ErrUnavailable
	}
	now := s.now()
	visitor, ipHash := VisitorHash(v.Cookie), s.IPHash(v.IP)
	one := l.QuotaMode == "visitor"
	if one {
		if d, err := s.returning(t.ID, visitor, ipHash, now); d != nil || err != nil {
			return d, err
		}
	}
	ws, err := s.cfg.Store.Workspace(t.WorkspaceID)
	if err != nil {
		return nil, err
	}
	if ws == nil {
		return nil, ErrNotFound
	}
	owner, err := s.cfg.Store.Account(ws.OwnerID)
	if err != nil {
		return nil, err
	}
	if owner == nil {
		return nil, ErrNotFound
	}
	demo := state.Demo{ID: ids.New(ids.Demo), TemplateID: t.ID, WorkspaceID: t.WorkspaceID, Visitor: visitor, IPHash: ipHash,
		Email: email, CreatedAt: now}
	if l.EntryMode == "email" && l.ConsentEnabled {
		label := l.ConsentLabel
		demo.ConsentLabel, demo.Consent = &label, v.Consent
	}
	in := sitespec.Create{Workspace: ws, By: owner, TemplateID: t.ID,
		Launch: &state.DemoLaunch{Demo: demo, Token: token, OnePerVisitor: one}}
	if l.ExpirationMode == "fixed" {
		m := l.ExpirationMinutes
		in.ExpiresInMinutes = &m
	}
	if email != "" {
		in.Launch.Lead = &state.Lead{ID: ids.New(ids.Lead), TemplateID: t.ID, WorkspaceID: t.WorkspaceID, Email: email,
			IPHash: ipHash, CreatedAt: now}
	}
	site, jobID, err := s.cfg.Sites.Create(ctx, in)
	switch {
	case err == nil:
	case errors.Is(err, state.ErrLiveDemo):
		// Another launch of this visitor won the race: theirs is the demo.
		if d, rerr := s.returning(t.ID, visitor, ipHash, s.now()); d != nil || rerr != nil {
			return d, rerr
		}
		return nil, err
	case errors.Is(err, state.ErrNotFound):
		return nil, ErrNotFound // the link was disabled or the template deleted meanwhile
	default:
		var quota *state.QuotaError
		if errors.As(err, &quota) || isPlanLimit(err) {
			return nil, ErrUnavailable
		}
		return nil, err
	}
	demo.SiteID, demo.SiteURL, demo.JobID = site.ID, site.URL, jobID
	demo.ExpiresAt = site.ExpiresAt
	return &demo, nil
}

// returning is the visitor's live demo (same browser), or OneDemoError
// when only their address has one; nil, nil when neither has.
func (s *Service) returning(templateID, visitor, ipHash string, now time.Time) (*state.Demo, error) {
	d, err := s.cfg.Store.LiveDemoOf(templateID, visitor, ipHash, now)
	if err != nil || d == nil {
		return nil, err
	}
	if d.Visitor == visitor {
		return d, nil
	}
	return nil, &OneDemoError{Until: d.ExpiresAt}
}

// isPlanLimit reports the sites service's refusals that mean "not now":
// the owner's plan limit, or no node with room.
func isPlanLimit(err error) bool {
	var ae *apierr.Error
	return errors.As(err, &ae) && (ae.Code == apierr.CodePlanLimitReached || ae.Status == http.StatusServiceUnavailable)
}

// Demo returns a demo of the link for the browser that launched it, with
// its site (nil once gone) and create job (nil once pruned).
func (s *Service) Demo(token, demoID, cookie string) (*state.Template, *state.Demo, *state.Site, *state.Job, error) {
	t, err := s.Link(token)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	d, err := s.cfg.Store.Demo(demoID)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if d == nil || d.TemplateID != t.ID || cookie == "" ||
		subtle.ConstantTimeCompare([]byte(d.Visitor), []byte(VisitorHash(cookie))) != 1 {
		return nil, nil, nil, nil, ErrNotFound
	}
	site, err := s.cfg.Store.Site(d.SiteID)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var job *state.Job
	if d.JobID != "" {
		if job, err = s.cfg.Store.Job(d.JobID); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	return t, d, site, job, nil
}

// Enter makes the one-time link that signs the visitor into their ready
// demo at the link's landing path.
func (s *Service) Enter(ctx context.Context, t *state.Template, site *state.Site) (string, error) {
	link, err := s.cfg.Sites.LoginLink(ctx, site, t.Launch.LandingPath)
	if err != nil {
		return "", fmt.Errorf("sign in to demo %s: %w", site.ID, err)
	}
	return link.URL, nil
}

// Watch is the leader's demo loop: a demo whose site is ready is marked
// so and queues demo.ready; one whose lease ended, or whose site is gone
// or failed, is removed and queues demo.expired (if it had been ready).
// Each transition is one conditional Raft entry, so a new leader that
// looks again queues nothing twice.
func (s *Service) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.Step(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("demo transitions", "err", err)
		}
	}
}

// Step applies every demo transition due now (Watch calls it).
func (s *Service) Step(ctx context.Context) error {
	demos, err := s.cfg.Store.Demos()
	if err != nil {
		return err
	}
	now := s.now()
	var cmds []fsm.Command
	var of []string
	for _, d := range demos {
		site, err := s.cfg.Store.Site(d.SiteID)
		if err != nil {
			return err
		}
		leaseOver := d.ExpiresAt != nil && !d.ExpiresAt.After(now)
		switch {
		case leaseOver || site == nil || site.Status == state.SiteDeleting || site.Status == state.SiteFailed:
			at := now
			if leaseOver {
				at = *d.ExpiresAt
			}
			cmds = append(cmds, fsm.EndDemo{DemoID: d.ID,
				Delivery: webhooks.Delivery(webhooks.DemoEvent(webhookspec.DemoExpired, d, d.SiteURL, at), now)})
		case d.ReadyAt == nil && site.Status == state.SiteReady:
			at := site.UpdatedAt // when it became ready (a claim, or its job's end)
			if at.Before(d.CreatedAt) {
				at = d.CreatedAt
			}
			cmds = append(cmds, fsm.DemoReady{DemoID: d.ID, At: at,
				Delivery: webhooks.Delivery(webhooks.DemoEvent(webhookspec.DemoReady, d, site.URL, at), now)})
		default:
			continue
		}
		of = append(of, d.ID)
	}
	// Applied side by side, so Raft commits many in one entry batch.
	errs := make([]error, len(cmds))
	sem := make(chan struct{}, stepParallel)
	var wg sync.WaitGroup
	for i, c := range cmds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := s.cfg.Raft.Apply(ctx, c); err != nil {
				errs[i] = fmt.Errorf("demo %s: %w", of[i], err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stepParallel bounds the demo transitions applied at once.
const stepParallel = 32
