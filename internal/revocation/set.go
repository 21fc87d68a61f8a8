package revocation

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/pki"
)

// maxVersion bounds the version string an agent keeps and sends back.
const maxVersion = 64

// maxFile bounds what Open reads: MaxEntries entries of a 64-character
// name with their times, as JSON, fit well within.
const maxFile = 2 << 20

// Set is an agent's copy of the cluster's revocations: replaced whole
// from the control plane's answers, kept on disk so that a restarted
// agent refuses revoked callers before it reaches the control plane
// again, and consulted by every handshake and request. Safe for
// concurrent use; Check never blocks on Replace.
type Set struct {
	path string
	now  func() time.Time
	cur  atomic.Pointer[snapshot]
	mu   sync.Mutex // serialises Replace and its file write
}

type snapshot struct {
	version string
	byID    map[string]Entry
}

// file is the Set's form on disk.
type file struct {
	Version string  `json:"version"`
	Entries []Entry `json:"entries"`
}

// New returns an empty set kept at path ("" keeps it in memory only);
// now is its clock (nil: time.Now).
func New(path string, now func() time.Time) *Set {
	if now == nil {
		now = time.Now
	}
	s := &Set{path: path, now: now}
	s.cur.Store(&snapshot{byID: map[string]Entry{}})
	return s
}

// Open returns the set kept at path, as last saved; a missing file is an
// empty set. A file that cannot be read is an error (the caller may go
// on with New: an empty set is what the next answer replaces).
func Open(path string, now func() time.Time) (*Set, error) {
	s := New(path, now)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	defer f.Close()
	var saved file
	dec := json.NewDecoder(io.LimitReader(f, maxFile))
	if err := dec.Decode(&saved); err != nil {
		return nil, fmt.Errorf("revocations: read %s: %w", path, err)
	}
	s.store(saved.Version, saved.Entries)
	return s, nil
}

// Version is the version of the list held ("" before any).
func (s *Set) Version() string { return s.cur.Load().version }

// Len is how many entries are held.
func (s *Set) Len() int { return len(s.cur.Load().byID) }

// Replace swaps in the control plane's list under its version and saves
// it. The list is normalized first: expired and malformed entries are
// dropped, and at most MaxEntries kept.
func (s *Set) Replace(version string, entries []Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.store(version, entries)
	if s.path == "" {
		return nil
	}
	b, err := json.Marshal(file{Version: s.Version(), Entries: kept})
	if err != nil {
		return fmt.Errorf("revocations: %w", err)
	}
	return writeAtomic(s.path, b)
}

func (s *Set) store(version string, entries []Entry) []Entry {
	if len(version) > maxVersion {
		version = "" // not one a server makes: ask for the list again
	}
	kept := Normalize(entries, s.now())
	byID := make(map[string]Entry, len(kept))
	for _, e := range kept {
		byID[e.ID] = e
	}
	s.cur.Store(&snapshot{version: version, byID: byID})
	return kept
}

// Check is an rpcauth.Checker: it refuses a certificate (nil: any
// certificate) of id when the list says the cluster no longer honours
// it.
func (s *Set) Check(id pki.Identity, cert *x509.Certificate) error {
	e, ok := s.cur.Load().byID[id.String()]
	if !ok || !e.Until.After(s.now()) {
		return nil
	}
	if err := e.Refuses(cert); err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	return nil
}

// Peer checks a peer's leaf certificate (already verified against the
// cluster CA) by the identity it names.
func (s *Set) Peer(leaf *x509.Certificate) error {
	id, err := pki.IdentityOf(leaf)
	if err != nil {
		return err
	}
	return s.Check(id, leaf)
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".revocations-*")
	if err != nil {
		return fmt.Errorf("revocations: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("revocations: write: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("revocations: sync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("revocations: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("revocations: %w", err)
	}
	return nil
}
