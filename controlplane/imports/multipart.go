package imports

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/importspec"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/objstore"
)

// PartSize is the part size clients upload in direct mode (the store
// takes up to 10,000 parts of an object).
const PartSize = 16 << 20

// maxParts is the S3 limit on parts of one object.
const maxParts = 10000

// partURLLife is how long a presigned part URL works.
const partURLLife = time.Hour

// maxObjects bounds the objects of one multipart import.
const maxObjects = 100

// ObjectStore is the S3-compatible store of direct uploads.
type ObjectStore interface {
	CreateMultipart(ctx context.Context, key string) (string, error)
	PresignPart(ctx context.Context, key, uploadID string, part int, expiry time.Duration) (string, error)
	Parts(ctx context.Context, key, uploadID string) ([]objstore.Part, error)
	CompleteMultipart(ctx context.Context, key, uploadID string, parts []objstore.Part) error
	AbortMultipart(ctx context.Context, key, uploadID string) error
	Open(ctx context.Context, key string) (io.ReadCloser, int64, error)
	Delete(ctx context.Context, key string) error
}

var _ ObjectStore = (*objstore.Store)(nil)

var keyRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func (s *Service) current(id string) (*state.Import, error) {
	cur, err := s.cfg.Store.Import(id)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		return nil, notFound()
	}
	return cur, nil
}

func (s *Service) put(ctx context.Context, next state.Import, from string) error {
	next.UpdatedAt = s.now()
	if _, err := s.cfg.Raft.Apply(ctx, fsm.PutImport{Import: next, IfStatus: []string{from}}); err != nil {
		if errors.Is(err, state.ErrStale) {
			return apierr.Conflict("the import changed meanwhile; read it again")
		}
		return err
	}
	return nil
}

// InitMultipart declares the objects of a direct upload. Without an
// object store it answers mode local: the client uses the chunked
// upload.
func (s *Service) InitMultipart(ctx context.Context, imp *state.Import, objects []importspec.ObjectIn) (*importspec.Init, error) {
	defer s.lock(imp.ID)()
	cur, err := s.current(imp.ID)
	if err != nil {
		return nil, err
	}
	if cur.Status != state.ImportAwaitingUpload {
		return nil, apierr.Invalid("", "the import is %s; multipart starts on an import awaiting its upload", cur.Status).
			With("status", cur.Status)
	}
	if cur.Multipart != nil {
		return &importspec.Init{Mode: cur.Multipart.Mode, UploadID: cur.Multipart.UploadID, PartSizeBytes: PartSize}, nil
	}
	if s.cfg.Objects == nil {
		return &importspec.Init{Mode: importspec.ModeLocal, PartSizeBytes: importspec.MaxChunk}, nil
	}
	if len(objects) == 0 || len(objects) > maxObjects {
		return nil, apierr.Invalid("objects", "objects must list 1 to %d objects", maxObjects)
	}
	var total int64
	seen := map[string]bool{}
	for i, o := range objects {
		field := fmt.Sprintf("objects[%d]", i)
		switch {
		case !keyRE.MatchString(o.Key):
			return nil, apierr.Invalid(field+".key", "a key is 1 to 128 letters, digits, dots, dashes and underscores")
		case seen[o.Key]:
			return nil, apierr.Invalid(field+".key", "key %s is listed twice", o.Key)
		case o.SizeBytes < 1 || o.SizeBytes > PartSize*maxParts:
			return nil, apierr.Invalid(field+".sizeBytes", "sizeBytes must be between 1 and %d", int64(PartSize*maxParts))
		}
		seen[o.Key] = true
		total += o.SizeBytes
	}
	if total != cur.SizeBytes {
		return nil, apierr.Invalid("objects", "the objects hold %d bytes; the import's sizeBytes is %d", total, cur.SizeBytes)
	}
	mp := &state.Multipart{UploadID: "mpu_" + ids.Random(10), Mode: importspec.ModeDirect}
	for _, o := range objects {
		key := "imports/" + cur.ID + "/" + o.Key
		up, err := s.cfg.Objects.CreateMultipart(ctx, key)
		if err != nil {
			s.abortObjects(ctx, &state.Import{Multipart: mp})
			return nil, apierr.Unavailable("the object store did not start the upload: %v", err)
		}
		mp.Objects = append(mp.Objects, state.MultipartObject{Key: o.Key, SizeBytes: o.SizeBytes, StoreKey: key, StoreUploadID: up})
	}
	next := *cur
	next.Status, next.Multipart = state.ImportUploading, mp
	if err := s.put(ctx, next, cur.Status); err != nil {
		s.abortObjects(ctx, &next)
		return nil, err
	}
	return &importspec.Init{Mode: importspec.ModeDirect, UploadID: mp.UploadID, PartSizeBytes: PartSize}, nil
}

// directObject is the named object of an import uploading directly.
func directObject(cur *state.Import, key string) (int, error) {
	if cur.Multipart == nil || cur.Multipart.Mode != importspec.ModeDirect {
		return 0, apierr.Invalid("", "this import has no multipart upload; call multipart/init first")
	}
	if cur.Status != state.ImportUploading {
		return 0, apierr.Invalid("", "the import is %s", cur.Status).With("status", cur.Status)
	}
	i := slices.IndexFunc(cur.Multipart.Objects, func(o state.MultipartObject) bool { return o.Key == key })
	if i < 0 {
		return 0, apierr.Invalid("key", "no object %q was declared at multipart/init", key)
	}
	return i, nil
}

// PartURLFor presigns the upload of one part.
func (s *Service) PartURLFor(ctx context.Context, imp *state.Import, key string, part int) (*importspec.PartURL, error) {
	cur, err := s.current(imp.ID)
	if err != nil {
		return nil, err
	}
	i, err := directObject(cur, key)
	if err != nil {
		return nil, err
	}
	o := cur.Multipart.Objects[i]
	if o.Completed {
		return nil, apierr.Invalid("key", "object %s is complete", key)
	}
	if last := int((o.SizeBytes + PartSize - 1) / PartSize); part < 1 || part > last {
		return nil, apierr.Invalid("partNumber", "object %s has parts 1 to %d of %d bytes", key, last, PartSize)
	}
	u, err := s.cfg.Objects.PresignPart(ctx, o.StoreKey, o.StoreUploadID, part, partURLLife)
	if err != nil {
		return nil, err
	}
	return &importspec.PartURL{URL: u, ExpiresAt: s.now().Add(partURLLife)}, nil
}

// CompleteObject joins an object's uploaded parts. The store's own list
// of parts is what counts; parts a client names must match it.
func (s *Service) CompleteObject(ctx context.Context, imp *state.Import, key string, claimed []importspec.PartIn) (*state.Import, error) {
	defer s.lock(imp.ID)()
	cur, err := s.current(imp.ID)
	if err != nil {
		return nil, err
	}
	i, err := directObject(cur, key)
	if err != nil {
		return nil, err
	}
	o := cur.Multipart.Objects[i]
	if o.Completed {
		return cur, nil
	}
	parts, err := s.cfg.Objects.Parts(ctx, o.StoreKey, o.StoreUploadID)
	if err != nil {
		return nil, apierr.Unavailable("the object store did not list the parts: %v", err)
	}
	var size int64
	for n, p := range parts {
		if p.Number != n+1 {
			return nil, apierr.Invalid("parts", "part %d of %s is missing", n+1, key)
		}
		if p.Number < len(parts) && p.Size != PartSize {
			return nil, apierr.Invalid("parts", "part %d of %s holds %d bytes; every part but the last holds %d", p.Number, key, p.Size, PartSize)
		}
		size += p.Size
	}
	if size != o.SizeBytes {
		return nil, apierr.Invalid("parts", "object %s has %d of its %d bytes uploaded", key, size, o.SizeBytes).
			With("receivedBytes", size)
	}
	for _, c := range claimed {
		if c.PartNumber < 1 || c.PartNumber > len(parts) || (c.ETag != "" && trimETag(c.ETag) != parts[c.PartNumber-1].ETag) {
			return nil, apierr.Invalid("parts", "part %d does not match what the store holds", c.PartNumber)
		}
	}
	if err := s.cfg.Objects.CompleteMultipart(ctx, o.StoreKey, o.StoreUploadID, parts); err != nil {
		return nil, apierr.Unavailable("the object store did not complete %s: %v", key, err)
	}
	next := *cur
	mp := *cur.Multipart
	mp.Objects = slices.Clone(mp.Objects)
	mp.Objects[i].Completed = true
	next.Multipart = &mp
	if err := s.put(ctx, next, cur.Status); err != nil {
		return nil, err
	}
	return &next, nil
}

func trimETag(e string) string {
	if len(e) >= 2 && e[0] == '"' && e[len(e)-1] == '"' {
		return e[1 : len(e)-1]
	}
	return e
}

// Finalize checks the manifest (every completed object once, each an
// archive or a SQL dump) and starts the restore, which reads the objects
// in the manifest's order as one archive.
func (s *Service) Finalize(ctx context.Context, c importspec.Caller, imp *state.Import, manifest []state.ManifestEntry) (*state.Import, string, error) {
	defer s.lock(imp.ID)()
	cur, err := s.current(imp.ID)
	if err != nil {
		return nil, "", err
	}
	if cur.Status == state.ImportRestoring || cur.Status == state.ImportReady {
		return cur, cur.JobID, nil
	}
	if cur.Multipart == nil || cur.Multipart.Mode != importspec.ModeDirect {
		return nil, "", apierr.Invalid("", "this import has no multipart upload; call multipart/init first, or finish a chunked upload with …/complete")
	}
	if cur.Status != state.ImportUploading {
		return nil, "", apierr.Invalid("", "the import is %s", cur.Status).With("status", cur.Status)
	}
	if len(manifest) != len(cur.Multipart.Objects) {
		return nil, "", apierr.Invalid("manifest", "the manifest must list each of the %d objects once", len(cur.Multipart.Objects))
	}
	seen := map[string]bool{}
	for i, e := range manifest {
		field := fmt.Sprintf("manifest.objects[%d]", i)
		j := slices.IndexFunc(cur.Multipart.Objects, func(o state.MultipartObject) bool { return o.Key == e.Key })
		switch {
		case j < 0:
			return nil, "", apierr.Invalid(field+".key", "no object %q was declared", e.Key)
		case seen[e.Key]:
			return nil, "", apierr.Invalid(field+".key", "object %s is listed twice", e.Key)
		case !cur.Multipart.Objects[j].Completed:
			return nil, "", apierr.Invalid(field+".key", "object %s is not complete: call multipart/complete-object first", e.Key)
		case e.Kind != importspec.KindArchive && e.Kind != importspec.KindSQL:
			return nil, "", apierr.Invalid(field+".kind", "kind must be archive or sql")
		}
		seen[e.Key] = true
	}
	next := *cur
	mp := *cur.Multipart
	mp.Manifest = slices.Clone(manifest)
	next.Multipart, next.ArtifactID = &mp, mp.UploadID
	return s.start(ctx, c, next)
}

// AbortMultipart fails an import uploading directly and removes what it
// uploaded.
func (s *Service) AbortMultipart(ctx context.Context, imp *state.Import) (*state.Import, error) {
	defer s.lock(imp.ID)()
	cur, err := s.current(imp.ID)
	if err != nil {
		return nil, err
	}
	if cur.Status != state.ImportAwaitingUpload && cur.Status != state.ImportUploading {
		return nil, apierr.Invalid("", "the import is %s; only an upload in progress can be aborted", cur.Status).
			With("status", cur.Status)
	}
	next := *cur
	next.Status, next.FailureReason = state.ImportFailed, "the multipart upload was aborted"
	if err := s.put(ctx, next, cur.Status); err != nil {
		return nil, err
	}
	s.discard(ctx, &next)
	return &next, nil
}

// abortObjects drops an import's uploads and objects in the store.
func (s *Service) abortObjects(ctx context.Context, imp *state.Import) {
	if imp.Multipart == nil || s.cfg.Objects == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, o := range imp.Multipart.Objects {
		if o.Completed {
			_ = s.cfg.Objects.Delete(ctx, o.StoreKey)
		} else {
			_ = s.cfg.Objects.AbortMultipart(ctx, o.StoreKey, o.StoreUploadID)
		}
	}
}

// Cleanup removes what a finished import no longer needs: its objects
// in the store (a local archive's blob is collected with the others).
func (s *Service) Cleanup(ctx context.Context, imp *state.Import) {
	s.abortObjects(ctx, imp)
	_ = os.Remove(s.partPath(imp.ID))
	s.mu.Lock()
	delete(s.progress, imp.ID)
	delete(s.hashes, imp.ID)
	s.mu.Unlock()
}

func newJob(imp state.Import, now time.Time) (state.Job, error) {
	return jobs.New(jobspec.ImportRestore, imp.WorkspaceID, imp.SiteID, jobspec.CreatePayload{ImportID: imp.ID}, now)
}
