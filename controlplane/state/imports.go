package state

import (
	"fmt"
	"slices"
	"sort"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Import statuses (the contract's states and transitions).
const (
	ImportAwaitingUpload = "awaiting_upload"
	ImportUploading      = "uploading"
	ImportRestoring      = "restoring"
	ImportReady          = "ready"
	ImportFailed         = "failed"
	ImportCancelled      = "cancelled"
	ImportSiteDeleted    = "site_deleted"
)

// Import source kinds.
const (
	ImportRemotePlugin = "remote_plugin"
	ImportArchive      = "archive"
)

// MaxOpenImports bounds a workspace's unfinished imports: each holds an
// upload on the leader's disk.
const MaxOpenImports = 5

// Import is a live site's archive on its way into a sandbox: uploaded in
// chunks (or as multipart objects), sealed, then restored by a job.
type Import struct {
	ID              string `json:"id"`
	UserID          string `json:"userId"`
	WorkspaceID     string `json:"orgId"`
	CreatedByUserID string `json:"createdByUserId"`
	SourceKind      string `json:"sourceKind"`
	SourceURL       string `json:"sourceUrl"`
	// ArtifactID is the sealed archive: a blob's SHA-256 (local
	// uploads), or the multipart upload's id (objects in the S3 store).
	ArtifactID string `json:"artifactId"`
	SiteID     string `json:"siteId"`
	// NewSite says the restore makes its own sandbox (no siteId given).
	NewSite bool `json:"newSite"`
	// ClientID is the OAuth client whose connector token made the import
	// (empty for a personal token): such a token sees only its client's
	// imports, and restores only into sites they made.
	ClientID      string `json:"clientId,omitempty"`
	Status        string `json:"status"`
	FailureReason string `json:"failureReason"`
	SizeBytes     int64  `json:"sizeBytes"`
	JobID         string `json:"jobId"`
	// Multipart is the direct upload to the object store, once started.
	Multipart *Multipart `json:"multipart,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
}

// Multipart is an import's upload straight to the object store: the
// objects it declared, and the finished ones' parts.
type Multipart struct {
	UploadID string            `json:"uploadId"`
	Mode     string            `json:"mode"`
	Objects  []MultipartObject `json:"objects"`
	// Manifest is the restore order finalize gave (object keys and kinds).
	Manifest []ManifestEntry `json:"manifest,omitempty"`
}

// MultipartObject is one object of a multipart import.
type MultipartObject struct {
	Key       string `json:"key"`
	SizeBytes int64  `json:"sizeBytes"`
	// StoreKey is where the object lives in the bucket; StoreUploadID the
	// store's own multipart upload of it.
	StoreKey      string `json:"storeKey"`
	StoreUploadID string `json:"storeUploadId"`
	Completed     bool   `json:"completed"`
}

// ManifestEntry names an object in the order it is restored, and what
// it holds (an archive, or a SQL dump).
type ManifestEntry struct {
	Key  string `json:"key"`
	Kind string `json:"kind"`
}

// Unfinished reports whether the import can still be cancelled.
func (i *Import) Unfinished() bool {
	switch i.Status {
	case ImportAwaitingUpload, ImportUploading, ImportRestoring:
		return true
	}
	return false
}

// Import returns an import by id, or nil.
func (s *Store) Import(id string) (*Import, error) {
	return first[Import](s.read(), tableImports, "id", id)
}

// ImportsOf lists a workspace's imports, newest first.
func (s *Store) ImportsOf(workspaceID string) ([]*Import, error) {
	out, err := all[Import](s.read(), tableImports, "workspace", workspaceID)
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	return out, err
}

// ImportsInto lists the imports restored (or to be restored) into a site.
func (s *Store) ImportsInto(siteID string) ([]*Import, error) {
	return all[Import](s.read(), tableImports, "site", siteID)
}

// ImportArtifacts lists the blobs of imports still being restored, which
// every server keeps (a new leader resumes the restore).
func (s *Store) ImportArtifacts() ([]string, error) {
	tx := s.read()
	it, err := tx.Get(tableImports, "id")
	if err != nil {
		return nil, err
	}
	var out []string
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if i := raw.(*Import); i.Status == ImportRestoring && i.Multipart == nil && i.ArtifactID != "" {
			out = append(out, i.ArtifactID)
		}
	}
	return out, nil
}

// CreateImport adds an import awaiting its upload, if its workspace has
// fewer than MaxOpenImports unfinished ones.
func (t *Tx) CreateImport(imp Import) error {
	return t.run(func(tx *memdb.Txn) error {
		if imp.Status != ImportAwaitingUpload {
			return fmt.Errorf("%w: a new import awaits its upload", ErrInvalid)
		}
		if dup, err := first[Import](tx, tableImports, "id", imp.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: import id %s exists", ErrConflict, imp.ID)
		}
		held, err := all[Import](tx, tableImports, "workspace", imp.WorkspaceID)
		if err != nil {
			return err
		}
		open := 0
		for _, h := range held {
			if h.Unfinished() {
				open++
			}
		}
		if open >= MaxOpenImports {
			return fmt.Errorf("%w: the workspace has %d unfinished imports; finish or cancel one first", ErrConflict, open)
		}
		return insert(tx, tableImports, &imp)
	})
}

// importMoves are the status changes PutImport allows (a status may also
// stay as it is).
var importMoves = map[string][]string{
	ImportAwaitingUpload: {ImportUploading, ImportRestoring, ImportFailed, ImportCancelled},
	ImportUploading:      {ImportRestoring, ImportFailed, ImportCancelled},
	ImportRestoring:      {ImportReady, ImportFailed, ImportCancelled},
	ImportReady:          {ImportSiteDeleted},
}

// PutImport records an import's progress. Its identity stays, and its
// status moves only forward (importMoves); with ifStatus set, the write
// applies only to an import in one of those statuses (ErrStale
// otherwise), so a cancel and a job's outcome cannot both win.
func (t *Tx) PutImport(imp Import, ifStatus []string) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Import](tx, tableImports, "id", imp.ID)
		if err != nil {
			return err
		}
		if old == nil {
			return fmt.Errorf("%w: import %s", ErrNotFound, imp.ID)
		}
		if len(ifStatus) > 0 && !slices.Contains(ifStatus, old.Status) {
			return fmt.Errorf("%w: import %s is %s", ErrStale, imp.ID, old.Status)
		}
		if old.WorkspaceID != imp.WorkspaceID || old.SourceURL != imp.SourceURL || old.SizeBytes != imp.SizeBytes ||
			old.NewSite != imp.NewSite || !old.CreatedAt.Equal(imp.CreatedAt) {
			return fmt.Errorf("%w: an import keeps its workspace, source, size and kind of site", ErrConflict)
		}
		if old.Status != imp.Status && !slices.Contains(importMoves[old.Status], imp.Status) {
			return fmt.Errorf("%w: import %s is %s and cannot become %s", ErrConflict, imp.ID, old.Status, imp.Status)
		}
		return insert(tx, tableImports, &imp)
	})
}

// DeleteImport removes an import's row; its site, if any, stays.
func (t *Tx) DeleteImport(id string) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[Import](tx, tableImports, "id", id)
		if err != nil {
			return err
		}
		if old == nil {
			return fmt.Errorf("%w: import %s", ErrNotFound, id)
		}
		return remove(tx, tableImports, old)
	})
}

// siteGone moves the imports of a deleted site on: a ready one to
// site_deleted, one still restoring into it to failed.
func siteGone(tx *memdb.Txn, siteID string, at time.Time) error {
	if err := domainGone(tx, siteID); err != nil {
		return err
	}
	if err := snapshotsGone(tx, siteID); err != nil {
		return err
	}
	if err := reposGone(tx, siteID); err != nil {
		return err
	}
	if err := checkpointsGone(tx, siteID, ""); err != nil {
		return err
	}
	linked, err := all[Import](tx, tableImports, "site", siteID)
	if err != nil {
		return err
	}
	for _, imp := range linked {
		c := *imp
		switch c.Status {
		case ImportReady:
			c.Status = ImportSiteDeleted
		case ImportRestoring:
			c.Status, c.FailureReason = ImportFailed, "its sandbox was deleted during the restore"
		default:
			continue
		}
		if !at.IsZero() {
			c.UpdatedAt = at
		}
		if err := insert(tx, tableImports, &c); err != nil {
			return err
		}
	}
	return nil
}
