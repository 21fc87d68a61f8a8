// Package blobs keeps content-addressed files (Library ZIPs, uploaded
// plugin ZIPs, template artifacts, import archives): the replicated state
// names a blob by its SHA-256 and never carries its bytes. They live on
// each server's disk (Store), copied between servers by a Syncer, or in
// one S3-compatible bucket every server shares (S3Store).
package blobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// ErrMissing is returned for a blob this server (or the shared bucket)
// does not hold, so callers can tell a missing blob from a failing store.
var ErrMissing = errors.New("blob not on this server")

// Store is a directory of blobs named by their SHA-256.
type Store struct{ dir string }

// Open returns the store in dir, creating it.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("blobs: %w", err)
	}
	return &Store{dir: dir}, nil
}

var shaRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Store) path(sha string) (string, error) {
	if !shaRE.MatchString(sha) {
		return "", fmt.Errorf("blobs: bad name %q", sha)
	}
	return filepath.Join(s.dir, sha[:2], sha), nil
}

// Put stores data durably and returns its SHA-256 (hex).
func (s *Store) Put(ctx context.Context, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	p, _ := s.path(sha)
	if _, err := os.Stat(p); err == nil {
		// Stored again: it is new to whoever stores it, so Sweep's grace
		// starts over.
		now := time.Now()
		if err := os.Chtimes(p, now, now); err != nil {
			return "", fmt.Errorf("blobs: touch %s: %w", sha, err)
		}
		return sha, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return sha, os.Rename(f.Name(), p)
}

// PutStream stores what r yields, at most max bytes, without holding it
// in memory, and returns its SHA-256 (hex) and size. More than max bytes
// is ErrTooLarge and stores nothing.
func (s *Store) PutStream(ctx context.Context, r io.Reader, max int64) (string, int64, error) {
	f, err := os.CreateTemp(s.dir, ".put-*")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(f.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, max+1))
	if err == nil && n > max {
		err = fmt.Errorf("%w: over %d bytes", ErrTooLarge, max)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, err
	}
	sha := hex.EncodeToString(h.Sum(nil))
	p, _ := s.path(sha)
	if _, err := os.Stat(p); err == nil {
		now := time.Now()
		return sha, n, os.Chtimes(p, now, now)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", 0, err
	}
	return sha, n, os.Rename(f.Name(), p)
}

// Adopt stores the file at path, which must be on the store's
// filesystem, as a blob without copying it: it is hashed and linked into
// place. The file itself stays where it is for its owner to remove.
func (s *Store) Adopt(ctx context.Context, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("blobs: adopt: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("blobs: adopt %s: %w", path, err)
	}
	sha := hex.EncodeToString(h.Sum(nil))
	p, _ := s.path(sha)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", 0, err
	}
	if err := os.Link(path, p); err != nil && !errors.Is(err, os.ErrExist) {
		return "", 0, fmt.Errorf("blobs: adopt %s: %w", path, err)
	}
	now := time.Now()
	return sha, n, os.Chtimes(p, now, now)
}

// AdoptAs is Adopt for a file whose SHA-256 its caller computed while
// writing it (an upload hashed chunk by chunk), so it is not read again.
func (s *Store) AdoptAs(ctx context.Context, path, sha string) error {
	p, err := s.path(sha)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	if err := os.Link(path, p); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("blobs: adopt %s: %w", path, err)
	}
	now := time.Now()
	return os.Chtimes(p, now, now)
}

// ErrTooLarge is a blob past the bound its writer set.
var ErrTooLarge = errors.New("blob too large")

// Open opens a stored blob for reading, with its size. It does not check
// the hash: whoever copies the blob does, at the end.
func (s *Store) Open(ctx context.Context, sha string) (io.ReadCloser, int64, error) {
	p, err := s.path(sha)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, fmt.Errorf("%w: %s", ErrMissing, sha)
	}
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// Get reads a blob and checks it still has its hash.
func (s *Store) Get(ctx context.Context, sha string) ([]byte, error) {
	p, err := s.path(sha)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrMissing, sha)
	}
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != sha {
		return nil, fmt.Errorf("blobs: %s is corrupt on disk", sha)
	}
	return data, nil
}

// Delete removes a blob; a missing one is fine.
func (s *Store) Delete(ctx context.Context, sha string) error {
	p, err := s.path(sha)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Has reports whether this server holds a blob.
func (s *Store) Has(ctx context.Context, sha string) bool {
	p, err := s.path(sha)
	if err != nil {
		return false
	}
	_, err = os.Stat(p)
	return err == nil
}

// Sweep deletes the blobs keep does not want that were stored before
// before, and any unfinished Put as old, and returns how many went. The grace that before leaves covers
// a blob stored but not yet named by the replicated state (an upload
// between its store and its commit).
func (s *Store) Sweep(ctx context.Context, keep func(sha string) bool, before time.Time) (int, error) {
	removed := 0
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		// A blob nobody keeps, or what a Put cut short left behind.
		orphan := (shaRE.MatchString(name) && !keep(name)) || strings.HasPrefix(name, ".put-")
		if d.IsDir() || !orphan {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !info.ModTime().Before(before) {
			return nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed++
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("blobs: sweep: %w", err)
	}
	return removed, nil
}
