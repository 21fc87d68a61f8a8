package state

import (
	"crypto/subtle"
	"fmt"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// ClusterCA is the authority that signs every member's certificate. It
// is made once, at bootstrap; its key is sealed before it enters the log.
type ClusterCA struct {
	ID          string    `json:"id"` // always "ca": one row
	CertPEM     []byte    `json:"certPem"`
	KeySealed   []byte    `json:"keySealed"`
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"createdAt"`
}

// ClusterMember is a server, agent or edge that joined with a join token
// (or, for the first server, bootstrapped the cluster). Its certificates
// are honoured while the member is not revoked.
type ClusterMember struct {
	// ID is "<role>/<name>", as in the certificate's identity.
	ID        string    `json:"id"`
	Role      string    `json:"role"`
	Name      string    `json:"name"`
	Serial    string    `json:"serial"` // of the last certificate issued
	IssuedAt  time.Time `json:"issuedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	JoinedAt  time.Time `json:"joinedAt"`
	JoinToken string    `json:"joinToken,omitempty"` // id of the token it joined with
	// ValidFrom is when it last joined: certificates of its name issued
	// before (an earlier enrolment's, perhaps stolen) are refused.
	ValidFrom time.Time  `json:"validFrom"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// JoinToken lets one agent, edge or server join once. Only its hash is
// kept.
type JoinToken struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
	Role string `json:"role"`
	// Name, when set, is the only member name the token joins.
	Name        string     `json:"name,omitempty"`
	Description string     `json:"description,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	ExpiresAt   time.Time  `json:"expiresAt"`
	UsedAt      *time.Time `json:"usedAt,omitempty"`
	UsedBy      string     `json:"usedBy,omitempty"`
	// UsedKey is the hash of the public key it was used with: the same
	// member retrying with the same key gets its certificate again.
	UsedKey   string     `json:"usedKey,omitempty"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// OperatorToken is an operator's credential for the admin API; only its
// hash is kept. Revoking one deletes it.
type OperatorToken struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Hash      string    `json:"hash"`
	CreatedAt time.Time `json:"createdAt"`
}

// ClusterCA returns the cluster's CA, or nil before bootstrap made it.
func (s *Store) ClusterCA() (*ClusterCA, error) {
	return first[ClusterCA](s.read(), tableClusterCA, "id", "ca")
}

// ClusterMember returns a member by "<role>/<name>", or nil.
func (s *Store) ClusterMember(id string) (*ClusterMember, error) {
	return first[ClusterMember](s.read(), tableClusterMembers, "id", id)
}

// ClusterMembers lists every member.
func (s *Store) ClusterMembers() ([]*ClusterMember, error) {
	return all[ClusterMember](s.read(), tableClusterMembers, "id")
}

// JoinTokens lists every join token.
func (s *Store) JoinTokens() ([]*JoinToken, error) {
	return all[JoinToken](s.read(), tableJoinTokens, "id")
}

// JoinToken returns a join token by id, or nil.
func (s *Store) JoinToken(id string) (*JoinToken, error) {
	return first[JoinToken](s.read(), tableJoinTokens, "id", id)
}

// OperatorTokens lists the operator tokens.
func (s *Store) OperatorTokens() ([]*OperatorToken, error) {
	return all[OperatorToken](s.read(), tableOperatorTokens, "id")
}

// OperatorTokenByHash returns the operator token with a hash, or nil.
func (s *Store) OperatorTokenByHash(hash string) (*OperatorToken, error) {
	return first[OperatorToken](s.read(), tableOperatorTokens, "hash", hash)
}

// PutClusterCA records the cluster's CA and, with it, the member that
// made it (the bootstrap server) and the first operator token. A CA is
// never replaced: a second one is a conflict unless it is the same (and
// then nothing else is written either).
func (t *Tx) PutClusterCA(ca ClusterCA, first_ ClusterMember, op OperatorToken) error {
	return t.run(func(tx *memdb.Txn) error {
		ca.ID = "ca"
		old, err := first[ClusterCA](tx, tableClusterCA, "id", "ca")
		if err != nil {
			return err
		}
		if old != nil {
			if old.Fingerprint != ca.Fingerprint {
				return fmt.Errorf("%w: the cluster already has a CA (%s)", ErrConflict, old.Fingerprint)
			}
			return nil
		}
		if err := insert(tx, tableClusterCA, &ca); err != nil {
			return err
		}
		if first_.ID != "" {
			if err := insert(tx, tableClusterMembers, &first_); err != nil {
				return err
			}
		}
		if op.ID != "" {
			return insert(tx, tableOperatorTokens, &op)
		}
		return nil
	})
}

// CreateJoinToken stores a new join token.
func (t *Tx) CreateJoinToken(j JoinToken) error {
	return t.run(func(tx *memdb.Txn) error {
		if dup, err := first[JoinToken](tx, tableJoinTokens, "id", j.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: join token %s exists", ErrConflict, j.ID)
		}
		return insert(tx, tableJoinTokens, &j)
	})
}

// RevokeJoinToken stops a join token from being used (a used one is
// kept as it is, for the record).
func (t *Tx) RevokeJoinToken(id string, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		j, err := first[JoinToken](tx, tableJoinTokens, "id", id)
		if err != nil {
			return err
		}
		if j == nil {
			return fmt.Errorf("%w: join token %s", ErrNotFound, id)
		}
		if j.RevokedAt != nil {
			return nil
		}
		c := *j
		c.RevokedAt = &at
		return insert(tx, tableJoinTokens, &c)
	})
}

// UseJoinToken spends a join token on a member, inside the Raft apply,
// so two members racing with one token cannot both join: the token must
// exist with this hash, be for the member's role (and name, when it
// names one), unexpired, unrevoked, and unused — or used before by the
// same member with the same key (a retry whose answer was lost).
func (t *Tx) UseJoinToken(tokenID, hash, keyHash string, m ClusterMember) error {
	return t.run(func(tx *memdb.Txn) error {
		j, err := first[JoinToken](tx, tableJoinTokens, "id", tokenID)
		if err != nil {
			return err
		}
		at := m.IssuedAt
		if err := j.Refuses(hash, m, keyHash, at); err != nil {
			return err
		}
		old, err := first[ClusterMember](tx, tableClusterMembers, "id", m.ID)
		if err != nil {
			return err
		}
		retry := j.UsedAt != nil
		switch {
		case retry && (old == nil || old.RevokedAt != nil || old.JoinToken != tokenID):
			// The answer to this join was lost, and the member has since
			// been revoked or replaced: the token is spent.
			return fmt.Errorf("%w: the join token was used already", ErrConflict)
		case !retry && old != nil && old.RevokedAt == nil && j.Name == "":
			return fmt.Errorf("%w: %s is a member already; revoke it, or make a join token that names it (--name %s) to replace it",
				ErrConflict, m.ID, m.Name)
		}
		c := *j
		if c.UsedAt == nil {
			c.UsedAt, c.UsedBy, c.UsedKey = &at, m.ID, keyHash
		}
		if err := insert(tx, tableJoinTokens, &c); err != nil {
			return err
		}
		m.JoinToken, m.JoinedAt, m.RevokedAt, m.ValidFrom = tokenID, at, nil, at
		if retry {
			m.JoinedAt, m.ValidFrom = old.JoinedAt, old.ValidFrom
		}
		return insert(tx, tableClusterMembers, &m)
	})
}

// Refuses says why a join token (nil: none under its id) cannot make
// member m at time at with a key of keyHash; nil when it can. The leader
// asks before it signs anything, and the apply again.
func (j *JoinToken) Refuses(hash string, m ClusterMember, keyHash string, at time.Time) error {
	switch {
	case j == nil || subtle.ConstantTimeCompare([]byte(j.Hash), []byte(hash)) != 1:
		return fmt.Errorf("%w: unknown join token", ErrNotFound)
	case j.RevokedAt != nil:
		return fmt.Errorf("%w: the join token was revoked", ErrConflict)
	case !at.Before(j.ExpiresAt):
		return fmt.Errorf("%w: the join token expired at %s", ErrConflict, j.ExpiresAt.Format(time.RFC3339))
	case j.Role != m.Role:
		return fmt.Errorf("%w: the join token is for a %s, not a %s", ErrConflict, j.Role, m.Role)
	case j.Name != "" && j.Name != m.Name:
		return fmt.Errorf("%w: the join token is for %q, not %q", ErrConflict, j.Name, m.Name)
	case j.UsedAt != nil && (j.UsedBy != m.ID || j.UsedKey != keyHash):
		return fmt.Errorf("%w: the join token was used already", ErrConflict)
	}
	return nil
}

// RenewMember records a renewed certificate of a member in good standing.
func (t *Tx) RenewMember(id, serial string, issued, expires time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		m, err := first[ClusterMember](tx, tableClusterMembers, "id", id)
		if err != nil {
			return err
		}
		if m == nil || m.RevokedAt != nil {
			return fmt.Errorf("%w: member %s is not in the cluster", ErrNotFound, id)
		}
		c := *m
		c.Serial, c.IssuedAt, c.ExpiresAt = serial, issued, expires
		return insert(tx, tableClusterMembers, &c)
	})
}

// RevokeMember makes every certificate of a member worthless; it can
// come back only with a new join token.
func (t *Tx) RevokeMember(id string, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		m, err := first[ClusterMember](tx, tableClusterMembers, "id", id)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("%w: member %s", ErrNotFound, id)
		}
		if m.RevokedAt != nil {
			return nil
		}
		c := *m
		c.RevokedAt = &at
		return insert(tx, tableClusterMembers, &c)
	})
}

// CreateOperatorToken stores an operator token's hash.
func (t *Tx) CreateOperatorToken(o OperatorToken) error {
	return t.run(func(tx *memdb.Txn) error {
		if dup, err := first[OperatorToken](tx, tableOperatorTokens, "hash", o.Hash); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: operator token exists", ErrConflict)
		}
		return insert(tx, tableOperatorTokens, &o)
	})
}

// DeleteOperatorToken revokes an operator token.
func (t *Tx) DeleteOperatorToken(id string) error {
	return t.run(func(tx *memdb.Txn) error {
		o, err := first[OperatorToken](tx, tableOperatorTokens, "id", id)
		if err != nil {
			return err
		}
		if o == nil {
			return fmt.Errorf("%w: operator token %s", ErrNotFound, id)
		}
		return remove(tx, tableOperatorTokens, o)
	})
}
