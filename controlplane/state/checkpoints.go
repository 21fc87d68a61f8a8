package state

import (
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Checkpoint is a point in time of a site's files and database. Its data
// lies on the site's node (a clone of the site's disk by reference); a
// site moved to another node leaves its checkpoints behind, and they are
// forgotten here.
type Checkpoint struct {
	ID          string `json:"id"`
	SiteID      string `json:"siteId"`
	WorkspaceID string `json:"workspaceId"`
	NodeID      string `json:"nodeId"`
	Name        string `json:"name"`
	// SizeBytes is what it held of its own when it was last measured.
	SizeBytes int64     `json:"sizeBytes"`
	CreatedAt time.Time `json:"createdAt"`
}

// Checkpoints lists a site's checkpoints, newest first.
func (s *Store) Checkpoints(siteID string) ([]*Checkpoint, error) {
	list, err := all[Checkpoint](s.read(), tableCheckpoints, "site", siteID)
	if err != nil {
		return nil, err
	}
	sort.Slice(list, func(i, j int) bool {
		if !list[i].CreatedAt.Equal(list[j].CreatedAt) {
			return list[i].CreatedAt.After(list[j].CreatedAt)
		}
		return list[i].ID > list[j].ID
	})
	return list, nil
}

// Checkpoint returns one checkpoint, or nil.
func (s *Store) Checkpoint(id string) (*Checkpoint, error) {
	return first[Checkpoint](s.read(), tableCheckpoints, "id", id)
}

// AddCheckpoint records a site's checkpoint within the plan's count per
// site; the site must still be on the node the checkpoint was made on.
func (t *Tx) AddCheckpoint(cp Checkpoint, q Quota) error {
	return t.run(func(tx *memdb.Txn) error {
		s, err := first[Site](tx, tableSites, "id", cp.SiteID)
		if err != nil {
			return err
		}
		if s == nil || s.Status == SiteDeleting {
			return fmt.Errorf("%w: site %s", ErrNotFound, cp.SiteID)
		}
		if s.NodeID != cp.NodeID {
			return fmt.Errorf("%w: the site moved to another node during the checkpoint", ErrConflict)
		}
		if dup, err := first[Checkpoint](tx, tableCheckpoints, "id", cp.ID); err != nil || dup != nil {
			return err
		}
		mine, err := all[Checkpoint](tx, tableCheckpoints, "site", cp.SiteID)
		if err != nil {
			return err
		}
		if err := q.check(len(mine)); err != nil {
			return err
		}
		return insert(tx, tableCheckpoints, &cp)
	})
}

// DeleteCheckpoint forgets one of a site's checkpoints.
func (t *Tx) DeleteCheckpoint(siteID, id string) error {
	return t.run(func(tx *memdb.Txn) error {
		cp, err := first[Checkpoint](tx, tableCheckpoints, "id", id)
		if err != nil {
			return err
		}
		if cp == nil || cp.SiteID != siteID {
			return fmt.Errorf("%w: checkpoint %s", ErrNotFound, id)
		}
		return remove(tx, tableCheckpoints, cp)
	})
}

// SetCheckpointSizes records what a site's checkpoints held of their own
// when its node last measured them.
func (t *Tx) SetCheckpointSizes(siteID string, sizes map[string]int64) error {
	return t.run(func(tx *memdb.Txn) error {
		list, err := all[Checkpoint](tx, tableCheckpoints, "site", siteID)
		if err != nil {
			return err
		}
		for _, cp := range list {
			if n, ok := sizes[cp.ID]; ok && n != cp.SizeBytes {
				c := *cp
				c.SizeBytes = n
				if err := insert(tx, tableCheckpoints, &c); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// checkpointsGone forgets a site's checkpoints, or those not on node
// keep ("" none).
func checkpointsGone(tx *memdb.Txn, siteID, keep string) error {
	list, err := all[Checkpoint](tx, tableCheckpoints, "site", siteID)
	if err != nil {
		return err
	}
	for _, cp := range list {
		if keep != "" && cp.NodeID == keep {
			continue
		}
		if err := remove(tx, tableCheckpoints, cp); err != nil {
			return err
		}
	}
	return nil
}
