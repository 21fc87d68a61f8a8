package state

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Blueprint is a saved recipe (WordPress Playground Blueprint JSON) with
// its compatibility report as of its last save. Revision grows by one
// each time the source is replaced.
type Blueprint struct {
	ID              string          `json:"id"`
	WorkspaceID     string          `json:"orgId"`
	UserID          string          `json:"userId"` // the workspace owner
	CreatedByUserID string          `json:"createdByUserId"`
	Name            string          `json:"name"`
	Slug            string          `json:"slug"`
	Description     string          `json:"description"`
	Source          json.RawMessage `json:"source"`
	SchemaVersion   int             `json:"schemaVersion"`
	Revision        int             `json:"revision"`
	// CompatReport is the checker's findings, as JSON.
	CompatReport            json.RawMessage `json:"compatReport"`
	HoistedPHPVersion       string          `json:"hoistedPhpVersion"`
	HoistedWordPressVersion string          `json:"hoistedWordpressVersion"`
	HoistedMultisite        bool            `json:"hoistedMultisite"`
	// BundleSHA256 is the blob of the uploaded bundle; empty for a plain
	// source.
	BundleSHA256 string `json:"bundleSha256,omitempty"`
	// BundleFiles are the bundle's files (relative to its manifest) and
	// sizes, which bundled resources must name.
	BundleFiles             map[string]int64 `json:"bundleFiles,omitempty"`
	BundleSizeBytes         int64            `json:"bundleSizeBytes"`
	BundleManifestDirectory string           `json:"bundleManifestDirectory"`
	CreatedAt               time.Time        `json:"createdAt"`
	UpdatedAt               time.Time        `json:"updatedAt"`
}

// Blueprint returns a saved Blueprint by id, or nil.
func (s *Store) Blueprint(id string) (*Blueprint, error) {
	return first[Blueprint](s.read(), tableBlueprints, "id", id)
}

// BlueprintsOf lists a workspace's Blueprints, oldest first.
func (s *Store) BlueprintsOf(workspaceID string) ([]*Blueprint, error) {
	out, err := all[Blueprint](s.read(), tableBlueprints, "workspace", workspaceID)
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, err
}

// CreateBlueprint saves a new Blueprint within the owner's quota
// (Blueprints across the owner's workspaces); its slug must be free in
// its workspace.
func (t *Tx) CreateBlueprint(b Blueprint, q Quota) error {
	return t.run(func(tx *memdb.Txn) error {
		if w, err := first[Workspace](tx, tableWorkspaces, "id", b.WorkspaceID); err != nil {
			return err
		} else if w == nil {
			return fmt.Errorf("%w: workspace %s", ErrNotFound, b.WorkspaceID)
		}
		if dup, err := first[Blueprint](tx, tableBlueprints, "id", b.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: blueprint id %s exists", ErrConflict, b.ID)
		}
		if dup, err := first[Blueprint](tx, tableBlueprints, "slug", b.WorkspaceID, b.Slug); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: the slug %q is taken in this workspace", ErrConflict, b.Slug)
		}
		have, err := all[Blueprint](tx, tableBlueprints, "user", b.UserID)
		if err != nil {
			return err
		}
		if err := q.check(len(have)); err != nil {
			return err
		}
		return insert(tx, tableBlueprints, &b)
	})
}

// PutBlueprint replaces a saved Blueprint read at revision ifRevision
// and updated at ifUpdatedAt: a writer that lost a race is refused with
// ErrStale. Workspace, owner, slug and creation never change.
func (t *Tx) PutBlueprint(b Blueprint, ifUpdatedAt time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Blueprint](tx, tableBlueprints, "id", b.ID)
		if err != nil {
			return err
		}
		if old == nil {
			return fmt.Errorf("%w: blueprint %s", ErrNotFound, b.ID)
		}
		if !old.UpdatedAt.Equal(ifUpdatedAt) {
			return fmt.Errorf("%w: blueprint %s changed meanwhile", ErrStale, b.ID)
		}
		if old.WorkspaceID != b.WorkspaceID || old.UserID != b.UserID || old.Slug != b.Slug || !old.CreatedAt.Equal(b.CreatedAt) {
			return fmt.Errorf("%w: a blueprint keeps its workspace, owner, slug and creation", ErrConflict)
		}
		if b.Revision != old.Revision && b.Revision != old.Revision+1 {
			return fmt.Errorf("%w: revision %d after %d", ErrInvalid, b.Revision, old.Revision)
		}
		return insert(tx, tableBlueprints, &b)
	})
}

// DeleteBlueprint removes a saved Blueprint with its finished runs (those
// whose job has ended too); a missing one is fine. Its unfinished runs
// carry on and are collected by PruneState once they finish.
func (t *Tx) DeleteBlueprint(id string) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Blueprint](tx, tableBlueprints, "id", id)
		if err != nil || old == nil {
			return err
		}
		if err := tx.Delete(tableBlueprints, old); err != nil {
			return err
		}
		runs, err := all[BlueprintRun](tx, tableRuns, "blueprint", id)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if done, err := runDone(tx, r); err != nil {
				return err
			} else if !done {
				continue
			}
			if err := remove(tx, tableRuns, r); err != nil {
				return err
			}
		}
		return nil
	})
}

// BlueprintsOwnedBy counts the saved Blueprints of an owner's workspaces.
func (s *Store) BlueprintsOwnedBy(userID string) (int, error) {
	bs, err := all[Blueprint](s.read(), tableBlueprints, "user", userID)
	return len(bs), err
}

// BlueprintBundles lists the blobs of saved Blueprints' bundles, and of
// unfinished runs (whose Blueprint may be gone).
func (s *Store) BlueprintBundles() ([]string, error) {
	tx := s.read()
	bs, err := all[Blueprint](tx, tableBlueprints, "id")
	if err != nil {
		return nil, err
	}
	rs, err := all[BlueprintRun](tx, tableRuns, "id")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	add := func(sha string) {
		if sha != "" && !seen[sha] {
			seen[sha] = true
			out = append(out, sha)
		}
	}
	for _, b := range bs {
		add(b.BundleSHA256)
	}
	for _, r := range rs {
		if !r.Terminal() {
			add(r.BundleSHA256)
		}
	}
	return out, nil
}
