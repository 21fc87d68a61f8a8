// Package state is the control plane's replicated data: an indexed
// in-memory store (go-memdb) that the Raft FSM writes and every handler
// reads. Writes here are deterministic functions of their arguments; ids and
// times come in from the caller.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	memdb "github.com/hashicorp/go-memdb"
)

// Sentinel errors that writes return; the API layer maps them to codes.
var (
	ErrNotFound  = errors.New("not found")
	ErrConflict  = errors.New("conflict")
	ErrRoleInUse = errors.New("role in use")
	ErrInvalid   = errors.New("invalid")
	// ErrStale refuses a conditional write to a row that changed since
	// the writer read it; the writer reads again and retries.
	ErrStale = errors.New("changed meanwhile")
)

// Store is the in-memory indexed state. It is safe for concurrent use:
// readers see consistent snapshots, and a Restore swaps the whole database.
type Store struct {
	mu      sync.RWMutex
	db      *memdb.MemDB
	abandon chan struct{} // closed when db is replaced by a restore
}

// NewStore returns an empty store.
func NewStore() *Store {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		panic("state: invalid schema: " + err.Error())
	}
	return &Store{db: db, abandon: make(chan struct{})}
}

func (s *Store) current() (*memdb.MemDB, chan struct{}) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.db, s.abandon
}

func (s *Store) read() *memdb.Txn {
	db, _ := s.current()
	return db.Txn(false)
}

// write runs fn in one write transaction, committing only when fn succeeds,
// so a rejected command leaves nothing half-written.
func (s *Store) write(fn func(tx *memdb.Txn) error) error {
	db, _ := s.current()
	tx := db.Txn(true)
	defer tx.Abort()
	if err := fn(tx); err != nil {
		return err
	}
	tx.Commit()
	return nil
}

func first[T any](tx *memdb.Txn, table, index string, args ...any) (*T, error) {
	raw, err := tx.First(table, index, args...)
	if err != nil {
		return nil, fmt.Errorf("lookup %s by %s: %w", table, index, err)
	}
	if raw == nil {
		return nil, nil
	}
	return raw.(*T), nil
}

func all[T any](tx *memdb.Txn, table, index string, args ...any) ([]*T, error) {
	it, err := tx.Get(table, index, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s by %s: %w", table, index, err)
	}
	var out []*T
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*T))
	}
	return out, nil
}

func insert(tx *memdb.Txn, table string, obj any) error {
	if err := tx.Insert(table, obj); err != nil {
		return fmt.Errorf("insert into %s: %w", table, err)
	}
	return nil
}

func remove(tx *memdb.Txn, table string, obj any) error {
	if err := tx.Delete(table, obj); err != nil {
		return fmt.Errorf("delete from %s: %w", table, err)
	}
	return nil
}

// snapshotRow is one line of a persisted snapshot.
type snapshotRow struct {
	Table string          `json:"t"`
	Row   json.RawMessage `json:"r"`
}

// snapshotHeader opens every persisted snapshot so a future format change
// can be detected instead of misread.
type snapshotHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

const snapshotFormat = "sandboxd-state"

// Snapshot is a point-in-time read view that can be written out later.
type Snapshot struct{ tx *memdb.Txn }

// Snapshot captures the current state without blocking writers.
func (s *Store) Snapshot() *Snapshot { return &Snapshot{tx: s.read()} }

// WriteTo streams the snapshot as JSON lines.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	enc := json.NewEncoder(cw)
	if err := enc.Encode(snapshotHeader{Format: snapshotFormat, Version: 1}); err != nil {
		return cw.n, fmt.Errorf("write snapshot header: %w", err)
	}
	for _, table := range tables {
		it, err := sn.tx.Get(table, "id")
		if err != nil {
			return cw.n, fmt.Errorf("snapshot %s: %w", table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			b, err := json.Marshal(raw)
			if err != nil {
				return cw.n, fmt.Errorf("encode %s row: %w", table, err)
			}
			if err := enc.Encode(snapshotRow{Table: table, Row: b}); err != nil {
				return cw.n, fmt.Errorf("write %s row: %w", table, err)
			}
		}
	}
	return cw.n, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func newRow(table string) (any, error) {
	switch table {
	case tableAccounts:
		return new(Account), nil
	case tableWorkspaces:
		return new(Workspace), nil
	case tableMembers:
		return new(Member), nil
	case tableRoles:
		return new(Role), nil
	case tableTokens:
		return new(Token), nil
	case tableInvitations:
		return new(Invitation), nil
	case tableJobs:
		return new(Job), nil
	case tableServers:
		return new(Server), nil
	case tableOutbox:
		return new(Mail), nil
	case tableSites:
		return new(Site), nil
	case tableNodes:
		return new(Node), nil
	case tableLibrary:
		return new(LibraryEntry), nil
	case tableIdempotency:
		return new(Idempotency), nil
	case tableTemplates:
		return new(Template), nil
	case tableLeads:
		return new(Lead), nil
	case tableDemos:
		return new(Demo), nil
	case tableWebhooks:
		return new(Webhook), nil
	case tableDeliveries:
		return new(Delivery), nil
	case tableBlueprints:
		return new(Blueprint), nil
	case tableRuns:
		return new(BlueprintRun), nil
	case tableImports:
		return new(Import), nil
	case tableOAuthClients:
		return new(OAuthClient), nil
	case tableOAuthCodes:
		return new(OAuthCode), nil
	case tableDomains:
		return new(Domain), nil
	case tableCertData:
		return new(CertData), nil
	case tableCertLocks:
		return new(CertLock), nil
	case tableCertOrders:
		return new(CertOrder), nil
	case tableSSHKeys:
		return new(SSHKey), nil
	case tableRepos:
		return new(Repository), nil
	case tableCheckpoints:
		return new(Checkpoint), nil
	case tableClusterCA:
		return new(ClusterCA), nil
	case tableClusterMembers:
		return new(ClusterMember), nil
	case tableJoinTokens:
		return new(JoinToken), nil
	case tableOperatorTokens:
		return new(OperatorToken), nil
	case tableSnapshots:
		return new(SiteSnapshot), nil
	case tableTombstones:
		return new(Tombstone), nil
	}
	return nil, fmt.Errorf("unknown table %q", table)
}

// Restore replaces the whole state with a snapshot written by WriteTo.
// On error the current state is kept.
func (s *Store) Restore(r io.Reader) error {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return fmt.Errorf("restore: new db: %w", err)
	}
	dec := json.NewDecoder(r)
	var hdr snapshotHeader
	if err := dec.Decode(&hdr); err != nil {
		return fmt.Errorf("restore: read header: %w", err)
	}
	if hdr.Format != snapshotFormat || hdr.Version != 1 {
		return fmt.Errorf("restore: unsupported snapshot %q version %d", hdr.Format, hdr.Version)
	}
	tx := db.Txn(true)
	defer tx.Abort()
	for {
		var row snapshotRow
		if err := dec.Decode(&row); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("restore: read row: %w", err)
		}
		obj, err := newRow(row.Table)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		if err := json.Unmarshal(row.Row, obj); err != nil {
			return fmt.Errorf("restore: decode %s row: %w", row.Table, err)
		}
		if err := insert(tx, row.Table, obj); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	tx.Commit()
	s.mu.Lock()
	old := s.abandon
	s.db, s.abandon = db, make(chan struct{})
	s.mu.Unlock()
	close(old)
	return nil
}

func normEmail(e string) string { return strings.ToLower(strings.TrimSpace(e)) }
