package state

import (
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// SSHKey is a public key an account signs in to its sites' SSH with. A
// key belongs to one account in the whole service: the gateway finds the
// account by the key alone.
type SSHKey struct {
	ID     string `json:"id"`
	UserID string `json:"userId"`
	Name   string `json:"name"`
	// Type and Bits describe the key; Fingerprint is SHA256:… as OpenSSH
	// prints it; PublicKey is its authorized_keys form.
	Type        string     `json:"type"`
	Bits        int        `json:"bits"`
	Fingerprint string     `json:"fingerprint"`
	PublicKey   string     `json:"publicKey"`
	CreatedAt   time.Time  `json:"createdAt"`
	LastUsedAt  *time.Time `json:"lastUsedAt,omitempty"`
}

// SSHKeys lists an account's keys.
func (s *Store) SSHKeys(userID string) ([]*SSHKey, error) {
	return all[SSHKey](s.read(), tableSSHKeys, "user", userID)
}

// SSHKeyByFingerprint returns the key with a fingerprint, or nil.
func (s *Store) SSHKeyByFingerprint(fp string) (*SSHKey, error) {
	return first[SSHKey](s.read(), tableSSHKeys, "fingerprint", fp)
}

// AddSSHKey stores an account's key within its quota; a key already on
// any account is refused (ErrConflict).
func (t *Tx) AddSSHKey(k SSHKey, q Quota) error {
	return t.run(func(tx *memdb.Txn) error {
		if a, err := first[Account](tx, tableAccounts, "id", k.UserID); err != nil {
			return err
		} else if a == nil {
			return fmt.Errorf("%w: account %s", ErrNotFound, k.UserID)
		}
		if dup, err := first[SSHKey](tx, tableSSHKeys, "fingerprint", k.Fingerprint); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: this key (%s) is already registered; each key can be on one account only", ErrConflict, k.Fingerprint)
		}
		mine, err := all[SSHKey](tx, tableSSHKeys, "user", k.UserID)
		if err != nil {
			return err
		}
		if err := q.check(len(mine)); err != nil {
			return err
		}
		return insert(tx, tableSSHKeys, &k)
	})
}

// DeleteSSHKey removes one of an account's keys.
func (t *Tx) DeleteSSHKey(userID, id string) error {
	return t.run(func(tx *memdb.Txn) error {
		k, err := first[SSHKey](tx, tableSSHKeys, "id", id)
		if err != nil {
			return err
		}
		if k == nil || k.UserID != userID {
			return fmt.Errorf("%w: ssh key %s", ErrNotFound, id)
		}
		return remove(tx, tableSSHKeys, k)
	})
}

// TouchSSHKey records a sign-in with a key.
func (t *Tx) TouchSSHKey(id string, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		k, err := first[SSHKey](tx, tableSSHKeys, "id", id)
		if err != nil || k == nil {
			return err
		}
		c := *k
		c.LastUsedAt = &at
		return insert(tx, tableSSHKeys, &c)
	})
}
