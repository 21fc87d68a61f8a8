// Package imports takes live sites' archives into sandboxes: it keeps
// the Import rows, receives chunked uploads with byte offsets so a client
// resumes after any failure, seals an upload into a blob and starts the
// restore job, and reports restore progress. Uploads land in a directory
// on the leader (the API's writes all go there); a sealed archive is a
// blob the other servers copy, so a new leader carries the restore on.
package imports

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/importspec"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// DefaultMaxSize bounds an import's archive unless configured.
const DefaultMaxSize = 20 << 30

// Blobs seals finished uploads.
type Blobs interface {
	Adopt(ctx context.Context, path string) (string, int64, error)
	AdoptAs(ctx context.Context, path, sha string) error
}

// Sites makes the sandbox a new import is restored into.
type Sites interface {
	Create(ctx context.Context, in sitespec.Create) (*state.Site, string, error)
}

// Config wires the service.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	Sites Sites
	Blobs Blobs
	// Dir holds uploads in progress; with the local blob store it must
	// be on the store's filesystem (sealing links the file into the
	// store), with a bucket sealing uploads the file.
	Dir string
	// MaxSize bounds an import's archive; zero means DefaultMaxSize.
	MaxSize int64
	// Objects is the S3-compatible store multipart uploads go to
	// directly; nil means multipart answers mode local.
	Objects ObjectStore
	Now     func() time.Time
}

// Service keeps imports.
type Service struct {
	cfg Config

	mu sync.Mutex
	// locks holds the lock of each import someone holds or waits for
	// (none once nobody does), progress where each restore running on
	// this server is (dropped when it ends): neither outlives its work.
	locks    map[string]*importLock
	progress map[string]importspec.Progress
	// hashes are the running SHA-256 of uploads this server took from
	// their first byte, so sealing one need not read it again.
	hashes map[string]*runningHash
}

// importLock serializes the writes of one import; holders counts those
// holding or waiting for it, so the last one out removes it.
type importLock struct {
	mu      sync.Mutex
	holders int
}

// runningHash is an upload's hash up to offset.
type runningHash struct {
	h      hash.Hash
	offset int64
}

// New returns the service; it makes cfg.Dir.
func New(cfg Config) (*Service, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxSize == 0 {
		cfg.MaxSize = DefaultMaxSize
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("imports: %w", err)
	}
	return &Service{cfg: cfg, locks: map[string]*importLock{}, progress: map[string]importspec.Progress{}, hashes: map[string]*runningHash{}}, nil
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

func notFound() error { return apierr.NotFound(apierr.CodeImportNotFound, "import") }

// normalSourceURL checks a source URL: http(s), a host, no credentials,
// no query or fragment; its trailing slash goes.
func normalSourceURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case raw == "":
		return "", apierr.Invalid("sourceUrl", "sourceUrl is required: the live site's address (its WordPress home URL)")
	case len(raw) > 2048 || err != nil:
		return "", apierr.Invalid("sourceUrl", "sourceUrl is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", apierr.Invalid("sourceUrl", "sourceUrl must be an http or https URL")
	case u.Host == "" || u.Hostname() == "":
		return "", apierr.Invalid("sourceUrl", "sourceUrl has no host")
	case u.User != nil:
		return "", apierr.Invalid("sourceUrl", "sourceUrl must not carry credentials")
	case u.RawQuery != "" || u.Fragment != "":
		return "", apierr.Invalid("sourceUrl", "sourceUrl must not have a query or fragment")
	}
	u.Host = strings.ToLower(u.Host)
	return strings.TrimRight(u.String(), "/"), nil
}

// Create adds an import awaiting its upload. A siteId names a ready
// site of the workspace to restore into in place; without one the
// restore makes a new sandbox (the plan's site quota is checked when the
// upload is complete, and here already so nobody uploads for nothing).
func (s *Service) Create(ctx context.Context, c importspec.Caller, in importspec.CreateInput) (*state.Import, error) {
	src, err := normalSourceURL(in.SourceURL)
	if err != nil {
		return nil, err
	}
	switch {
	case in.SizeBytes < 1:
		return nil, apierr.Invalid("sizeBytes", "sizeBytes must be at least 1: the archive's size in bytes")
	case in.SizeBytes > s.cfg.MaxSize:
		return nil, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge,
			"an import's archive may hold at most %d bytes", s.cfg.MaxSize).With("maxBytes", s.cfg.MaxSize)
	}
	kind := in.SourceKind
	if kind == "" {
		kind = state.ImportArchive
	}
	if kind != state.ImportArchive && kind != state.ImportRemotePlugin {
		return nil, apierr.Invalid("sourceKind", "sourceKind must be archive or remote_plugin")
	}
	now := s.now()
	imp := state.Import{ID: ids.New(ids.Import), UserID: c.Workspace.OwnerID, WorkspaceID: c.Workspace.ID, CreatedByUserID: c.By.ID,
		SourceKind: kind, SourceURL: src, SizeBytes: in.SizeBytes, Status: state.ImportAwaitingUpload, NewSite: in.SiteID == "",
		ClientID: c.Client, CreatedAt: now, UpdatedAt: now}
	if in.SiteID != "" {
		site, err := s.cfg.Store.Site(in.SiteID)
		if err != nil {
			return nil, err
		}
		if site == nil || site.WorkspaceID != c.Workspace.ID {
			return nil, apierr.NotFound(apierr.CodeSiteNotFound, "site")
		}
		if mine, err := s.madeBy(site.ID, c.Client); err != nil {
			return nil, err
		} else if !mine {
			return nil, apierr.NotFound(apierr.CodeSiteNotFound, "site").
				With("reason", "a connector's token imports into new sandboxes, or into sites its own imports made")
		}
		if site.Status != state.SiteReady || site.Move != nil {
			return nil, apierr.Invalid("siteId", "the site is %s; an import goes into a ready site", site.Status).With("status", site.Status)
		}
		imp.SiteID = site.ID
	}
	if _, err := commit.Apply(ctx, s.cfg.Raft, in.Answer, fsm.CreateImport{Import: imp}, imp); err != nil {
		return nil, err
	}
	return &imp, nil
}

// madeBy reports whether a connector client's own import made the site
// (always true for a personal caller, client "").
func (s *Service) madeBy(siteID, client string) (bool, error) {
	if client == "" {
		return true, nil
	}
	into, err := s.cfg.Store.ImportsInto(siteID)
	if err != nil {
		return false, err
	}
	for _, imp := range into {
		if imp.NewSite && imp.ClientID == client {
			return true, nil
		}
	}
	return false, nil
}

// In returns an import of the caller's workspace that the caller sees,
// or import_not_found.
func (s *Service) In(c importspec.Caller, id string) (*state.Import, error) {
	imp, err := s.cfg.Store.Import(id)
	if err != nil {
		return nil, err
	}
	if imp == nil || imp.WorkspaceID != c.Workspace.ID || !sees(c, imp) {
		return nil, notFound()
	}
	return imp, nil
}

// List returns the imports of the caller's workspace that the caller
// sees, newest first.
func (s *Service) List(c importspec.Caller) ([]*state.Import, error) {
	all, err := s.cfg.Store.ImportsOf(c.Workspace.ID)
	if err != nil || c.Client == "" {
		return all, err
	}
	out := all[:0]
	for _, imp := range all {
		if sees(c, imp) {
			out = append(out, imp)
		}
	}
	return out, nil
}

func (s *Service) lock(id string) func() {
	s.mu.Lock()
	l, ok := s.locks[id]
	if !ok {
		l = &importLock{}
		s.locks[id] = l
	}
	l.holders++
	s.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		if l.holders--; l.holders == 0 {
			delete(s.locks, id)
		}
		s.mu.Unlock()
	}
}

func (s *Service) partPath(id string) string { return filepath.Join(s.cfg.Dir, id+".part") }

// received is how many bytes of an import this server holds.
func (s *Service) received(id string) int64 {
	fi, err := os.Stat(s.partPath(id))
	if err != nil {
		return 0
	}
	return fi.Size()
}

func offsetMismatch(expected int64) error {
	return apierr.New(http.StatusConflict, apierr.CodeOffsetMismatch,
		"the upload is at byte %d; send the chunk that starts there", expected).With("expectedOffset", expected)
}

// Upload appends a chunk at offset. The offset must be exactly the bytes
// received so far (409 offset_mismatch with the expected offset
// otherwise); a chunk is written whole or not at all, so a client that
// lost an answer asks again and goes on from what the server says.
func (s *Service) Upload(ctx context.Context, imp *state.Import, offset int64, body io.Reader) (int64, error) {
	defer s.lock(imp.ID)()
	cur, err := s.cfg.Store.Import(imp.ID)
	if err != nil {
		return 0, err
	}
	if cur == nil {
		return 0, notFound()
	}
	if cur.Status != state.ImportAwaitingUpload && cur.Status != state.ImportUploading {
		return 0, apierr.Invalid("", "the import is %s; uploads go to an import awaiting its upload", cur.Status).With("status", cur.Status)
	}
	if cur.Multipart != nil && cur.Multipart.Mode == importspec.ModeDirect {
		return 0, apierr.Invalid("", "this import uploads its objects to the object store (multipart mode direct)")
	}
	have := s.received(cur.ID)
	if offset != have {
		return 0, offsetMismatch(have)
	}
	room := cur.SizeBytes - have
	f, err := os.OpenFile(s.partPath(cur.ID), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("open upload: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		return 0, err
	}
	s.mu.Lock()
	rh := s.hashes[cur.ID]
	if rh == nil && have == 0 {
		rh = &runningHash{h: sha256.New()}
		s.hashes[cur.ID] = rh
	}
	s.mu.Unlock()
	var dst io.Writer = f
	var before []byte
	if rh != nil && rh.offset == have {
		if before, err = rh.h.(encoding.BinaryMarshaler).MarshalBinary(); err != nil {
			return 0, err
		}
		dst = io.MultiWriter(f, rh.h)
	} else {
		rh = nil
	}
	written, err := io.Copy(dst, io.LimitReader(body, room+1))
	undo := func() {
		_ = f.Truncate(have)
		if rh != nil {
			_ = rh.h.(encoding.BinaryUnmarshaler).UnmarshalBinary(before)
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		undo()
		return 0, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge,
			"a chunk may hold at most %d bytes", importspec.MaxChunk).With("maxChunkBytes", importspec.MaxChunk)
	case err != nil:
		undo()
		return 0, apierr.Invalid("", "the chunk was cut short (%v); nothing of it was kept: send it again from byte %d", err, have).
			With("expectedOffset", have)
	case written > room:
		undo()
		return 0, apierr.Invalid("", "the chunk goes past sizeBytes (%d); nothing of it was kept", cur.SizeBytes).
			With("expectedOffset", have)
	case written == 0:
		return have, nil
	}
	if err := f.Sync(); err != nil {
		undo()
		return 0, fmt.Errorf("sync upload: %w", err)
	}
	if rh != nil {
		rh.offset = have + written
	}
	if cur.Status == state.ImportAwaitingUpload {
		next := *cur
		next.Status, next.UpdatedAt = state.ImportUploading, s.now()
		if _, err := s.cfg.Raft.Apply(ctx, fsm.PutImport{Import: next, IfStatus: []string{state.ImportAwaitingUpload}}); err != nil &&
			!errors.Is(err, state.ErrStale) {
			undo()
			return 0, err
		}
	}
	return have + written, nil
}

// Received is how many bytes of an import the server holds.
func (s *Service) Received(imp *state.Import) int64 {
	switch imp.Status {
	case state.ImportAwaitingUpload, state.ImportUploading:
		return s.received(imp.ID)
	}
	return imp.SizeBytes
}

// Complete seals a fully uploaded archive and starts its restore. A
// second call on an import already restoring (or done) answers it as it
// is, so a client that lost the first answer can ask again.
func (s *Service) Complete(ctx context.Context, c importspec.Caller, imp *state.Import) (*state.Import, string, error) {
	defer s.lock(imp.ID)()
	cur, err := s.cfg.Store.Import(imp.ID)
	if err != nil {
		return nil, "", err
	}
	if cur == nil {
		return nil, "", notFound()
	}
	switch cur.Status {
	case state.ImportRestoring, state.ImportReady:
		return cur, cur.JobID, nil
	case state.ImportAwaitingUpload, state.ImportUploading:
	default:
		return nil, "", apierr.Invalid("", "the import is %s", cur.Status).With("status", cur.Status)
	}
	if cur.Multipart != nil && cur.Multipart.Mode == importspec.ModeDirect {
		return nil, "", apierr.Invalid("", "this import's objects went to the object store: finish it with multipart/finalize")
	}
	if have := s.received(cur.ID); have != cur.SizeBytes {
		return nil, "", apierr.Invalid("", "%d of %d bytes are uploaded; send the rest from byte %d first", have, cur.SizeBytes, have).
			With("receivedBytes", have).With("sizeBytes", cur.SizeBytes).With("expectedOffset", have)
	}
	sha, err := s.seal(ctx, cur)
	if err != nil {
		return nil, "", fmt.Errorf("seal import %s: %w", cur.ID, err)
	}
	next := *cur
	next.ArtifactID = sha
	out, jobID, err := s.start(ctx, c, next)
	if err != nil {
		return nil, "", err
	}
	_ = os.Remove(s.partPath(cur.ID)) // the blob keeps the bytes
	return out, jobID, nil
}

// seal makes an uploaded archive a blob, with the hash taken while it
// came in when this server took all of it.
func (s *Service) seal(ctx context.Context, imp *state.Import) (string, error) {
	s.mu.Lock()
	rh := s.hashes[imp.ID]
	delete(s.hashes, imp.ID)
	s.mu.Unlock()
	if rh != nil && rh.offset == imp.SizeBytes {
		sha := hex.EncodeToString(rh.h.Sum(nil))
		return sha, s.cfg.Blobs.AdoptAs(ctx, s.partPath(imp.ID), sha)
	}
	sha, _, err := s.cfg.Blobs.Adopt(ctx, s.partPath(imp.ID))
	return sha, err
}

// start queues an import's restore (into its site, or a new one) with
// the import moving to restoring in the same entry.
func (s *Service) start(ctx context.Context, c importspec.Caller, imp state.Import) (*state.Import, string, error) {
	ifStatus := []string{imp.Status}
	imp.Status, imp.UpdatedAt, imp.FailureReason = state.ImportRestoring, s.now(), ""
	if imp.NewSite {
		site, jobID, err := s.cfg.Sites.Create(ctx, sitespec.Create{Workspace: c.Workspace, By: c.By, Name: siteName(imp.SourceURL),
			Import: &imp, ImportIfStatus: ifStatus})
		if err != nil {
			return nil, "", err
		}
		imp.SiteID, imp.JobID = site.ID, jobID
		return &imp, jobID, nil
	}
	site, err := s.cfg.Store.Site(imp.SiteID)
	if err != nil {
		return nil, "", err
	}
	if site == nil {
		return nil, "", apierr.Invalid("", "the import's site was deleted; start a new import")
	}
	if site.Status != state.SiteReady || site.Move != nil {
		return nil, "", apierr.Invalid("", "the import's site is %s; it must be ready", site.Status).With("status", site.Status)
	}
	job, err := newJob(imp, s.now())
	if err != nil {
		return nil, "", err
	}
	imp.JobID = job.ID
	if _, err := s.cfg.Raft.Apply(ctx, fsm.StartImport{Import: imp, IfStatus: ifStatus, Job: job}); err != nil {
		if errors.Is(err, state.ErrStale) {
			return nil, "", apierr.Conflict("the import changed meanwhile (cancelled?); read it again")
		}
		return nil, "", err
	}
	return &imp, job.ID, nil
}

// siteName is the new sandbox's name: the source's host and path.
func siteName(src string) string {
	u, err := url.Parse(src)
	if err != nil {
		return "Imported site"
	}
	name := "Import of " + u.Host + strings.TrimRight(u.Path, "/")
	if len(name) > 100 {
		name = name[:100]
	}
	return name
}

// Cancel stops an unfinished import; its history stays. An upload's
// bytes go at once; a restore under way stops at its next step and
// leaves the site as it was.
func (s *Service) Cancel(ctx context.Context, imp *state.Import) (*state.Import, error) {
	defer s.lock(imp.ID)()
	cur, err := s.cfg.Store.Import(imp.ID)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		return nil, notFound()
	}
	if !cur.Unfinished() {
		return nil, apierr.Conflict("the import is %s already; DELETE with ?action=delete removes its row", cur.Status).
			With("status", cur.Status)
	}
	next := *cur
	next.Status, next.UpdatedAt = state.ImportCancelled, s.now()
	if _, err := s.cfg.Raft.Apply(ctx, fsm.PutImport{Import: next, IfStatus: []string{cur.Status}}); err != nil {
		if errors.Is(err, state.ErrStale) {
			return nil, apierr.Conflict("the import changed meanwhile; read it again")
		}
		return nil, err
	}
	s.discard(ctx, &next)
	return &next, nil
}

// Delete removes an import's row (cancelling it first if unfinished);
// its sandbox, if one was made, stays.
func (s *Service) Delete(ctx context.Context, imp *state.Import) error {
	if imp.Unfinished() {
		if _, err := s.Cancel(ctx, imp); err != nil {
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Code != apierr.CodeConflict {
				return err
			}
		}
	}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.DeleteImport{ID: imp.ID}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return notFound()
		}
		return err
	}
	s.mu.Lock()
	delete(s.progress, imp.ID)
	delete(s.hashes, imp.ID)
	s.mu.Unlock()
	return nil
}

// discard removes what an ended import left on this server and in the
// object store.
func (s *Service) discard(ctx context.Context, imp *state.Import) {
	_ = os.Remove(s.partPath(imp.ID))
	s.mu.Lock()
	delete(s.hashes, imp.ID)
	s.mu.Unlock()
	if imp.Multipart != nil && s.cfg.Objects != nil {
		s.abortObjects(ctx, imp)
	}
}

// SetProgress records where a restore is (the job runner calls it).
func (s *Service) SetProgress(id string, p importspec.Progress) {
	s.mu.Lock()
	s.progress[id] = p
	s.mu.Unlock()
}

// Progress records where a restore is, as the job runner sees it.
func (s *Service) Progress(id, phase string, done, total int64) {
	pct := 0
	if total > 0 {
		pct = int(min(100, done*100/total))
	}
	s.SetProgress(id, importspec.Progress{Phase: phase, Percent: pct, BytesDone: done, BytesTotal: total})
}

// OpenObject reads an uploaded object from the object store.
func (s *Service) OpenObject(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	if s.cfg.Objects == nil {
		return nil, 0, errors.New("no object store is configured on this server")
	}
	return s.cfg.Objects.Open(ctx, key)
}

// ProgressOf says where an import is.
func (s *Service) ProgressOf(imp *state.Import) importspec.Progress {
	pct := func(done, total int64) int {
		if total <= 0 {
			return 0
		}
		return int(min(100, done*100/total))
	}
	switch imp.Status {
	case state.ImportAwaitingUpload, state.ImportUploading:
		done := s.received(imp.ID)
		if imp.Multipart != nil && imp.Multipart.Mode == importspec.ModeDirect {
			done = 0
			for _, o := range imp.Multipart.Objects {
				if o.Completed {
					done += o.SizeBytes
				}
			}
		}
		return importspec.Progress{Phase: "uploading", Percent: pct(done, imp.SizeBytes), BytesDone: done, BytesTotal: imp.SizeBytes}
	case state.ImportRestoring:
		s.mu.Lock()
		p, ok := s.progress[imp.ID]
		s.mu.Unlock()
		if !ok {
			return importspec.Progress{Phase: "restoring", BytesTotal: imp.SizeBytes}
		}
		return p
	}
	// Ended: what this server remembered of its restore is not needed
	// (its runner drops it too, but a restore another leader ended, or
	// one cut short, leaves it here).
	s.mu.Lock()
	delete(s.progress, imp.ID)
	s.mu.Unlock()
	switch imp.Status {
	case state.ImportReady, state.ImportSiteDeleted:
		return importspec.Progress{Phase: "done", Percent: 100, BytesDone: imp.SizeBytes, BytesTotal: imp.SizeBytes}
	}
	return importspec.Progress{Phase: imp.Status, BytesTotal: imp.SizeBytes}
}

// sees reports whether c may see imp (imp is in c's workspace).
func sees(c importspec.Caller, imp *state.Import) bool {
	return c.Client == "" || imp.ClientID == c.Client
}
