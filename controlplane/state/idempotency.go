package state

import (
	"errors"
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// IdempotencyTTL is how long a key's first answer is kept and replayed.
const IdempotencyTTL = 24 * time.Hour

// ErrIdempotencyKeyReused refuses a key that was first used for another
// request: its first answer belongs to that request.
var ErrIdempotencyKeyReused = errors.New("idempotency key reused")

// Idempotency is the first answer to a request sent with an
// Idempotency-Key. It is written in the same transaction as the change
// the request made, so a retry either finds it or finds no change.
type Idempotency struct {
	// ID is Scope and Key joined: keys are per caller.
	ID string `json:"id"`
	// Scope is whose key it is: an account id, or "operator".
	Scope string `json:"scope"`
	Key   string `json:"key"`
	// Fingerprint hashes what makes a request the same one: method,
	// path and query, workspace and body.
	Fingerprint string `json:"fingerprint"`
	// Status and Body are the first answer; Body is sealed (answers can
	// carry a new token's secret).
	Status    int       `json:"status"`
	Body      []byte    `json:"body"`
	CreatedAt time.Time `json:"createdAt"`
}

// IdempotencyID is the row id of a caller's key.
func IdempotencyID(scope, key string) string { return scope + "\x00" + key }

// live reports whether a record still answers for its key at time at.
func (r *Idempotency) live(at time.Time) bool { return at.Before(r.CreatedAt.Add(IdempotencyTTL)) }

// Idempotency returns the live record of a caller's key at time at, or nil.
func (s *Store) Idempotency(scope, key string, at time.Time) (*Idempotency, error) {
	r, err := first[Idempotency](s.read(), tableIdempotency, "id", IdempotencyID(scope, key))
	if err != nil || r == nil || !r.live(at) {
		return nil, err
	}
	return r, nil
}

// IdempotencyHit looks up rec's key as of rec.CreatedAt: the live record
// when it was made by the same request, ErrIdempotencyKeyReused when by
// another, nil when the key is free (never used, or expired).
func (t *Tx) IdempotencyHit(rec Idempotency) (*Idempotency, error) {
	prior, err := first[Idempotency](t.tx, tableIdempotency, "id", IdempotencyID(rec.Scope, rec.Key))
	if err != nil || prior == nil || !prior.live(rec.CreatedAt) {
		return nil, err
	}
	if prior.Fingerprint != rec.Fingerprint {
		return nil, fmt.Errorf("%w: the key %q was used for another request", ErrIdempotencyKeyReused, rec.Key)
	}
	return prior, nil
}

// PutIdempotency records a key's first answer, replacing an expired one.
func (t *Tx) PutIdempotency(rec Idempotency) error {
	if rec.Scope == "" || rec.Key == "" || rec.Fingerprint == "" {
		return fmt.Errorf("%w: an idempotency record needs scope, key and fingerprint", ErrInvalid)
	}
	rec.ID = IdempotencyID(rec.Scope, rec.Key)
	return t.run(func(tx *memdb.Txn) error { return insert(tx, tableIdempotency, &rec) })
}

// PruneIdempotency drops the records that expired by time at; it returns
// how many it dropped.
func (t *Tx) PruneIdempotency(at time.Time) (int, error) {
	var n int
	err := t.run(func(tx *memdb.Txn) error {
		rows, err := all[Idempotency](tx, tableIdempotency, "id")
		if err != nil {
			return err
		}
		for _, r := range rows {
			if r.live(at) {
				continue
			}
			if err := remove(tx, tableIdempotency, r); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// IdempotencyCount is how many records are kept, live or not yet pruned.
func (s *Store) IdempotencyCount() (int, error) {
	rows, err := all[Idempotency](s.read(), tableIdempotency, "id")
	return len(rows), err
}
