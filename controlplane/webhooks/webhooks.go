// Package webhooks keeps a workspace's demo-launch webhook (its URL, its
// sealed signing secret, whether it sends) and delivers the events of
// launched demos to it: signed, retried on a schedule, recorded in the
// replicated state so that no change of leader loses an event or sends it
// under a second idempotency key. It takes ids and state records, never
// an HTTP request.
package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/safefetch"
	"github.com/sandboxd/sandboxd/internal/seal"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// Config wires the service.
type Config struct {
	Store  *state.Store
	Raft   fsm.Applier
	Sealer *seal.Sealer
	Sender *Sender
	// Allow is the operator's allow-list (--fetch-allow): its addresses
	// may take deliveries although private, and plain http.
	Allow []netip.Prefix
	// Resolve looks a host up when a plain-http URL names one; nil uses
	// the system resolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	Now     func() time.Time
}

// Service sets, reads, tests and removes webhooks.
type Service struct{ cfg Config }

// New returns the webhooks service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	return &Service{cfg: cfg}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// maxURL bounds a webhook URL.
const maxURL = 2048

// PaidOnly refuses a webhook change on a free plan.
func PaidOnly() error {
	return apierr.New(http.StatusPaymentRequired, apierr.CodeTemplateSharingRequiresPaidPlan,
		"webhooks need a paid plan").With("plan", state.PlanFree)
}

// NotSet answers an action on a workspace with no webhook.
func NotSet() error {
	return apierr.Invalid("url", "no webhook is set in this workspace; PUT one first")
}

// Secret opens a webhook's signing secret.
func (s *Service) Secret(w *state.Webhook) (string, error) {
	return s.cfg.Sealer.Open(w.SealedSecret, w.WorkspaceID)
}

// Get returns the workspace's webhook (nil when none) and its latest
// attempted delivery (nil when none).
func (s *Service) Get(ws *state.Workspace) (*state.Webhook, *state.Delivery, error) {
	w, err := s.cfg.Store.Webhook(ws.ID)
	if err != nil || w == nil {
		return nil, nil, err
	}
	d, err := s.cfg.Store.LastDelivery(ws.ID)
	return w, d, err
}

// Put sets the workspace's webhook. The signing secret is made the first
// time and returned then only; later PUTs keep it and return "".
func (s *Service) Put(ctx context.Context, ws *state.Workspace, rawURL string, sendEvents bool) (*state.Webhook, string, error) {
	if err := s.paid(ws); err != nil {
		return nil, "", err
	}
	if err := s.CheckURL(ctx, rawURL); err != nil {
		return nil, "", err
	}
	now := s.now()
	// A secret for the case there is none yet; the state keeps an
	// existing one, and this one is shown only if it is the one kept.
	plain := secret.New("whsec_")
	w := state.Webhook{WorkspaceID: ws.ID, URL: rawURL, SendEvents: sendEvents, SealedSecret: s.cfg.Sealer.Seal(plain, ws.ID),
		CreatedAt: now, UpdatedAt: now}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.PutWebhook{Webhook: w}); err != nil {
		return nil, "", err
	}
	kept, err := s.cfg.Store.Webhook(ws.ID)
	if err != nil || kept == nil {
		return nil, "", fmt.Errorf("read the webhook back: %v", err)
	}
	if !bytes.Equal(kept.SealedSecret, w.SealedSecret) {
		plain = ""
	}
	return kept, plain, nil
}

// Rotate replaces the signing secret and returns the new one; deliveries
// from now on, retries included, are signed with it.
func (s *Service) Rotate(ctx context.Context, ws *state.Workspace) (*state.Webhook, string, error) {
	if err := s.paid(ws); err != nil {
		return nil, "", err
	}
	plain := secret.New("whsec_")
	w := state.Webhook{WorkspaceID: ws.ID, SealedSecret: s.cfg.Sealer.Seal(plain, ws.ID), UpdatedAt: s.now()}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.PutWebhook{Webhook: w, Rotate: true}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, "", NotSet()
		}
		return nil, "", err
	}
	kept, err := s.cfg.Store.Webhook(ws.ID)
	if err != nil || kept == nil {
		return nil, "", fmt.Errorf("read the webhook back: %v", err)
	}
	return kept, plain, nil
}

// Delete removes the webhook, its secret and its delivery history,
// pending deliveries included.
func (s *Service) Delete(ctx context.Context, ws *state.Workspace) error {
	_, err := s.cfg.Raft.Apply(ctx, fsm.DeleteWebhook{WorkspaceID: ws.ID})
	return err
}

// Test sends a test event at once, whether or not the webhook sends
// events, and records the result as the latest delivery.
func (s *Service) Test(ctx context.Context, ws *state.Workspace) (*state.Delivery, error) {
	if err := s.paid(ws); err != nil {
		return nil, err
	}
	w, err := s.cfg.Store.Webhook(ws.ID)
	if err != nil {
		return nil, err
	}
	if w == nil {
		return nil, NotSet()
	}
	plain, err := s.Secret(w)
	if err != nil {
		return nil, fmt.Errorf("open the signing secret: %w", err)
	}
	now := s.now()
	d := Delivery(TestEvent(ws.ID, now), now)
	code, sendErr := s.cfg.Sender.Send(ctx, Message{URL: w.URL, Secret: plain, DeliveryID: d.ID, EventID: d.EventID, Event: d.Event, Body: d.Body})
	a := Outcome(1, 1, nil, code, sendErr, s.now(), 0)
	d.Attempt, d.Status, d.HTTPStatus, d.Error, d.At = 1, a.Status, a.HTTPStatus, a.Error, &a.At
	if _, err := s.cfg.Raft.Apply(ctx, fsm.AddDelivery{Delivery: *d}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, NotSet() // deleted meanwhile
		}
		return nil, err
	}
	return d, nil
}

func (s *Service) paid(ws *state.Workspace) error {
	plan, err := s.cfg.Store.PlanOf(ws)
	if err != nil {
		return err
	}
	if plan != state.PlanPaid {
		return PaidOnly()
	}
	return nil
}

// CheckURL accepts an https URL, or an http one whose host is on the
// operator's allow-list (an address in it, or a name that resolves only
// into it). A host written as an address no delivery may reach is
// refused at once; the dial-time check is what holds for names.
func (s *Service) CheckURL(ctx context.Context, raw string) error {
	bad := func(format string, args ...any) error { return apierr.Invalid("url", format, args...) }
	if raw == "" {
		return bad("url is required")
	}
	if len(raw) > maxURL || strings.ContainsAny(raw, " \t\r\n") {
		return bad("url must be a URL of at most %d characters", maxURL)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return bad("url must be an absolute https URL")
	}
	if u.User != nil {
		return bad("url must not carry credentials; authenticate deliveries with their signature")
	}
	if u.Fragment != "" {
		return bad("url must not have a fragment")
	}
	host := u.Hostname()
	addr, literal := netip.ParseAddr(host)
	switch u.Scheme {
	case "https":
		if literal == nil && !safefetch.Allowed(addr, s.cfg.Allow) {
			return bad("url points at %s, a private, loopback or reserved address", addr)
		}
		return nil
	case "http":
		if literal == nil {
			if s.allowed(addr) {
				return nil
			}
			return bad("url must be https; plain http is for hosts on the operator's allow-list only")
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		addrs, err := s.cfg.Resolve(rctx, host)
		if err != nil || len(addrs) == 0 {
			return bad("url must be https; plain http is for hosts on the operator's allow-list only (%s did not resolve)", host)
		}
		for _, a := range addrs {
			if !s.allowed(a) {
				return bad("url must be https; plain http is for hosts on the operator's allow-list only")
			}
		}
		return nil
	default:
		return bad("url must be an https URL")
	}
}

func (s *Service) allowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.cfg.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
