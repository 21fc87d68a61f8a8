package state

import (
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Site returns the site with this id, or nil.
func (s *Store) Site(id string) (*Site, error) { return first[Site](s.read(), tableSites, "id", id) }

// SiteBySlug returns the site with this slug, or nil.
func (s *Store) SiteBySlug(slug string) (*Site, error) {
	return first[Site](s.read(), tableSites, "slug", slug)
}

// SitesOf lists a workspace's sites, newest first.
func (s *Store) SitesOf(workspaceID string) ([]*Site, error) {
	out, err := all[Site](s.read(), tableSites, "workspace", workspaceID)
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, err
}

// SitesOnNode lists the sites placed on a node.
func (s *Store) SitesOnNode(nodeID string) ([]*Site, error) {
	return all[Site](s.read(), tableSites, "node", nodeID)
}

// AllSites lists every site with a watch set that fires on any change to
// the sites table, for the edge's route stream.
func (s *Store) AllSites() ([]*Site, memdb.WatchSet, error) {
	db, abandon := s.current()
	tx := db.Txn(false)
	ws := memdb.NewWatchSet()
	ws.Add(abandon)
	it, err := tx.Get(tableSites, "id")
	if err != nil {
		return nil, nil, err
	}
	ws.Add(it.WatchCh())
	var out []*Site
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*Site))
	}
	// Nodes feed routes too (their backend host), and so do custom domains.
	for _, table := range []string{tableNodes, tableDomains} {
		it, err := tx.Get(table, "id")
		if err != nil {
			return nil, nil, err
		}
		ws.Add(it.WatchCh())
	}
	return out, ws, nil
}

// LiveSites counts the sites an account's plan pays for.
func (s *Store) LiveSites(userID string) (int, error) {
	return countLive(s.read(), userID)
}

func countLive(tx *memdb.Txn, userID string) (int, error) {
	ss, err := all[Site](tx, tableSites, "user", userID)
	n := 0
	for _, x := range ss {
		if x.Status != SiteDeleting {
			n++
		}
	}
	return n, err
}

// LiveSitesOf counts an owner's sites that are not being deleted (what
// the plan's site quota counts).
func (s *Store) LiveSitesOf(userID string) (int, error) { return countLive(s.read(), userID) }

// Node returns a node, or nil.
func (s *Store) Node(id string) (*Node, error) { return first[Node](s.read(), tableNodes, "id", id) }

// Nodes lists every node by id.
func (s *Store) Nodes() ([]*Node, error) { return all[Node](s.read(), tableNodes, "id") }

// CreateSite adds a site in its workspace within the owner's quota; its
// slug must be free.
func (t *Tx) CreateSite(site Site, q Quota) error {
	return t.run(func(tx *memdb.Txn) error {
		if (site.Pool != "") != (site.WorkspaceID == PoolWorkspace) {
			return fmt.Errorf("%w: a pooled site belongs to the pool and to no workspace", ErrInvalid)
		}
		if site.Pool != "" {
			// no workspace: it waits to be claimed
		} else if w, err := first[Workspace](tx, tableWorkspaces, "id", site.WorkspaceID); err != nil {
			return err
		} else if w == nil {
			return fmt.Errorf("%w: workspace %s", ErrNotFound, site.WorkspaceID)
		}
		if dup, err := first[Site](tx, tableSites, "id", site.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: site id %s exists", ErrConflict, site.ID)
		}
		if dup, err := first[Site](tx, tableSites, "slug", site.Slug); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: the slug %q is taken", ErrConflict, site.Slug)
		}
		live, err := countLive(tx, site.UserID)
		if err != nil {
			return err
		}
		if err := q.check(live); err != nil {
			return err
		}
		return insert(tx, tableSites, &site)
	})
}

// SiteUpdate changes a site's lifecycle fields; empty fields stay.
type SiteUpdate struct {
	ID               string `json:"id"`
	Status           string `json:"status,omitempty"`
	NodeID           string `json:"nodeId,omitempty"`
	Port             int    `json:"port,omitempty"`
	Address          string `json:"address,omitempty"`
	WordPressVersion string `json:"wordpressVersion,omitempty"`
	PHPVersion       string `json:"phpVersion,omitempty"`
	// TemplateID makes the site's record say it is made from this
	// template (a restore).
	TemplateID string `json:"templateId,omitempty"`
	// TemplateBuild goes with TemplateID: the template's build.
	TemplateBuild string  `json:"templateBuild,omitempty"`
	FailureReason *string `json:"failureReason,omitempty"`
	// Entry replaces the site's login entry when not nil.
	Entry *SiteEntry `json:"entry,omitempty"`
	// PHPConfig replaces the applied php.ini overrides when not nil.
	PHPConfig map[string]string `json:"phpConfig,omitempty"`
	At        time.Time         `json:"at"`
	// IfStatus applies the update only while the site has this status, so
	// a late report cannot resurrect a site being deleted.
	IfStatus string `json:"ifStatus,omitempty"`
}

// UpdateSite applies a SiteUpdate. It returns the site as it is after.
func (t *Tx) UpdateSite(u SiteUpdate) (*Site, error) {
	var out *Site
	err := t.run(func(tx *memdb.Txn) error {
		old, err := first[Site](tx, tableSites, "id", u.ID)
		if err != nil {
			return err
		}
		if old == nil {
			return fmt.Errorf("%w: site %s", ErrNotFound, u.ID)
		}
		if u.IfStatus != "" && old.Status != u.IfStatus {
			return fmt.Errorf("%w: site is %s", ErrConflict, old.Status)
		}
		c := *old
		if u.Status != "" {
			c.Status = u.Status
		}
		if u.NodeID != "" && u.NodeID != c.NodeID {
			// Its checkpoints stay on the node it leaves.
			if err := checkpointsGone(tx, c.ID, u.NodeID); err != nil {
				return err
			}
			c.NodeID = u.NodeID
		}
		if u.Address != "" {
			c.Address = u.Address
		}
		if u.Port != 0 {
			c.Port = u.Port
		}
		if u.WordPressVersion != "" {
			c.WordPressVersion = u.WordPressVersion
		}
		if u.PHPVersion != "" {
			c.PHPVersion = u.PHPVersion
		}
		if u.TemplateID != "" {
			c.TemplateID, c.TemplateBuild = u.TemplateID, u.TemplateBuild
		}
		if u.Entry != nil {
			c.Entry = *u.Entry
		}
		if u.FailureReason != nil {
			c.FailureReason = *u.FailureReason
		}
		if u.PHPConfig != nil {
			c.PHPConfig = u.PHPConfig
		}
		c.UpdatedAt = u.At
		if c.Status == SiteReady && c.NodeID != "" {
			// A job that finished as its node went down: the site is
			// there, but nothing can reach it until the node is back.
			if n, err := first[Node](tx, tableNodes, "id", c.NodeID); err != nil {
				return err
			} else if n != nil && n.Status == NodeDown {
				c.Status = SiteUnavailable
			}
		}
		out = &c
		return insert(tx, tableSites, &c)
	})
	return out, err
}

// DeleteSite removes a site's row; a missing one is fine.
func (t *Tx) DeleteSite(id string, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		s, err := first[Site](tx, tableSites, "id", id)
		if err != nil || s == nil {
			return err
		}
		if err := remove(tx, tableSites, s); err != nil {
			return err
		}
		if s.NodeID != "" {
			// What the node holds of it is removed when it next reports it
			// (it may be away now).
			if err := insert(tx, tableTombstones, &Tombstone{ID: s.ID, NodeID: s.NodeID, DeletedAt: at}); err != nil {
				return err
			}
		}
		return siteGone(tx, id, at)
	})
}

// UpsertNode records a node's registration. Its status becomes ready.
func (t *Tx) UpsertNode(n Node) error {
	return t.run(func(tx *memdb.Txn) error {
		if old, err := first[Node](tx, tableNodes, "id", n.ID); err != nil {
			return err
		} else if old != nil {
			// Registering again keeps what the control plane decided.
			n.RegisteredAt, n.Drain = old.RegisteredAt, old.Drain
		}
		n.Status = NodeReady
		if err := insert(tx, tableNodes, &n); err != nil {
			return err
		}
		return followNode(tx, n.ID, NodeReady, n.UpdatedAt)
	})
}

// SetNodeStatus marks a node ready or down.
func (t *Tx) SetNodeStatus(id, status string, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		n, err := first[Node](tx, tableNodes, "id", id)
		if err != nil {
			return err
		}
		if n == nil {
			return fmt.Errorf("%w: node %s", ErrNotFound, id)
		}
		c := *n
		c.Status, c.UpdatedAt = status, at
		if err := insert(tx, tableNodes, &c); err != nil {
			return err
		}
		return followNode(tx, id, status, at)
	})
}

// SetSitePresence records what node nodeID reports of its sites'
// sleep, and its counts by depth when given. A site that is not (or no longer) on that node is left alone:
// only the node that runs a site speaks for it.
func (t *Tx) SetSitePresence(nodeID string, ps []SitePresence, counts *SleepCounts) error {
	return t.run(func(tx *memdb.Txn) error {
		if counts != nil {
			n, err := first[Node](tx, tableNodes, "id", nodeID)
			if err != nil {
				return err
			}
			if n != nil {
				c := *n
				c.Sleep = *counts
				if err := insert(tx, tableNodes, &c); err != nil {
					return err
				}
			}
		}
		for _, p := range ps {
			s, err := first[Site](tx, tableSites, "id", p.SiteID)
			if err != nil {
				return err
			}
			if s == nil || s.NodeID != nodeID || (s.Sleeping == p.Sleeping && sameTime(s.LastRequestAt, p.LastRequestAt)) {
				continue
			}
			c := *s
			c.Sleeping = p.Sleeping
			if p.LastRequestAt != nil {
				c.LastRequestAt = p.LastRequestAt
			}
			if err := insert(tx, tableSites, &c); err != nil {
				return err
			}
		}
		return nil
	})
}

func sameTime(a, b *time.Time) bool {
	return b == nil || a != nil && a.Equal(*b)
}

// followNode makes a node's ready sites unavailable while it is down and
// ready again when it is back, so the API, the edges' routes and the
// guards of every site operation agree on what can be served.
func followNode(tx *memdb.Txn, nodeID, status string, at time.Time) error {
	from, to := SiteUnavailable, SiteReady
	if status == NodeDown {
		from, to = SiteReady, SiteUnavailable
	}
	sites, err := all[Site](tx, tableSites, "node", nodeID)
	if err != nil {
		return err
	}
	for _, s := range sites {
		if s.Status != from || (s.Move != nil && s.Move.Switching) {
			continue // a switching site is the move's to end
		}
		c := *s
		c.Status, c.UpdatedAt = to, at
		if err := insert(tx, tableSites, &c); err != nil {
			return err
		}
	}
	return nil
}

// CreateSiteWithJob adds a site together with the job that provisions
// it, so neither exists without the other.
func (t *Tx) CreateSiteWithJob(site Site, job Job, q Quota) error {
	if err := t.CreateSite(site, q); err != nil {
		return err
	}
	return t.CreateJob(job)
}

// Launched adds what a launch from a template's public link adds with
// its site (see DemoLaunch): call it in the site's transaction.
func (t *Tx) Launched(l DemoLaunch) error {
	return t.run(func(tx *memdb.Txn) error { return launched(tx, l) })
}

// ClaimPooledSite gives a ready pooled site to a workspace, within the
// owner's quota, with its (already finished) create job: the site row
// keeps its id and node and takes the claimed name, slug and URL. A site
// that is no longer pooled, or not ready, is a conflict: the caller
// makes a site the ordinary way instead.
func (t *Tx) ClaimPooledSite(site Site, job Job, q Quota) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Site](tx, tableSites, "id", site.ID)
		if err != nil {
			return err
		}
		if old == nil || old.Pool == "" || old.Status != SiteReady || old.NodeID != site.NodeID || site.Pool != "" {
			return fmt.Errorf("%w: site %s is not a ready pooled site", ErrConflict, site.ID)
		}
		if w, err := first[Workspace](tx, tableWorkspaces, "id", site.WorkspaceID); err != nil {
			return err
		} else if w == nil {
			return fmt.Errorf("%w: workspace %s", ErrNotFound, site.WorkspaceID)
		}
		if dup, err := first[Site](tx, tableSites, "slug", site.Slug); err != nil {
			return err
		} else if dup != nil && dup.ID != site.ID {
			return fmt.Errorf("%w: the slug %q is taken", ErrConflict, site.Slug)
		}
		live, err := countLive(tx, site.UserID)
		if err != nil {
			return err
		}
		if err := q.check(live); err != nil {
			return err
		}
		if err := insert(tx, tableSites, &site); err != nil {
			return err
		}
		// The claim is the whole create: its job is recorded finished.
		if dup, err := first[Job](tx, tableJobs, "id", job.ID); err != nil || dup != nil {
			return err
		}
		job.Status, job.Progress = JobSucceeded, 100
		return insert(tx, tableJobs, &job)
	})
}

// PooledSites lists the sites waiting in warm pools.
func (s *Store) PooledSites() ([]*Site, error) {
	return all[Site](s.read(), tableSites, "workspace", PoolWorkspace)
}

// UpdateSiteWithJob moves a site to a new status and queues the job that
// carries the change out (delete, reset), atomically.
func (t *Tx) UpdateSiteWithJob(u SiteUpdate, job Job) error {
	if _, err := t.UpdateSite(u); err != nil {
		return err
	}
	return t.CreateJob(job)
}
