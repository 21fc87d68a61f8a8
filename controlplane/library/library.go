// Package library is the workspace Library: plugin and theme ZIPs kept
// once and deployed to any site, from uploads or a code host's releases,
// with sealed license keys. It owns the ZIPs' life in the blob store
// (stored and copied to a peer before a record names them, dropped when
// nothing needs them) and knows which ZIPs every server keeps.
package library

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/libraryspec"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/safefetch"
	"github.com/sandboxd/sandboxd/internal/seal"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// Blobs is where the Library keeps its ZIPs: a server's blob directory
// or the bucket every server shares (blobs.Store, blobs.S3Store).
type Blobs interface {
	Put(ctx context.Context, data []byte) (string, error)
	Open(ctx context.Context, sha string) (io.ReadCloser, int64, error)
	Delete(ctx context.Context, sha string) error
}

// Config wires the Library to the store, Raft and the blob store.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	Plans plans.Config
	Blobs Blobs
	// Sealer seals license keys, bound to their entry's id.
	Sealer *seal.Sealer
	// Fetch downloads release assets, refusing private addresses.
	Fetch *safefetch.Client
	// GitHubAPI is the code host's releases API base URL; GitHubHTTP the
	// client that calls it (the operator configured it, so it is trusted).
	GitHubAPI  string
	GitHubHTTP *http.Client
	// Replicate copies a ZIP to a peer server before a record names it;
	// nil on a single server.
	Replicate func(ctx context.Context, sha string, data []byte) error
	Now       func() time.Time
	Logger    *slog.Logger
}

// Service adds, refreshes and removes Library entries and their ZIPs.
type Service struct {
	cfg Config
	log *slog.Logger
}

// New returns the Library service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.GitHubHTTP == nil {
		cfg.GitHubHTTP = &http.Client{Timeout: 30 * time.Second}
	}
	return &Service{cfg: cfg, log: cfg.Logger.With("component", "library")}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

func entryNotFound() *apierr.Error {
	return apierr.NotFound(libraryspec.CodeEntryNotFound, "library entry")
}

// CheckLicense refuses a license key that is empty, too long or not one
// line; field names it in the error.
func CheckLicense(field, key string) error {
	switch {
	case strings.TrimSpace(key) == "":
		return apierr.Invalid(field, "%s must not be empty", field)
	case len(key) > libraryspec.MaxLicenseKey:
		return apierr.Invalid(field, "%s is over %d bytes", field, libraryspec.MaxLicenseKey)
	case strings.ContainsAny(key, "\r\n\x00"):
		return apierr.Invalid(field, "%s must be one line", field)
	}
	return nil
}

// Inspect checks a ZIP the way every path into a site does; field names
// the request part it came from.
func Inspect(field string, data []byte) (*wpzip.Info, error) {
	if len(data) == 0 {
		return nil, apierr.Invalid(field, "the ZIP is empty")
	}
	info, err := wpzip.Inspect(data, wpzip.DefaultLimits)
	if err != nil {
		return nil, apierr.Invalid(field, "%s", strings.TrimPrefix(err.Error(), wpzip.ErrInvalid.Error()+": "))
	}
	return info, nil
}

var slugRE = regexp.MustCompile(`[^a-z0-9]+`)

// slugFor derives a slug from the entry's name (or its directory).
func slugFor(name, dir string) string {
	s := strings.Trim(slugRE.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if s == "" {
		s = strings.Trim(slugRE.ReplaceAllString(strings.ToLower(dir), "-"), "-")
	}
	if len(s) > 60 {
		s = strings.Trim(s[:60], "-")
	}
	if s == "" {
		s = "plugin" // ids hold an underscore, slugs never do: the two cannot clash
	}
	return s
}

// Upload adds an uploaded ZIP to the workspace's Library under the first
// free slug made from its WordPress header.
func (s *Service) Upload(ctx context.Context, ans *writes.Answer[state.LibraryEntry], ws *state.Workspace, filename string, zip []byte, licenseKey *string) (*state.LibraryEntry, error) {
	if licenseKey != nil {
		if err := CheckLicense("licenseKey", *licenseKey); err != nil {
			return nil, err
		}
	}
	info, err := Inspect("file", zip)
	if err != nil {
		return nil, err
	}
	filename = path.Base(strings.ReplaceAll(filename, `\`, "/"))
	if filename == "." || filename == "/" || filename == "" {
		filename = info.Dir + ".zip"
	}
	return s.add(ctx, ans, ws, state.LibraryEntry{Source: libraryspec.SourceUpload, Filename: filename}, zip, info, licenseKey)
}

// AddRelease adds a repository entry: the latest release's ZIP asset,
// with its tag as the version.
func (s *Service) AddRelease(ctx context.Context, ans *writes.Answer[state.LibraryEntry], ws *state.Workspace, repository string, licenseKey *string) (*state.LibraryEntry, error) {
	repo, err := ParseRepository(repository)
	if err != nil {
		return nil, apierr.Invalid("repository", "%v", err)
	}
	if licenseKey != nil {
		if err := CheckLicense("licenseKey", *licenseKey); err != nil {
			return nil, err
		}
	}
	rel, zip, err := s.latestRelease(ctx, repo)
	if err != nil {
		return nil, err
	}
	info, err := Inspect("repository", zip)
	if err != nil {
		return nil, err
	}
	return s.add(ctx, ans, ws, state.LibraryEntry{Source: libraryspec.SourceGitHub, GithubRepository: repo, Filename: rel.asset, Version: rel.tag},
		zip, info, licenseKey)
}

// add stores the ZIP and puts the entry under the first free slug.
func (s *Service) add(ctx context.Context, ans *writes.Answer[state.LibraryEntry], ws *state.Workspace, e state.LibraryEntry, zip []byte, info *wpzip.Info, licenseKey *string) (*state.LibraryEntry, error) {
	plan, err := s.cfg.Store.PlanOf(ws)
	if err != nil {
		return nil, err
	}
	quota, err := s.cfg.Plans.Quota(plan, plans.LibraryEntries)
	if err != nil {
		return nil, err
	}
	sha, err := s.StoreZip(ctx, zip)
	if err != nil {
		return nil, err
	}
	now := s.now()
	e.ID, e.WorkspaceID = ids.New("lib"), ws.ID
	e.Kind, e.Name, e.SizeBytes, e.BlobSHA256, e.CreatedAt, e.UpdatedAt = info.Kind, info.Name, int64(len(zip)), sha, now, now
	if licenseKey != nil {
		e.LicenseSealed, e.LicenseHint = s.cfg.Sealer.Seal(*licenseKey, e.ID), seal.Hint(*licenseKey)
	}
	base := slugFor(info.Name, info.Dir)
	for i := 1; i <= 50; i++ {
		e.Slug = base
		if i > 1 {
			e.Slug = fmt.Sprintf("%s-%d", base, i)
		}
		if dup, err := s.cfg.Store.LibraryEntry(e.WorkspaceID, e.Slug); err != nil {
			s.Drop(ctx, sha)
			return nil, err
		} else if dup != nil {
			continue
		}
		_, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.PutLibraryEntry{Entry: e, Quota: quota}, e)
		if errors.Is(err, state.ErrConflict) {
			continue // another upload took the slug meanwhile
		}
		if err != nil {
			s.Drop(ctx, sha) // kept only if an entry (a replayed twin's) names it
			return nil, err
		}
		return &e, nil
	}
	s.Drop(ctx, sha)
	return nil, apierr.Conflict("no free slug for %q in this workspace", base)
}

// Refresh fetches a repository entry's latest release and replaces the
// ZIP when the tag changed; updated says whether it did.
func (s *Service) Refresh(ctx context.Context, e *state.LibraryEntry) (next *state.LibraryEntry, updated bool, err error) {
	if e.Source != libraryspec.SourceGitHub {
		return nil, false, apierr.Invalid("", "only repository entries can be refreshed; upload a new ZIP instead")
	}
	rel, zip, err := s.latestRelease(ctx, e.GithubRepository)
	if err != nil {
		return nil, false, err
	}
	if rel.tag == e.Version {
		return e, false, nil
	}
	info, err := Inspect("repository", zip)
	if err != nil {
		return nil, false, err
	}
	sha, err := s.StoreZip(ctx, zip)
	if err != nil {
		return nil, false, err
	}
	n := *e
	n.Version, n.Filename, n.SizeBytes, n.BlobSHA256, n.Kind, n.Name, n.UpdatedAt =
		rel.tag, rel.asset, int64(len(zip)), sha, info.Kind, info.Name, s.now()
	if _, err := s.cfg.Raft.Apply(ctx, fsm.PutLibraryEntry{Entry: n, Replace: true}); err != nil {
		s.Drop(ctx, sha)
		if errors.Is(err, state.ErrNotFound) {
			return nil, false, entryNotFound()
		}
		return nil, false, err
	}
	s.Drop(ctx, e.BlobSHA256)
	return &n, true, nil
}

// Delete removes an entry and, unless a deploy still needs it, its ZIP.
func (s *Service) Delete(ctx context.Context, e *state.LibraryEntry) error {
	if _, err := s.cfg.Raft.Apply(ctx, fsm.DeleteLibraryEntry{ID: e.ID}); err != nil {
		return err
	}
	s.Drop(ctx, e.BlobSHA256)
	return nil
}

// SetLicense stores an entry's license key sealed; only its hint is
// ever shown again.
func (s *Service) SetLicense(ctx context.Context, e *state.LibraryEntry, key string) (*state.LibraryEntry, error) {
	if err := CheckLicense("licenseKey", key); err != nil {
		return nil, err
	}
	return s.setLicense(ctx, fsm.SetLibraryLicense{ID: e.ID, Sealed: s.cfg.Sealer.Seal(key, e.ID), Hint: seal.Hint(key), At: s.now()})
}

// ClearLicense removes an entry's license key.
func (s *Service) ClearLicense(ctx context.Context, e *state.LibraryEntry) (*state.LibraryEntry, error) {
	return s.setLicense(ctx, fsm.SetLibraryLicense{ID: e.ID, At: s.now()})
}

func (s *Service) setLicense(ctx context.Context, c fsm.SetLibraryLicense) (*state.LibraryEntry, error) {
	res, err := s.cfg.Raft.Apply(ctx, c)
	if errors.Is(err, state.ErrNotFound) {
		return nil, entryNotFound()
	}
	if err != nil {
		return nil, err
	}
	return res.(*state.LibraryEntry), nil
}

// ErrNoLicense reports an entry without a license key.
var ErrNoLicense = errors.New("no license key is stored")

// ReadLicense opens an entry's key and stamps the read; the key is
// returned only once the stamp is committed, so no read goes unrecorded.
// by names the account reading, for the log.
func (s *Service) ReadLicense(ctx context.Context, e *state.LibraryEntry, by string) (string, error) {
	if e.LicenseSealed == nil {
		return "", fmt.Errorf("%w for %s", ErrNoLicense, e.Slug)
	}
	key, err := s.cfg.Sealer.Open(e.LicenseSealed, e.ID)
	if err != nil {
		s.log.Error("license key does not open", "library_id", e.ID, "err", err)
		return "", errors.New("the stored license key cannot be read; set it again")
	}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.MarkLicenseRead{ID: e.ID, At: s.now()}); err != nil {
		return "", fmt.Errorf("recording the read: %w", err)
	}
	s.log.Info("license key read", "library_id", e.ID, "workspace_id", e.WorkspaceID, "user_id", by)
	return key, nil
}
