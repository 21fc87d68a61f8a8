package sites

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/secret"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// How long one-time links work.
const (
	// LoginTTL is how long a magic-login link works.
	LoginTTL = 5 * time.Minute
	// AdminerTTL is how long a database UI link stays valid if unused.
	AdminerTTL = 15 * time.Minute
)

// agent returns a client for the agent holding a ready site.
func (s *Service) agent(site *state.Site) (agentv1connect.AgentServiceClient, error) {
	if site.Status != state.SiteReady || site.Move != nil {
		return nil, NotReady(site)
	}
	a, err := s.cfg.Nodes.Agent(site.NodeID)
	if err != nil {
		return nil, apierr.Unavailable("the site's node is not reachable")
	}
	return a, nil
}

// agentError turns an agent call's failure into the contract's error.
func agentError(err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return apierr.Unavailable("the site is not on its node")
	case connect.CodeInvalidArgument:
		return apierr.Invalid("", "%s", connect.NewError(connect.CodeInvalidArgument, err).Message())
	}
	return apierr.Unavailable("the site's node did not answer")
}

// call runs one agent call for a ready site and maps its failure.
func call[Req, Resp any](ctx context.Context, s *Service, site *state.Site,
	rpc func(agentv1connect.AgentServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), req *Req) (*Resp, error) {
	a, err := s.agent(site)
	if err != nil {
		return nil, err
	}
	resp, err := rpc(a, ctx, connect.NewRequest(req))
	if err != nil {
		return nil, agentError(err)
	}
	return resp.Msg, nil
}

// oneTimeToken makes a link token and the SHA-256 (hex) the agent keeps:
// the agent never sees the token itself.
func oneTimeToken() (token, hash string) {
	token = secret.New("")
	sum := sha256.Sum256([]byte(token))
	return token, hex.EncodeToString(sum[:])
}

// MagicLogin makes a one-time link that opens the site signed in to
// wp-admin.
func (s *Service) MagicLogin(ctx context.Context, site *state.Site) (*sitespec.LoginLink, error) {
	return s.LoginLink(ctx, site, "")
}

// LoginLink makes a one-time link that signs into the site and lands on
// redirect, a path in it (empty: wp-admin).
func (s *Service) LoginLink(ctx context.Context, site *state.Site, redirect string) (*sitespec.LoginLink, error) {
	token, hash := oneTimeToken()
	expires := s.now().Add(LoginTTL)
	if redirect == "" {
		redirect = site.Entry.Path // a Blueprint's landingPage
	}
	if _, err := call(ctx, s, site, agentv1connect.AgentServiceClient.CreateLoginToken,
		&agentv1.CreateLoginTokenRequest{SiteId: site.ID, TokenHash: hash, ExpiresUnix: expires.Unix(), RedirectPath: redirect,
			UserLogin: site.Entry.User}); err != nil {
		return nil, err
	}
	return &sitespec.LoginLink{Token: token, URL: s.PublicURL(site) + "/?sandbox_login=" + token, ExpiresAt: expires}, nil
}

// PublicURL is where a site answers for people: https://<its custom
// domain> once that is active (WordPress lives there, and so must its
// sign-in cookies), else its sandbox URL.
func (s *Service) PublicURL(site *state.Site) string {
	if d, err := s.cfg.Store.SiteDomain(site.ID); err == nil && d.Serving() {
		return "https://" + d.Hostname
	}
	return site.URL
}

func debugSettings(d *agentv1.DebugSettings) *sitespec.DebugSettings {
	return &sitespec.DebugSettings{WPDebug: d.WpDebug, WPDebugLog: d.WpDebugLog, WPDebugDisplay: d.WpDebugDisplay, ScriptDebug: d.ScriptDebug}
}

// Debug reads a site's WordPress debug constants.
func (s *Service) Debug(ctx context.Context, site *state.Site) (*sitespec.DebugSettings, error) {
	d, err := call(ctx, s, site, agentv1connect.AgentServiceClient.GetDebug, &agentv1.SiteRef{SiteId: site.ID})
	if err != nil {
		return nil, err
	}
	return debugSettings(d), nil
}

// SetDebug changes any of a site's debug constants and returns them all.
func (s *Service) SetDebug(ctx context.Context, site *state.Site, p sitespec.DebugPatch) (*sitespec.DebugSettings, error) {
	d, err := call(ctx, s, site, agentv1connect.AgentServiceClient.SetDebug, &agentv1.SetDebugRequest{SiteId: site.ID,
		WpDebug: p.WPDebug, WpDebugLog: p.WPDebugLog, WpDebugDisplay: p.WPDebugDisplay, ScriptDebug: p.ScriptDebug})
	if err != nil {
		return nil, err
	}
	return debugSettings(d), nil
}

// DebugLog tails wp-content/debug.log; lines is clamped to the contract's
// 1..2000.
func (s *Service) DebugLog(ctx context.Context, site *state.Site, lines int) (*sitespec.DebugLog, error) {
	lines = max(1, min(lines, sitespec.MaxLogLines))
	l, err := call(ctx, s, site, agentv1connect.AgentServiceClient.TailDebugLog,
		&agentv1.TailDebugLogRequest{SiteId: site.ID, Lines: int32(lines)})
	if err != nil {
		return nil, err
	}
	return &sitespec.DebugLog{Content: l.Content, Exists: l.Exists, Lines: int(l.Lines), Truncated: l.Truncated}, nil
}

// TruncateDebugLog empties wp-content/debug.log; a missing log is fine.
func (s *Service) TruncateDebugLog(ctx context.Context, site *state.Site) error {
	_, err := call(ctx, s, site, agentv1connect.AgentServiceClient.TruncateDebugLog, &agentv1.SiteRef{SiteId: site.ID})
	return err
}

// Database returns the site's database credentials and a one-time
// Adminer link signed in to that database only.
func (s *Service) Database(ctx context.Context, site *state.Site) (*sitespec.DatabaseAccess, error) {
	d, err := call(ctx, s, site, agentv1connect.AgentServiceClient.GetDatabase, &agentv1.SiteRef{SiteId: site.ID})
	if err != nil {
		return nil, err
	}
	token, hash := oneTimeToken()
	expires := s.now().Add(AdminerTTL)
	if _, err := call(ctx, s, site, agentv1connect.AgentServiceClient.CreateAdminerLogin,
		&agentv1.CreateLoginTokenRequest{SiteId: site.ID, TokenHash: hash, ExpiresUnix: expires.Unix()}); err != nil {
		return nil, err
	}
	return &sitespec.DatabaseAccess{Host: d.Host, Port: int(d.Port), Name: d.Name, User: d.User, Password: d.Password,
		AdminerURL: site.URL + "/__sandbox/adminer/?sandbox_token=" + token, ExpiresAt: expires}, nil
}

// Emails lists the mail the site sent, captured and never delivered.
func (s *Service) Emails(ctx context.Context, site *state.Site) ([]sitespec.Email, error) {
	m, err := call(ctx, s, site, agentv1connect.AgentServiceClient.ListEmails, &agentv1.SiteRef{SiteId: site.ID})
	if err != nil {
		return nil, err
	}
	out := make([]sitespec.Email, 0, len(m.Emails))
	for _, e := range m.Emails {
		out = append(out, sitespec.Email{ID: e.Id, From: e.From, To: strings.Join(e.To, ", "), Subject: e.Subject,
			Date: time.Unix(e.DateUnix, 0).UTC(), Text: e.Text, HTML: e.Html})
	}
	return out, nil
}

// ClearEmails drops the captured mail.
func (s *Service) ClearEmails(ctx context.Context, site *state.Site) error {
	_, err := call(ctx, s, site, agentv1connect.AgentServiceClient.ClearEmails, &agentv1.SiteRef{SiteId: site.ID})
	return err
}

// Plugins lists the plugins and themes installed in the site.
func (s *Service) Plugins(ctx context.Context, site *state.Site) ([]sitespec.InstalledPlugin, error) {
	m, err := call(ctx, s, site, agentv1connect.AgentServiceClient.ListPlugins, &agentv1.SiteRef{SiteId: site.ID})
	if err != nil {
		return nil, err
	}
	out := make([]sitespec.InstalledPlugin, 0, len(m.Plugins))
	for _, p := range m.Plugins {
		out = append(out, sitespec.InstalledPlugin{Slug: p.Slug, Name: p.Name, Version: p.Version, Active: p.Active, Kind: p.Kind})
	}
	return out, nil
}

// Files runs one file-manager operation as the site's user and returns
// its answer, or its refusal as the contract's error.
func (s *Service) Files(ctx context.Context, site *state.Site, op sitespec.FileOp) (*sitespec.FileAnswer, error) {
	m, err := call(ctx, s, site, agentv1connect.AgentServiceClient.Files, &agentv1.FilesRequest{SiteId: site.ID, Op: op.Op,
		Path: op.Path, From: op.From, To: op.To, Content: op.Content, Filename: op.Filename})
	if err != nil {
		return nil, err
	}
	switch m.ErrorCode {
	case "":
	case "not_found":
		return nil, apierr.New(http.StatusNotFound, sitespec.CodeFileNotFound, "%s", m.ErrorMessage)
	case "conflict":
		return nil, apierr.Conflict("%s", m.ErrorMessage)
	case "too_large":
		return nil, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge, "%s", m.ErrorMessage)
	case "disk_full":
		return nil, s.diskFull(site, m.ErrorMessage)
	default:
		return nil, apierr.Invalid("", "%s", m.ErrorMessage)
	}
	a := &sitespec.FileAnswer{Path: m.Path, From: m.From, To: m.To, SizeBytes: m.SizeBytes, Truncated: m.Truncated, Content: m.Content}
	for _, e := range m.Entries {
		a.Entries = append(a.Entries, sitespec.FileEntry{Name: e.Name, Type: e.Type, SizeBytes: e.SizeBytes, ModifiedAt: e.ModifiedAt})
	}
	return a, nil
}

// diskFull is the plan-limit error of a write past the site's disk.
func (s *Service) diskFull(site *state.Site, msg string) error {
	ws, err := s.cfg.Store.Workspace(site.WorkspaceID)
	if err != nil {
		return err
	}
	plan := state.PlanFree
	if ws != nil {
		if plan, err = s.cfg.Store.PlanOf(ws); err != nil {
			return err
		}
	}
	return apierr.New(http.StatusPaymentRequired, apierr.CodePlanLimitReached, "%s", msg).
		With("plan", plan).With("limit", s.cfg.Plans.For(plan).SiteDiskMB).With("resource", plans.SiteDiskMB)
}
