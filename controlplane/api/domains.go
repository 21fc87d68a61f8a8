package api

import (
	"context"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/domainspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Domains is what the custom-domain routes need from the domains service.
type Domains interface {
	Get(site *state.Site) (*state.Domain, error)
	Connect(ctx context.Context, site *state.Site, hostname string) (*state.Domain, error)
	Check(ctx context.Context, site *state.Site) (*state.Domain, string, error)
	Disconnect(ctx context.Context, site *state.Site) (*state.Domain, string, error)
	Records(site *state.Site, d *state.Domain) ([]domainspec.Record, string)
}

// DomainView is the contract's custom domain.
type DomainView struct {
	Hostname string `json:"hostname" doc:"Lower case, IDN in punycode, without scheme, port or path."`
	Status   string `json:"status" enum:"@domainStatus" doc:"pending_dns: the records do not point at the service yet; verifying: they do and WordPress is moving to the domain; active: served at https://hostname; failed: the move failed (lastError), check again to retry."`
	// VerifiedAt is when the domain became active.
	VerifiedAt *time.Time          `json:"verifiedAt"`
	URL        string              `json:"url" doc:"https://hostname: where the site answers once active."`
	Target     string              `json:"target" doc:"What the records point at: the site's sandbox host (CNAME), or the service's first edge address (apex names)."`
	Records    []domainspec.Record `json:"records" doc:"Create these at your DNS provider. A subdomain needs a CNAME to the sandbox host; an apex name (example.com) needs A/AAAA records to the edge addresses and a TXT record that proves it is yours."`
	LastError  *string             `json:"lastError" doc:"What the last check saw, in words: null when it found the records right. An active domain whose certificate cannot be ordered yet says so here too: the certificate budget that is spent and when it refills (the first HTTPS visit after that orders one)."`
	// LastCheckedAt is when the records were last looked up.
	LastCheckedAt *time.Time `json:"lastCheckedAt"`
	ExpiresAt     *time.Time `json:"expiresAt" doc:"pending_dns only: when the claim on the hostname lapses (72 hours after it became pending) and the domain is removed unless a check found its records right by then; null otherwise. Until then another site can take the name over by proving it controls it (a TXT record)."`
}

func (a domainRoutes) domainView(site *state.Site, d *state.Domain) *DomainView {
	if d == nil {
		return nil
	}
	records, target := a.domains.Records(site, d)
	v := &DomainView{Hostname: d.Hostname, Status: d.Status, VerifiedAt: d.VerifiedAt, URL: "https://" + d.Hostname,
		Target: target, Records: records, LastError: optional(d.LastError), LastCheckedAt: d.LastCheckedAt}
	if from := d.PendingFrom(); !from.IsZero() {
		at := from.Add(state.ClaimTTL)
		v.ExpiresAt = &at
	}
	if b := d.CertBlocked; b != nil && d.Serving() && a.now().Before(b.Until) {
		msg := b.Describe()
		if d.LastError != "" {
			msg = d.LastError + "; " + msg
		}
		v.LastError = &msg
	}
	return v
}

type domainResponse struct {
	Domain *DomainView `json:"domain" doc:"null when the site has no custom domain."`
}

type domainJobResponse struct {
	Domain *DomainView `json:"domain"`
	JobID  *string     `json:"jobId" doc:"The set_site_domain job moving WordPress to (or back from) the domain; null when none started."`
}

// ConnectDomainRequest is the body of PUT /api/app/sites/{id}/domain.
type ConnectDomainRequest struct {
	Hostname string `json:"hostname" doc:"The name to serve the site at, such as shop.example.com (no scheme, path, port, wildcard or IP address; IDN names are taken in Unicode or punycode). Unique across the service."`
}

// domainRoutes are a site's custom domains.
type domainRoutes struct {
	*base
	domains Domains
}

func (a domainRoutes) register(r *rest.Router) {
	if a.domains == nil {
		return
	}
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	const path = "/api/app/sites/{id}/domain"
	a.bearer(r, g, rest.Route{Method: "GET", Path: path, Tag: "domains", Params: siteParam,
		Summary: "The site's custom domain, with the DNS records it needs.", Response: domainResponse{},
		Errors: []string{apierr.CodeSiteNotFound}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			d, err := a.domains.Get(s)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, domainResponse{Domain: a.domainView(s, d)})
		}})
	a.bearer(r, g, rest.Route{Method: "PUT", Path: path, Tag: "domains", Params: siteParam, Request: ConnectDomainRequest{},
		Summary: "Connect a custom domain (pending_dns): create the records it answers, then check it. " +
			"The same hostname again answers the domain as it is; another one while a domain is connected is 409 conflict. " +
			"A hostname another site holds is 409 conflict, except a claim still pending_dns: the site that proves it controls the name " +
			"takes it over (the TXT record the 409 names in details.record: type, name, value), and the other site loses it. " +
			"A pending_dns domain lapses at expiresAt.",
		Response: domainResponse{}, Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, apierr.CodeConflict},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			var body ConnectDomainRequest
			if err := rest.DecodeJSON(req, &body); err != nil {
				return err
			}
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			d, err := a.domains.Connect(req.Context(), s, body.Hostname)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, domainResponse{Domain: a.domainView(s, d)})
		}})
	a.bearer(r, g, rest.Route{Method: "POST", Path: path + "/check", Tag: "domains", Params: siteParam,
		Summary: "Look the domain's DNS records up now. When they point at the service, WordPress moves to https://hostname " +
			"(status verifying, then active; jobId follows the move); otherwise the domain stays pending_dns and lastError says what DNS shows.",
		Response: domainJobResponse{}, Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, apierr.CodeConflict},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			d, job, err := a.domains.Check(req.Context(), s)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, domainJobResponse{Domain: a.domainView(s, d), JobID: optional(job)})
		}})
	a.bearer(r, g, rest.Route{Method: "DELETE", Path: path, Tag: "domains", Params: siteParam,
		Summary: "Disconnect the custom domain (any plan): the edge stops serving it at once and a job points WordPress back " +
			"at the sandbox URL. Answers the domain as it was.",
		Response: domainJobResponse{}, Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, apierr.CodeConflict},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			d, job, err := a.domains.Disconnect(req.Context(), s)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, domainJobResponse{Domain: a.domainView(s, d), JobID: optional(job)})
		}})
}
