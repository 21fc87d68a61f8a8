package state

import (
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Demo is a sandbox a visitor launched from a template's public launch
// link, from its launch until its end: the launcher finds a returning
// visitor's demo by it, and the leader sends the demo's webhook events
// from it (demo.ready once its site is ready, demo.expired once it ends,
// which removes the row).
type Demo struct {
	ID          string `json:"id"`
	TemplateID  string `json:"templateId"`
	WorkspaceID string `json:"workspaceId"`
	SiteID      string `json:"siteId"`
	// SiteURL and JobID are the site's URL and create job, for the
	// launcher's progress page and the events (which outlive the site).
	SiteURL string `json:"siteUrl"`
	JobID   string `json:"jobId"`
	// Visitor is the SHA-256 (hex) of the visitor's launcher cookie: the
	// cookie is what lets a browser back into its demo, so only its hash
	// is kept. IPHash is the keyed hash of the visitor's address.
	Visitor string `json:"visitor"`
	IPHash  string `json:"ipHash"`
	// Email and Consent are what the visitor gave (email entry mode);
	// ConsentLabel is the checkbox text they saw, nil when consent was off.
	Email        string     `json:"email,omitempty"`
	Consent      bool       `json:"consent"`
	ConsentLabel *string    `json:"consentLabel,omitempty"`
	CreatedAt    time.Time  `json:"createdAt"`
	ExpiresAt    *time.Time `json:"expiresAt,omitempty"`
	// ReadyAt is when the leader saw the site ready (and queued
	// demo.ready); nil before.
	ReadyAt *time.Time `json:"readyAt,omitempty"`
}

// ErrLiveDemo refuses a launch under the visitor quota: the visitor has
// a live demo of the template. It is a conflict.
var ErrLiveDemo = fmt.Errorf("%w: a live demo exists", ErrConflict)

// DemoLaunch is what a launch adds with its site, in the site's Raft
// entry: the demo, the lead (email entry mode) and one more launch on the
// template. Token is the launch token the visitor used: a link disabled
// meanwhile launches nothing. OnePerVisitor refuses the launch, with
// ErrConflict, when the visitor (cookie or address) has a live demo of
// the template.
type DemoLaunch struct {
	Demo          Demo   `json:"demo"`
	Lead          *Lead  `json:"lead,omitempty"`
	Token         string `json:"token"`
	OnePerVisitor bool   `json:"onePerVisitor,omitempty"`
}

// Demo returns a demo by id, or nil.
func (s *Store) Demo(id string) (*Demo, error) { return first[Demo](s.read(), tableDemos, "id", id) }

// Demos lists every demo that has not ended.
func (s *Store) Demos() ([]*Demo, error) { return all[Demo](s.read(), tableDemos, "id") }

// LiveDemoOf returns the visitor's live demo of a template, found by the
// visitor's cookie hash or, when ip is set, address hash; nil when none.
func (s *Store) LiveDemoOf(templateID, visitor, ipHash string, now time.Time) (*Demo, error) {
	return liveDemoOf(s.read(), templateID, visitor, ipHash, now)
}

func liveDemoOf(tx *memdb.Txn, templateID, visitor, ipHash string, now time.Time) (*Demo, error) {
	ds, err := all[Demo](tx, tableDemos, "template", templateID)
	if err != nil {
		return nil, err
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].CreatedAt.After(ds[j].CreatedAt) })
	var byIP *Demo
	for _, d := range ds {
		if !(d.Visitor == visitor || ipHash != "" && d.IPHash == ipHash) {
			continue
		}
		if d.ExpiresAt != nil && !d.ExpiresAt.After(now) {
			continue
		}
		site, err := first[Site](tx, tableSites, "id", d.SiteID)
		if err != nil {
			return nil, err
		}
		if site == nil || site.Status == SiteDeleting || site.Status == SiteFailed {
			continue
		}
		if d.Visitor == visitor {
			return d, nil
		}
		if byIP == nil {
			byIP = d
		}
	}
	return byIP, nil
}

// launched adds what a launch adds with its site (see DemoLaunch); the
// site row is written by the caller in the same transaction.
func launched(tx *memdb.Txn, l DemoLaunch) error {
	d := l.Demo
	tpl, err := first[Template](tx, tableTemplates, "id", d.TemplateID)
	if err != nil {
		return err
	}
	if tpl == nil || tpl.WorkspaceID != d.WorkspaceID || !tpl.Launch.Enabled || tpl.Launch.Token == "" || tpl.Launch.Token != l.Token {
		return fmt.Errorf("%w: no launch link %s", ErrNotFound, d.TemplateID)
	}
	if l.OnePerVisitor {
		live, err := liveDemoOf(tx, d.TemplateID, d.Visitor, d.IPHash, d.CreatedAt)
		if err != nil {
			return err
		}
		if live != nil {
			return fmt.Errorf("%w: the visitor has a live demo of %s", ErrLiveDemo, d.TemplateID)
		}
	}
	if dup, err := first[Demo](tx, tableDemos, "id", d.ID); err != nil {
		return err
	} else if dup != nil {
		return fmt.Errorf("%w: demo id %s exists", ErrConflict, d.ID)
	}
	if err := insert(tx, tableDemos, &d); err != nil {
		return err
	}
	if l.Lead != nil {
		lead := *l.Lead
		if lead.TemplateID != d.TemplateID || lead.WorkspaceID != d.WorkspaceID {
			return fmt.Errorf("%w: a lead of another template", ErrInvalid)
		}
		if err := insert(tx, tableLeads, &lead); err != nil {
			return err
		}
	}
	next := *tpl
	next.Launch.Count++
	return insert(tx, tableTemplates, &next)
}

// DemoReady records that a demo's site is ready and queues its
// demo.ready delivery (when the workspace's webhook sends events). A demo
// already ready, or gone, is left alone, so a leader that applies it
// again after a change of leader queues nothing twice.
func (t *Tx) DemoReady(id string, at time.Time, d *Delivery) error {
	return t.run(func(tx *memdb.Txn) error {
		demo, err := first[Demo](tx, tableDemos, "id", id)
		if err != nil || demo == nil || demo.ReadyAt != nil {
			return err
		}
		next := *demo
		next.ReadyAt = &at
		if err := insert(tx, tableDemos, &next); err != nil {
			return err
		}
		return enqueue(tx, d)
	})
}

// EndDemo removes a demo whose site ended (lease over, deleted, failed)
// and, when it had been ready, queues its demo.expired delivery. A demo
// already gone is left alone.
func (t *Tx) EndDemo(id string, d *Delivery) error {
	return t.run(func(tx *memdb.Txn) error {
		demo, err := first[Demo](tx, tableDemos, "id", id)
		if err != nil || demo == nil {
			return err
		}
		if err := tx.Delete(tableDemos, demo); err != nil {
			return err
		}
		if demo.ReadyAt == nil {
			return nil
		}
		return enqueue(tx, d)
	})
}
