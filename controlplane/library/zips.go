package library

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// StoreZip keeps a ZIP on this server and on a peer before anything names
// it in the replicated state, and returns its SHA-256.
func (s *Service) StoreZip(ctx context.Context, zip []byte) (string, error) {
	sha, err := s.cfg.Blobs.Put(ctx, zip)
	if err != nil {
		return "", fmt.Errorf("store zip: %w", err)
	}
	if s.cfg.Replicate != nil {
		if err := s.cfg.Replicate(ctx, sha, zip); err != nil {
			s.log.Warn("zip not replicated", "sha256", sha, "err", err)
			return "", apierr.Unavailable("the ZIP could not be copied to another server; retry")
		}
	}
	return sha, nil
}

// Drop deletes a ZIP that no entry and no unfinished deploy needs, even
// when the request that dropped it has ended.
func (s *Service) Drop(ctx context.Context, sha string) {
	if !BlobInUse(s.cfg.Store, sha, "") {
		if err := s.cfg.Blobs.Delete(context.WithoutCancel(ctx), sha); err != nil {
			s.log.Warn("drop library zip", "sha256", sha, "err", err)
		}
	}
}

// ErrBlobMismatch reports a peer's blob whose content does not hash to
// the name it was sent under.
var ErrBlobMismatch = apierr.Invalid("sha", "the body does not hash to the path's SHA-256")

// PutPeerBlob stores a ZIP a peer is about to name in the replicated
// state, refusing one that does not hash to sha.
func (s *Service) PutPeerBlob(ctx context.Context, sha string, data []byte) error {
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != sha {
		return ErrBlobMismatch
	}
	_, err := s.cfg.Blobs.Put(ctx, data)
	return err
}

// OpenBlob opens a stored blob (a ZIP, a template artifact) by its
// SHA-256, with its size, for peers replicating it.
func (s *Service) OpenBlob(ctx context.Context, sha string) (io.ReadCloser, int64, error) {
	return s.cfg.Blobs.Open(ctx, sha)
}

// BlobInUse reports whether a Library entry or an unfinished deploy job
// other than exceptJob still needs a blob, so it is not dropped under it.
func BlobInUse(store *state.Store, sha, exceptJob string) bool {
	if inUse, err := store.LibraryBlobInUse(sha); err != nil || inUse {
		return true
	}
	if bundles, err := store.BlueprintBundles(); err != nil || slices.Contains(bundles, sha) {
		return true // the same bytes uploaded as a Blueprint bundle
	}
	pending, err := pendingDeploys(store)
	if err != nil {
		return true
	}
	for jobID, blob := range pending {
		if blob == sha && jobID != exceptJob {
			return true
		}
	}
	return false
}

// WantedBlobs are the ZIPs every server keeps: the Library's and those of
// deploys not finished yet (a new leader may have to run them).
func WantedBlobs(store *state.Store) ([]string, error) {
	out, err := store.LibraryBlobs()
	if err != nil {
		return nil, err
	}
	pending, err := pendingDeploys(store)
	for _, sha := range pending {
		out = append(out, sha)
	}
	return out, err
}

// pendingDeploys maps each unfinished deploy job to its ZIP.
func pendingDeploys(store *state.Store) (map[string]string, error) {
	js, _, err := store.UnfinishedJobs()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, j := range js {
		var p jobspec.DeployPayload
		if j.Type == jobspec.DeployPlugin && json.Unmarshal(j.Payload, &p) == nil && p.BlobSHA256 != "" {
			out[j.ID] = p.BlobSHA256
		}
	}
	return out, nil
}
