package state

import (
	"fmt"
	"strings"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// CertData is one entry of the storage every edge shares for its TLS
// certificates (certmagic's keys: certificates, their private keys, ACME
// accounts, challenge tokens). Value is sealed by the control plane
// before it enters the log: private keys are never in the clear there.
type CertData struct {
	Key      string    `json:"key"`
	Value    []byte    `json:"value"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// CertLock is a lease on a named certificate operation (an order, a
// renewal) shared by every edge, so only one of them orders a name.
type CertLock struct {
	Name    string    `json:"name"`
	Owner   string    `json:"owner"`
	Expires time.Time `json:"expires"`
}

// MaxCertData bounds the entries of the shared certificate storage.
const MaxCertData = 100_000

// CertData returns the entry at key, or nil.
func (s *Store) CertData(key string) (*CertData, error) {
	return first[CertData](s.read(), tableCertData, "id", key)
}

// CertDataPrefix lists the entries whose keys start with prefix, in key
// order.
func (s *Store) CertDataPrefix(prefix string) ([]*CertData, error) {
	return all[CertData](s.read(), tableCertData, "id_prefix", prefix)
}

// PutCertData stores value at key, replacing what was there.
func (t *Tx) PutCertData(d CertData) error {
	return t.run(func(tx *memdb.Txn) error {
		if d.Key == "" {
			return fmt.Errorf("%w: empty key", ErrInvalid)
		}
		old, err := first[CertData](tx, tableCertData, "id", d.Key)
		if err != nil {
			return err
		}
		if old == nil {
			if n, err := count(tx, tableCertData); err != nil {
				return err
			} else if n >= MaxCertData {
				return fmt.Errorf("%w: the certificate storage is full (%d entries)", ErrInvalid, MaxCertData)
			}
		}
		return insert(tx, tableCertData, &d)
	})
}

// DeleteCertData removes the entry at key and every entry under key/
// (a "directory" in certmagic's terms).
func (t *Tx) DeleteCertData(key string) error {
	return t.run(func(tx *memdb.Txn) error {
		if d, err := first[CertData](tx, tableCertData, "id", key); err != nil {
			return err
		} else if d != nil {
			if err := remove(tx, tableCertData, d); err != nil {
				return err
			}
		}
		under, err := all[CertData](tx, tableCertData, "id_prefix", strings.TrimSuffix(key, "/")+"/")
		if err != nil {
			return err
		}
		for _, d := range under {
			if err := remove(tx, tableCertData, d); err != nil {
				return err
			}
		}
		return nil
	})
}

// LockCert takes or renews the lease on name for owner until expires.
// A lease another owner holds past at is refused with ErrConflict.
func (t *Tx) LockCert(l CertLock, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[CertLock](tx, tableCertLocks, "id", l.Name)
		if err != nil {
			return err
		}
		if old != nil && old.Owner != l.Owner && old.Expires.After(at) {
			return fmt.Errorf("%w: %s is locked", ErrConflict, l.Name)
		}
		return insert(tx, tableCertLocks, &l)
	})
}

// UnlockCert releases owner's lease on name; a lease that is gone or
// another's is left alone.
func (t *Tx) UnlockCert(name, owner string) error {
	return t.run(func(tx *memdb.Txn) error {
		old, err := first[CertLock](tx, tableCertLocks, "id", name)
		if err != nil || old == nil || old.Owner != owner {
			return err
		}
		return remove(tx, tableCertLocks, old)
	})
}

func count(tx *memdb.Txn, table string) (int, error) {
	it, err := tx.Get(table, "id")
	if err != nil {
		return 0, err
	}
	n := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n++
	}
	return n, nil
}
