package state

import (
	"fmt"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// LibraryEntry returns a workspace's entry by id or slug, or nil.
func (s *Store) LibraryEntry(workspaceID, idOrSlug string) (*LibraryEntry, error) {
	tx := s.read()
	e, err := first[LibraryEntry](tx, tableLibrary, "id", idOrSlug)
	if err != nil {
		return nil, err
	}
	if e == nil {
		if e, err = first[LibraryEntry](tx, tableLibrary, "slug", workspaceID, idOrSlug); err != nil {
			return nil, err
		}
	}
	if e == nil || e.WorkspaceID != workspaceID {
		return nil, nil
	}
	return e, nil
}

// LibraryOf lists a workspace's entries by slug.
func (s *Store) LibraryOf(workspaceID string) ([]*LibraryEntry, error) {
	out, err := all[LibraryEntry](s.read(), tableLibrary, "workspace", workspaceID)
	sort.Slice(out, func(i, j int) bool { return out[i].Slug < out[j].Slug })
	return out, err
}

// LibraryBlobInUse reports whether any entry holds this blob.
func (s *Store) LibraryBlobInUse(sha string) (bool, error) {
	e, err := first[LibraryEntry](s.read(), tableLibrary, "blob", sha)
	return e != nil, err
}

// PutLibraryEntry adds an entry (its slug must be free in its workspace,
// the workspace within q) or, when replace is set, replaces the entry with
// the same id.
func (t *Tx) PutLibraryEntry(e LibraryEntry, replace bool, q Quota) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[LibraryEntry](tx, tableLibrary, "id", e.ID)
		if err != nil {
			return err
		}
		switch {
		case replace && old == nil:
			return fmt.Errorf("%w: library entry %s", ErrNotFound, e.ID)
		case replace && (old.WorkspaceID != e.WorkspaceID || old.Slug != e.Slug):
			return fmt.Errorf("%w: an entry keeps its workspace and slug", ErrConflict)
		case !replace && old != nil:
			return fmt.Errorf("%w: library entry %s exists", ErrConflict, e.ID)
		case !replace:
			if w, err := first[Workspace](tx, tableWorkspaces, "id", e.WorkspaceID); err != nil {
				return err
			} else if w == nil {
				return fmt.Errorf("%w: workspace %s", ErrNotFound, e.WorkspaceID)
			}
			if dup, err := first[LibraryEntry](tx, tableLibrary, "slug", e.WorkspaceID, e.Slug); err != nil {
				return err
			} else if dup != nil {
				return fmt.Errorf("%w: the slug %q is taken in this workspace", ErrConflict, e.Slug)
			}
			have, err := all[LibraryEntry](tx, tableLibrary, "workspace", e.WorkspaceID)
			if err != nil {
				return err
			}
			if err := q.check(len(have)); err != nil {
				return err
			}
		}
		return insert(tx, tableLibrary, &e)
	})
}

// DeleteLibraryEntry removes an entry; a missing one is fine.
func (t *Tx) DeleteLibraryEntry(id string) error {
	return t.run(func(tx *memdb.Txn) error {
		e, err := first[LibraryEntry](tx, tableLibrary, "id", id)
		if err != nil || e == nil {
			return err
		}
		return remove(tx, tableLibrary, e)
	})
}

// SetLibraryLicense stores (sealed) or, with nil, removes an entry's
// license key. Either way the key's last-read time starts over.
func (t *Tx) SetLibraryLicense(id string, sealed []byte, hint string, at time.Time) (*LibraryEntry, error) {
	return t.updateLibrary(id, func(e *LibraryEntry) {
		e.LicenseSealed, e.LicenseHint, e.LicenseLastReadAt, e.UpdatedAt = sealed, hint, nil, at
		if sealed == nil {
			e.LicenseHint = ""
		}
	})
}

// MarkLicenseRead stamps the time an agent read an entry's license key.
func (t *Tx) MarkLicenseRead(id string, at time.Time) (*LibraryEntry, error) {
	return t.updateLibrary(id, func(e *LibraryEntry) { e.LicenseLastReadAt = &at })
}

func (t *Tx) updateLibrary(id string, change func(*LibraryEntry)) (*LibraryEntry, error) {
	var out *LibraryEntry
	err := t.run(func(tx *memdb.Txn) error {
		old, err := first[LibraryEntry](tx, tableLibrary, "id", id)
		if err != nil {
			return err
		}
		if old == nil {
			return fmt.Errorf("%w: library entry %s", ErrNotFound, id)
		}
		c := *old
		change(&c)
		out = &c
		return insert(tx, tableLibrary, &c)
	})
	return out, err
}

// LibraryBlobs lists the blobs every Library entry holds.
func (s *Store) LibraryBlobs() ([]string, error) {
	es, err := all[LibraryEntry](s.read(), tableLibrary, "id")
	seen := map[string]bool{}
	var out []string
	for _, e := range es {
		if !seen[e.BlobSHA256] {
			seen[e.BlobSHA256] = true
			out = append(out, e.BlobSHA256)
		}
	}
	return out, err
}
