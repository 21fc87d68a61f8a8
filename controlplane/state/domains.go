package state

import (
	"fmt"
	"slices"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Custom domain statuses. A domain waits in pending_dns until its records
// point at the service, is verifying while WordPress moves to it, and is
// active once it is served (and may get a certificate); failed means the
// move did not happen (LastError says why) and a new check tries again.
const (
	DomainPendingDNS = "pending_dns"
	DomainVerifying  = "verifying"
	DomainActive     = "active"
	DomainFailed     = "failed"
)

// Domain is a site's custom domain. A site has at most one and a hostname
// belongs to at most one site in the whole service.
type Domain struct {
	SiteID      string `json:"siteId"`
	WorkspaceID string `json:"workspaceId"`
	// Hostname is normalised: lower case, ASCII (IDN in punycode), no
	// trailing dot.
	Hostname string `json:"hostname"`
	Status   string `json:"status"`
	// Apex names point at the edge with A/AAAA records and prove their
	// owner with a TXT record holding VerifyToken; other names use a
	// CNAME to the site's sandbox host.
	Apex          bool       `json:"apex,omitempty"`
	VerifyToken   string     `json:"verifyToken,omitempty"`
	VerifiedAt    *time.Time `json:"verifiedAt,omitempty"`
	LastError     string     `json:"lastError,omitempty"`
	LastCheckedAt *time.Time `json:"lastCheckedAt,omitempty"`
	// JobID is the job moving WordPress to or from the domain.
	JobID     string    `json:"jobId,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	// PendingSince is when the domain last became pending_dns (nil when
	// it is not; CreatedAt for rows older than the field): a claim
	// pending since more than ClaimTTL is released.
	PendingSince *time.Time `json:"pendingSince,omitempty"`
	// CertBlocked is the certificate order budget the domain's last
	// order found spent, nil once an order went ahead.
	CertBlocked *CertBlock `json:"certBlocked,omitempty"`
}

// ClaimTTL is how long a domain may stay pending_dns: then its claim on
// the hostname is released, so a name nobody proves is never held for
// good.
const ClaimTTL = 72 * time.Hour

// PendingFrom is when the domain's pending claim started, or the zero
// time when it is not pending.
func (d *Domain) PendingFrom() time.Time {
	switch {
	case d == nil || d.Status != DomainPendingDNS:
		return time.Time{}
	case d.PendingSince != nil:
		return *d.PendingSince
	}
	return d.CreatedAt
}

// Serving reports whether the edge routes the domain (and may get it a
// certificate).
func (d *Domain) Serving() bool { return d != nil && d.Status == DomainActive }

// WantsDomain reports whether WordPress should answer at the domain: it
// is on its way there or there.
func (d *Domain) WantsDomain() bool {
	return d != nil && (d.Status == DomainVerifying || d.Status == DomainActive)
}

// SiteDomain returns a site's custom domain, or nil.
func (s *Store) SiteDomain(siteID string) (*Domain, error) {
	return first[Domain](s.read(), tableDomains, "id", siteID)
}

// DomainByHostname returns the domain of a hostname, or nil.
func (s *Store) DomainByHostname(hostname string) (*Domain, error) {
	return first[Domain](s.read(), tableDomains, "hostname", hostname)
}

// Domains lists every custom domain.
func (s *Store) Domains() ([]*Domain, error) {
	return all[Domain](s.read(), tableDomains, "id")
}

// ConnectDomain adds a site's custom domain. The hostname must be free in
// the whole service and the site must have no other domain (the same one
// again is a no-op that returns the row kept).
func (t *Tx) ConnectDomain(d Domain) (*Domain, error) {
	var out *Domain
	err := t.run(func(tx *memdb.Txn) error {
		site, err := first[Site](tx, tableSites, "id", d.SiteID)
		if err != nil {
			return err
		}
		if site == nil || site.WorkspaceID != d.WorkspaceID {
			return fmt.Errorf("%w: site %s", ErrNotFound, d.SiteID)
		}
		if site.Status == SiteDeleting {
			return fmt.Errorf("%w: the site is being deleted", ErrInvalid)
		}
		old, err := first[Domain](tx, tableDomains, "id", d.SiteID)
		if err != nil {
			return err
		}
		if old != nil {
			if old.Hostname == d.Hostname {
				out = old
				return nil
			}
			return fmt.Errorf("%w: the site already has the custom domain %s; disconnect it first", ErrConflict, old.Hostname)
		}
		if taken, err := first[Domain](tx, tableDomains, "hostname", d.Hostname); err != nil {
			return err
		} else if taken != nil {
			return fmt.Errorf("%w: %s is already connected to another site", ErrConflict, d.Hostname)
		}
		if d.Status == "" {
			d.Status = DomainPendingDNS
		}
		d.PendingSince = nil
		if d.Status == DomainPendingDNS {
			at := d.CreatedAt
			d.PendingSince = &at
		}
		out = &d
		return insert(tx, tableDomains, &d)
	})
	return out, err
}

// TakeOverDomain gives d's hostname to d's site, which proved it controls
// the name, and removes the pending claim of site from (the loser) in
// the same transaction. It applies only while that claim is still the
// hostname's and still pending_dns (ErrStale otherwise); the new domain
// must be connectable as ConnectDomain's (the site has no other domain).
// It returns the claim removed.
func (t *Tx) TakeOverDomain(d Domain, from string) (*Domain, error) {
	var out *Domain
	err := t.run(func(tx *memdb.Txn) error {
		old, err := first[Domain](tx, tableDomains, "hostname", d.Hostname)
		if err != nil {
			return err
		}
		if old == nil || old.SiteID != from || old.Status != DomainPendingDNS {
			return fmt.Errorf("%w: the claim on %s changed", ErrStale, d.Hostname)
		}
		if err := remove(tx, tableDomains, old); err != nil {
			return err
		}
		if _, err := t.ConnectDomain(d); err != nil {
			return err
		}
		out = old
		return nil
	})
	return out, err
}

// ExpireDomainClaims releases the domains pending_dns since before
// (PendingFrom): their hostnames are free again. It returns the claims
// removed.
func (t *Tx) ExpireDomainClaims(before time.Time) ([]*Domain, error) {
	var out []*Domain
	err := t.run(func(tx *memdb.Txn) error {
		ds, err := all[Domain](tx, tableDomains, "id")
		if err != nil {
			return err
		}
		for _, d := range ds {
			if from := d.PendingFrom(); from.IsZero() || !from.Before(before) {
				continue
			}
			if err := remove(tx, tableDomains, d); err != nil {
				return err
			}
			out = append(out, d)
		}
		return nil
	})
	return out, err
}

// PutDomain records a check's or a job's outcome on a site's domain. It
// applies only while the site still has the same hostname and, when
// ifStatus is given, one of those statuses (ErrStale otherwise), so an
// outcome never lands on a domain reconnected meanwhile. A job, when
// given, is queued in the same transaction.
func (t *Tx) PutDomain(d Domain, ifStatus []string, job *Job) (*Domain, error) {
	var out *Domain
	err := t.run(func(tx *memdb.Txn) error {
		old, err := first[Domain](tx, tableDomains, "id", d.SiteID)
		if err != nil {
			return err
		}
		if old == nil || old.Hostname != d.Hostname {
			return fmt.Errorf("%w: the site's custom domain changed", ErrStale)
		}
		if len(ifStatus) > 0 && !slices.Contains(ifStatus, old.Status) {
			return fmt.Errorf("%w: the domain is %s", ErrStale, old.Status)
		}
		next := d
		next.WorkspaceID, next.Apex, next.VerifyToken, next.CreatedAt = old.WorkspaceID, old.Apex, old.VerifyToken, old.CreatedAt
		// Only certificate orders change CertBlocked; a claim stays
		// pending from when it first was.
		next.CertBlocked, next.PendingSince = old.CertBlocked, nil
		if next.Status == DomainPendingDNS {
			from := old.PendingFrom()
			if from.IsZero() {
				from = next.UpdatedAt
			}
			next.PendingSince = &from
		}
		if job != nil {
			if err := t.CreateJob(*job); err != nil {
				return err
			}
			next.JobID = job.ID
		}
		out = &next
		return insert(tx, tableDomains, &next)
	})
	return out, err
}

// DisconnectDomain removes a site's domain (the hostname is free again at
// once) and queues job, when given, in the same transaction: the one that
// points WordPress back at the sandbox URL.
func (t *Tx) DisconnectDomain(siteID, hostname string, job *Job) (*Domain, error) {
	var out *Domain
	err := t.run(func(tx *memdb.Txn) error {
		old, err := first[Domain](tx, tableDomains, "id", siteID)
		if err != nil {
			return err
		}
		if old == nil || old.Hostname != hostname {
			return fmt.Errorf("%w: the site's custom domain changed", ErrStale)
		}
		if job != nil {
			if err := t.CreateJob(*job); err != nil {
				return err
			}
		}
		out = old
		return remove(tx, tableDomains, old)
	})
	return out, err
}

// domainGone drops a deleted site's domain.
func domainGone(tx *memdb.Txn, siteID string) error {
	d, err := first[Domain](tx, tableDomains, "id", siteID)
	if err != nil || d == nil {
		return err
	}
	return remove(tx, tableDomains, d)
}
