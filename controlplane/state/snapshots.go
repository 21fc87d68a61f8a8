package state

import (
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Snapshots lists a site's snapshots, newest first.
func (s *Store) Snapshots(siteID string) ([]*SiteSnapshot, error) {
	out, err := all[SiteSnapshot](s.read(), tableSnapshots, "site", siteID)
	sort.Slice(out, func(i, j int) bool { return out[i].TakenAt.After(out[j].TakenAt) })
	return out, err
}

// LatestSnapshot is a site's newest snapshot, or nil.
func (s *Store) LatestSnapshot(siteID string) (*SiteSnapshot, error) {
	list, err := s.Snapshots(siteID)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return list[0], nil
}

// AllSnapshots lists every snapshot (their blobs are kept).
func (s *Store) AllSnapshots() ([]*SiteSnapshot, error) {
	return all[SiteSnapshot](s.read(), tableSnapshots, "id")
}

// AddSnapshot records a site's snapshot and forgets all but its keep
// newest (their blobs go with the next collection).
func (t *Tx) AddSnapshot(sn SiteSnapshot, keep int) error {
	return t.run(func(tx *memdb.Txn) error {
		site, err := first[Site](tx, tableSites, "id", sn.SiteID)
		if err != nil {
			return err
		}
		if site == nil {
			return fmt.Errorf("%w: site %s", ErrNotFound, sn.SiteID)
		}
		if err := insert(tx, tableSnapshots, &sn); err != nil {
			return err
		}
		list, err := all[SiteSnapshot](tx, tableSnapshots, "site", sn.SiteID)
		if err != nil {
			return err
		}
		sort.Slice(list, func(i, j int) bool { return list[i].TakenAt.After(list[j].TakenAt) })
		keep = max(keep, 1)
		if len(list) <= keep {
			return nil
		}
		for _, old := range list[keep:] {
			if err := remove(tx, tableSnapshots, old); err != nil {
				return err
			}
		}
		return nil
	})
}

// snapshotsGone forgets a deleted site's snapshots.
func snapshotsGone(tx *memdb.Txn, siteID string) error {
	list, err := all[SiteSnapshot](tx, tableSnapshots, "site", siteID)
	if err != nil {
		return err
	}
	for _, sn := range list {
		if err := remove(tx, tableSnapshots, sn); err != nil {
			return err
		}
	}
	return nil
}

// StartMove begins moving a ready (or, its node lost, unavailable) site
// to another node, with the job that does it; a site already moving, or
// in any other state, is a conflict. A drain's move is reported on the
// drained node.
func (t *Tx) StartMove(siteID string, m SiteMove, job Job) error {
	return t.run(func(tx *memdb.Txn) error {
		site, err := first[Site](tx, tableSites, "id", siteID)
		if err != nil {
			return err
		}
		switch {
		case site == nil:
			return fmt.Errorf("%w: site %s", ErrNotFound, siteID)
		case site.Move != nil:
			return fmt.Errorf("%w: site %s is already moving to %s", ErrConflict, siteID, site.Move.To)
		case site.Status != SiteReady && site.Status != SiteUnavailable:
			return fmt.Errorf("%w: site %s is %s", ErrConflict, siteID, site.Status)
		case site.NodeID != m.From || m.To == m.From:
			return fmt.Errorf("%w: site %s is on %s", ErrConflict, siteID, site.NodeID)
		}
		c := *site
		c.Move = &m
		if err := insert(tx, tableSites, &c); err != nil {
			return err
		}
		if m.Reason == MoveDrain {
			if err := reportMove(tx, m.From, MoveReport{SiteID: siteID, To: m.To, JobID: m.JobID, Status: "moving", StartedAt: m.StartedAt}); err != nil {
				return err
			}
		}
		return insertJob(tx, job)
	})
}

// SwitchMove makes a moving site unavailable for its switch (its routes
// show the unavailable page, its node's heartbeats leave it so).
func (t *Tx) SwitchMove(siteID, jobID string, at time.Time) error {
	return t.onMove(siteID, jobID, func(c *Site) error {
		if c.Status != SiteReady && c.Status != SiteUnavailable {
			return fmt.Errorf("%w: site %s is %s", ErrConflict, siteID, c.Status)
		}
		m := *c.Move
		m.Switching = true
		c.Move, c.Status, c.UpdatedAt = &m, SiteUnavailable, at
		return nil
	})
}

// FinishMove puts a moved site on its new node, serving at address:port;
// restoredFrom, for a site restored from a snapshot, is when it was
// taken. A site whose lost node came back before the switch is a
// conflict: it is served where it was, nothing was lost.
func (t *Tx) FinishMove(siteID, jobID, address string, port int, restoredFrom *time.Time, downtime time.Duration, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		site, err := first[Site](tx, tableSites, "id", siteID)
		if err != nil {
			return err
		}
		if site == nil || site.Move == nil || site.Move.JobID != jobID {
			return fmt.Errorf("%w: site %s is not moving with job %s", ErrConflict, siteID, jobID)
		}
		if site.Status != SiteReady && site.Status != SiteUnavailable {
			return fmt.Errorf("%w: site %s is %s", ErrConflict, siteID, site.Status)
		}
		m := *site.Move
		if m.Reason == MoveReschedule {
			if from, err := first[Node](tx, tableNodes, "id", m.From); err != nil {
				return err
			} else if from != nil && from.Status == NodeReady && site.Status == SiteReady {
				return fmt.Errorf("%w: node %s is back and serves site %s", ErrConflict, m.From, siteID)
			}
		}
		c := *site
		c.NodeID, c.Address, c.Port, c.Move, c.UpdatedAt = m.To, address, port, nil, at
		c.Status = SiteReady
		if to, err := first[Node](tx, tableNodes, "id", m.To); err != nil {
			return err
		} else if to == nil || to.Status == NodeDown {
			c.Status = SiteUnavailable
		}
		if restoredFrom != nil {
			c.RestoredFrom = restoredFrom
		}
		if err := insert(tx, tableSites, &c); err != nil {
			return err
		}
		if m.Reason == MoveDrain {
			return reportMove(tx, m.From, MoveReport{SiteID: siteID, To: m.To, JobID: jobID, Status: "moved",
				DowntimeMs: downtime.Milliseconds(), StartedAt: m.StartedAt, FinishedAt: &at})
		}
		return nil
	})
}

// AbortMove ends a move that failed: the site stays where it was (and
// serves again there when it was switching). It reports whether there
// was such a move to end: only then is the copy on the target not the
// site's.
func (t *Tx) AbortMove(siteID, jobID, reason string, at time.Time) (bool, error) {
	aborted := false
	err := t.run(func(tx *memdb.Txn) error {
		site, err := first[Site](tx, tableSites, "id", siteID)
		if err != nil {
			return err
		}
		if site == nil || site.Move == nil || site.Move.JobID != jobID {
			return nil // deleted, finished, or another move: nothing of this one left
		}
		aborted = true
		m := *site.Move
		c := *site
		c.Move, c.UpdatedAt = nil, at
		if m.Switching {
			c.Status = SiteReady
			if from, err := first[Node](tx, tableNodes, "id", m.From); err != nil {
				return err
			} else if from == nil || from.Status == NodeDown {
				c.Status = SiteUnavailable
			}
		}
		if err := insert(tx, tableSites, &c); err != nil {
			return err
		}
		if m.Reason == MoveDrain {
			return reportMove(tx, m.From, MoveReport{SiteID: siteID, To: m.To, JobID: jobID, Status: "failed", Error: reason,
				StartedAt: m.StartedAt, FinishedAt: &at})
		}
		return nil
	})
	return aborted, err
}

func (t *Tx) onMove(siteID, jobID string, fn func(*Site) error) error {
	return t.run(func(tx *memdb.Txn) error {
		site, err := first[Site](tx, tableSites, "id", siteID)
		if err != nil {
			return err
		}
		if site == nil || site.Move == nil || site.Move.JobID != jobID {
			return fmt.Errorf("%w: site %s is not moving with job %s", ErrConflict, siteID, jobID)
		}
		c := *site
		if err := fn(&c); err != nil {
			return err
		}
		return insert(tx, tableSites, &c)
	})
}

// reportMove records a move on its drained node (replacing the same
// job's earlier entry).
func reportMove(tx *memdb.Txn, nodeID string, r MoveReport) error {
	n, err := first[Node](tx, tableNodes, "id", nodeID)
	if err != nil || n == nil || n.Drain == nil {
		return err
	}
	c := *n
	d := *n.Drain
	d.Moves = append([]MoveReport(nil), d.Moves...)
	replaced := false
	for i := range d.Moves {
		if d.Moves[i].JobID == r.JobID {
			d.Moves[i], replaced = r, true
		}
	}
	if !replaced {
		d.Moves = append(d.Moves, r)
	}
	c.Drain = &d
	return insert(tx, tableNodes, &c)
}

// SetNodeDrain starts (or, with drain false, ends) a node's drain.
func (t *Tx) SetNodeDrain(id string, drain bool, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		n, err := first[Node](tx, tableNodes, "id", id)
		if err != nil {
			return err
		}
		if n == nil {
			return fmt.Errorf("%w: node %s", ErrNotFound, id)
		}
		c := *n
		switch {
		case drain && c.Drain == nil:
			c.Drain = &Drain{StartedAt: at, Moves: []MoveReport{}}
		case !drain:
			c.Drain = nil
		default:
			return nil
		}
		c.UpdatedAt = at
		return insert(tx, tableNodes, &c)
	})
}

// insertJob queues a job inside a transaction (a job already there is
// kept).
func insertJob(tx *memdb.Txn, j Job) error {
	if old, err := first[Job](tx, tableJobs, "id", j.ID); err != nil || old != nil {
		return err
	}
	j.Status = JobQueued
	return insert(tx, tableJobs, &j)
}

// Tombstone remembers a deleted site's node for a while, so a node that
// was away when the site was deleted is told to remove its copy.
type Tombstone struct {
	ID        string    `json:"id"` // the site's
	NodeID    string    `json:"nodeId"`
	DeletedAt time.Time `json:"deletedAt"`
}

// Tombstone returns a deleted site's tombstone, or nil.
func (s *Store) Tombstone(siteID string) (*Tombstone, error) {
	return first[Tombstone](s.read(), tableTombstones, "id", siteID)
}

// PruneTombstones forgets sites deleted before a time.
func (t *Tx) PruneTombstones(before time.Time) (int, error) {
	n := 0
	err := t.run(func(tx *memdb.Txn) error {
		list, err := all[Tombstone](tx, tableTombstones, "id")
		if err != nil {
			return err
		}
		for _, tb := range list {
			if tb.DeletedAt.Before(before) {
				if err := remove(tx, tableTombstones, tb); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	})
	return n, err
}
