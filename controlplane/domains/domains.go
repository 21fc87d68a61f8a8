// Package domains is the custom-domain service: a site's own hostname,
// the DNS records that point it at the service, the check that they do,
// and the job that moves WordPress to https://<hostname> (and back). The
// edge routes a domain, and may get it a certificate, only once it is
// active.
package domains

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/domainspec"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// Config wires the service.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	// Resolver answers the DNS checks.
	Resolver *Resolver
	// EdgeAddrs are the public addresses of the edges, which apex names
	// point at with A/AAAA records; without any, only subdomains (CNAME)
	// can be connected.
	EdgeAddrs []netip.Addr
	// SandboxDomain is the domain sandbox hosts live under; names under
	// it are the service's own and cannot be connected.
	SandboxDomain string
	// Logger, or nil for none.
	Logger *slog.Logger
	Now    func() time.Time
}

// Service keeps sites' custom domains.
type Service struct {
	cfg Config
	log *slog.Logger
}

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, log: cfg.Logger.With("component", "domains")}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// TXTName is the TXT record that proves an apex name is the customer's.
func TXTName(host string) string { return "_sandboxd." + host }

// TXTValue is that record's value.
func TXTValue(token string) string { return "sandboxd-verify=" + token }

// ClaimToken is the TXT token with which siteID proves it controls host
// and takes it over from another site's pending claim. It is derived, so
// every server names the same record without storing it; it needs no
// secrecy (it is published in DNS): only who controls the name's DNS can
// publish it, and it names the one site it lets in.
func ClaimToken(siteID, host string) string {
	sum := sha256.Sum256([]byte("sandboxd domain claim v1\x00" + siteID + "\x00" + host))
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
}

// SiteHost is the sandbox hostname of a site: what a subdomain's CNAME
// points at.
func SiteHost(site *state.Site) string {
	u, err := url.Parse(site.URL)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// Records are the DNS records d needs, and the target they point at.
func (s *Service) Records(site *state.Site, d *state.Domain) ([]domainspec.Record, string) {
	if !d.Apex {
		host := SiteHost(site)
		return []domainspec.Record{{Type: "CNAME", Name: d.Hostname, Value: host}}, host
	}
	var out []domainspec.Record
	for _, a := range s.cfg.EdgeAddrs {
		t := "A"
		if a.Is6() {
			t = "AAAA"
		}
		out = append(out, domainspec.Record{Type: t, Name: d.Hostname, Value: a.String()})
	}
	out = append(out, domainspec.Record{Type: "TXT", Name: TXTName(d.Hostname), Value: TXTValue(d.VerifyToken)})
	target := ""
	if len(s.cfg.EdgeAddrs) > 0 {
		target = s.cfg.EdgeAddrs[0].String()
	}
	return out, target
}

// Get returns a site's domain, or nil.
func (s *Service) Get(site *state.Site) (*state.Domain, error) {
	return s.cfg.Store.SiteDomain(site.ID)
}

// Connect gives a site a custom domain, pending its DNS records. The
// same hostname again answers the domain as it is.
func (s *Service) Connect(ctx context.Context, site *state.Site, raw string) (*state.Domain, error) {
	host, apex, err := Normalize(raw)
	if err != nil {
		return nil, apierr.Invalid("hostname", "%v", err)
	}
	if sd := strings.ToLower(strings.TrimSuffix(s.cfg.SandboxDomain, ".")); sd != "" && (host == sd || strings.HasSuffix(host, "."+sd)) {
		return nil, apierr.Invalid("hostname", "%s is under this service's own domain %s and cannot be connected", host, sd)
	}
	if apex && len(s.cfg.EdgeAddrs) == 0 {
		return nil, apierr.Invalid("hostname", "%s is an apex domain, which needs A records, and this service has no edge addresses "+
			"configured for them: connect a subdomain such as www.%s (a CNAME record) instead", host, host)
	}
	now := s.now()
	d := state.Domain{SiteID: site.ID, WorkspaceID: site.WorkspaceID, Hostname: host, Status: state.DomainPendingDNS, Apex: apex,
		CreatedAt: now, UpdatedAt: now}
	if apex {
		d.VerifyToken = ids.Random(16)
	}
	holder, err := s.cfg.Store.DomainByHostname(host)
	if err != nil {
		return nil, err
	}
	if holder != nil && holder.SiteID != site.ID && holder.Status == state.DomainPendingDNS {
		return s.takeOver(ctx, site, d, holder)
	}
	res, err := s.cfg.Raft.Apply(ctx, fsm.ConnectDomain{Domain: d})
	if err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, apierr.NotFound(apierr.CodeSiteNotFound, "site")
		}
		return nil, err
	}
	return res.(*state.Domain), nil
}

// takeOver connects d's hostname, which holder claims without having
// proven it, to site when the hostname's TXT record holds site's claim
// token: whoever controls the name's DNS wins over a squatter. Without
// the record the answer is 409 conflict naming the record to create
// (details.record).
func (s *Service) takeOver(ctx context.Context, site *state.Site, d state.Domain, holder *state.Domain) (*state.Domain, error) {
	token := ClaimToken(site.ID, d.Hostname)
	record := domainspec.Record{Type: "TXT", Name: TXTName(d.Hostname), Value: TXTValue(token)}
	var proof error = errors.New("this service has no DNS resolver configured")
	if s.cfg.Resolver != nil {
		proof = s.cfg.Resolver.checkTXT(ctx, record.Name, record.Value)
	}
	if proof != nil {
		return nil, apierr.Conflict("%s is claimed by another site that has not proven it controls the name; the claim lapses by %s. "+
			"To take the name over now, prove it is yours: create the TXT record %s with the value %s and connect again. DNS shows: %v",
			d.Hostname, holder.PendingFrom().Add(state.ClaimTTL).UTC().Format(time.RFC3339), record.Name, record.Value, proof).
			With("record", record)
	}
	d.VerifyToken = token // an apex name keeps proving itself with the same record
	_, err := s.cfg.Raft.Apply(ctx, fsm.TakeOverDomain{Domain: d, From: holder.SiteID})
	switch {
	case errors.Is(err, state.ErrStale):
		return nil, apierr.Conflict("the claim on %s changed meanwhile; connect again", d.Hostname)
	case errors.Is(err, state.ErrNotFound):
		return nil, apierr.NotFound(apierr.CodeSiteNotFound, "site")
	case err != nil:
		return nil, err
	}
	s.log.Info("custom domain taken over by TXT proof", "hostname", d.Hostname, "site_id", site.ID, "from_site_id", holder.SiteID)
	out, err := s.cfg.Store.SiteDomain(site.ID)
	if err != nil {
		return nil, err
	}
	if out == nil || out.Hostname != d.Hostname {
		return nil, apierr.Conflict("the domain changed meanwhile; read it again")
	}
	return out, nil
}

// Check looks the domain's records up and, when they point at the
// service, starts the job that moves WordPress to the domain (the domain
// is verifying, then active). Records that do not point at the service
// leave it pending_dns with lastError saying what DNS shows. An active
// domain is checked too: lastError tells when its records moved away
// (it keeps being served). The job's id is "" when none started.
func (s *Service) Check(ctx context.Context, site *state.Site) (*state.Domain, string, error) {
	return s.checkSite(ctx, site, false)
}

// checkSite is Check; quiet leaves a pending domain whose check found
// what the last one did as it is, without a write (the background loop).
func (s *Service) checkSite(ctx context.Context, site *state.Site, quiet bool) (*state.Domain, string, error) {
	d, err := s.cfg.Store.SiteDomain(site.ID)
	if err != nil {
		return nil, "", err
	}
	if d == nil {
		return nil, "", apierr.Invalid("", "the site has no custom domain; connect one with PUT /api/app/sites/%s/domain", site.ID)
	}
	if d.Status == state.DomainVerifying {
		return d, d.JobID, nil // the move is under way
	}
	checkErr := s.check(ctx, site, d)
	now := s.now()
	next := *d
	next.LastCheckedAt, next.UpdatedAt, next.LastError = &now, now, ""
	if checkErr != nil {
		next.LastError = checkErr.Error()
	}
	var job *state.Job
	switch {
	case d.Status == state.DomainActive:
	case checkErr != nil:
		next.Status = state.DomainPendingDNS
	case site.Status != state.SiteReady || site.Move != nil:
		next.Status = state.DomainPendingDNS
		next.LastError = fmt.Sprintf("the DNS records are right, but the site is %s: check again once it is ready", site.Status)
	default:
		j, err := jobs.New(jobspec.SetSiteDomain, site.WorkspaceID, site.ID, jobspec.DomainPayload{Hostname: d.Hostname}, now)
		if err != nil {
			return nil, "", err
		}
		job, next.Status = &j, state.DomainVerifying
	}
	if quiet && job == nil && next.Status == d.Status && next.LastError == d.LastError {
		return d, "", nil
	}
	res, err := s.cfg.Raft.Apply(ctx, fsm.PutDomain{Domain: next, IfStatus: []string{d.Status}, Job: job})
	if errors.Is(err, state.ErrStale) {
		return nil, "", apierr.Conflict("the domain changed during the check; check again")
	}
	if err != nil {
		return nil, "", err
	}
	out := res.(*state.Domain)
	if job != nil {
		return out, job.ID, nil
	}
	return out, "", nil
}

// check is one DNS check of d.
func (s *Service) check(ctx context.Context, site *state.Site, d *state.Domain) error {
	if s.cfg.Resolver == nil {
		return errors.New("this service has no DNS resolver configured")
	}
	if d.Apex {
		return s.cfg.Resolver.checkApex(ctx, d.Hostname, s.cfg.EdgeAddrs, TXTName(d.Hostname), TXTValue(d.VerifyToken))
	}
	return s.cfg.Resolver.checkCNAME(ctx, d.Hostname, SiteHost(site))
}

// Disconnect removes a site's domain: the edge stops routing it at once
// and, when WordPress had moved to it, a job points WordPress back at the
// sandbox URL (its id; "" when there is nothing to move back).
func (s *Service) Disconnect(ctx context.Context, site *state.Site) (*state.Domain, string, error) {
	d, err := s.cfg.Store.SiteDomain(site.ID)
	if err != nil {
		return nil, "", err
	}
	if d == nil {
		return nil, "", apierr.Invalid("", "the site has no custom domain")
	}
	var job *state.Job
	if d.WantsDomain() || d.Status == state.DomainFailed {
		j, err := jobs.New(jobspec.SetSiteDomain, site.WorkspaceID, site.ID, jobspec.DomainPayload{Hostname: d.Hostname, Disconnect: true}, s.now())
		if err != nil {
			return nil, "", err
		}
		job = &j
	}
	res, err := s.cfg.Raft.Apply(ctx, fsm.DisconnectDomain{SiteID: site.ID, Hostname: d.Hostname, Job: job})
	if errors.Is(err, state.ErrStale) {
		return nil, "", apierr.Conflict("the domain changed meanwhile; read it again")
	}
	if err != nil {
		return nil, "", err
	}
	out := res.(*state.Domain)
	if job != nil {
		return out, job.ID, nil
	}
	return out, "", nil
}

// RecheckFor is how long after being connected a pending domain is
// checked in the background: as long as its claim lasts.
const RecheckFor = state.ClaimTTL

// ExpireClaims releases the domains pending_dns for longer than
// state.ClaimTTL, so a hostname nobody proves is free again. It writes
// only when there is one; it returns how many were released.
func (s *Service) ExpireClaims(ctx context.Context) (int, error) {
	ds, err := s.cfg.Store.Domains()
	if err != nil {
		return 0, err
	}
	before := s.now().Add(-state.ClaimTTL)
	if !slices.ContainsFunc(ds, func(d *state.Domain) bool { f := d.PendingFrom(); return !f.IsZero() && f.Before(before) }) {
		return 0, nil
	}
	res, err := s.cfg.Raft.Apply(ctx, fsm.ExpireDomainClaims{Before: before})
	if err != nil {
		return 0, fmt.Errorf("expire domain claims: %w", err)
	}
	gone, _ := res.([]*state.Domain)
	for _, d := range gone {
		s.log.Info("pending custom domain released", "hostname", d.Hostname, "site_id", d.SiteID, "pending_since", d.PendingFrom())
	}
	return len(gone), nil
}

// Watch checks pending domains in the background while this server
// leads, so a domain becomes active soon after its records appear
// without the customer asking again: every interval in a domain's first
// hour, every ten intervals after that, until RecheckFor. A check that
// finds what the last one did writes nothing. Each interval it also
// releases the claims pending past state.ClaimTTL (ExpireClaims).
func (s *Service) Watch(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := s.ExpireClaims(ctx); err != nil {
			s.log.Warn("releasing lapsed domain claims failed", "err", err)
		}
		ds, err := s.cfg.Store.Domains()
		if err != nil {
			continue
		}
		now := s.now()
		for _, d := range ds {
			age := now.Sub(d.CreatedAt)
			every := interval
			if age > time.Hour {
				every = 10 * interval
			}
			if d.Status != state.DomainPendingDNS || age > RecheckFor || now.Sub(last[d.SiteID]) < every {
				continue
			}
			last[d.SiteID] = now
			site, err := s.cfg.Store.Site(d.SiteID)
			if err != nil || site == nil {
				continue
			}
			_, _, _ = s.checkSite(ctx, site, true)
			if ctx.Err() != nil {
				return
			}
		}
	}
}
