// Package blobs keeps content-addressed files (Library ZIPs, uploaded
// plugin ZIPs) on a server's disk: the replicated state names a blob by
// its SHA-256 and never carries its bytes.
package blobs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// ErrMissing is returned for a blob this server does not hold.
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
func (s *Store) Put(data []byte) (string, error) {
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	p, _ := s.path(sha)
	if _, err := os.Stat(p); err == nil {
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

// Get reads a blob and checks it still has its hash.
func (s *Store) Get(sha string) ([]byte, error) {
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
func (s *Store) Delete(sha string) error {
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
func (s *Store) Has(sha string) bool {
	p, err := s.path(sha)
	if err != nil {
		return false
	}
	_, err = os.Stat(p)
	return err == nil
}
