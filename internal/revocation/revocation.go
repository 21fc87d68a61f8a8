// Package revocation carries the cluster's revocations to members that
// do not hold the replicated state (node agents): which members'
// certificates the control plane no longer honours, as a bounded list a
// heartbeat answer carries, and the agent's copy that its listeners
// check every caller against. The rule is the servers' own
// (members.Service.Check): a revoked member's certificates are refused,
// and so are a member's certificates from before its last join.
package revocation

import (
	"cmp"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/pki"
)

// MaxEntries bounds the list: what a heartbeat answer carries and what
// an agent keeps. Entries leave the list once every certificate they
// refuse has expired (a week by default), so it holds the members
// revoked or re-joined in the last certificate lifetime; an operator
// revoking more than this in one week is far beyond any real fleet.
const MaxEntries = 4096

// Entry refuses certificates of one member.
type Entry struct {
	// ID is the member's identity, "<role>/<name>".
	ID string `json:"id"`
	// Revoked refuses every certificate of the member.
	Revoked bool `json:"revoked,omitempty"`
	// ValidFrom refuses the member's certificates issued before it (an
	// earlier enrolment's); zero refuses none.
	ValidFrom time.Time `json:"validFrom,omitzero"`
	// Until is when every certificate the entry refuses has expired; the
	// entry is pointless afterwards and is dropped.
	Until time.Time `json:"until"`
}

// Refuses says why the entry refuses cert (nil: it does not). A nil
// cert stands for any certificate of the member.
func (e Entry) Refuses(cert *x509.Certificate) error {
	switch {
	case e.Revoked:
		return errors.New("revoked")
	case cert != nil && !e.ValidFrom.IsZero() && pki.IssuedAt(cert).Before(e.ValidFrom):
		return errors.New("this certificate is from before the member's last join")
	}
	return nil
}

// Normalize makes a list canonical: entries past Until at now and
// entries with a malformed id are dropped, one entry per id is kept (the
// one refusing most), sorted by id, and the list is cut to MaxEntries,
// keeping revocations first and then the entries that last longest (by
// id among equals, so every server cuts it alike).
func Normalize(entries []Entry, now time.Time) []Entry {
	byID := make(map[string]Entry, len(entries))
	for _, e := range entries {
		if !e.Until.After(now) || !validID(e.ID) {
			continue
		}
		if old, ok := byID[e.ID]; ok {
			e = merge(old, e)
		}
		byID[e.ID] = e
	}
	out := make([]Entry, 0, len(byID))
	for _, e := range byID {
		out = append(out, e)
	}
	if len(out) > MaxEntries {
		slices.SortFunc(out, func(a, b Entry) int {
			if a.Revoked != b.Revoked {
				if a.Revoked {
					return -1
				}
				return 1
			}
			if c := b.Until.Compare(a.Until); c != 0 {
				return c
			}
			return cmp.Compare(a.ID, b.ID)
		})
		out = out[:MaxEntries]
	}
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// merge is one entry refusing all that a and b refuse.
func merge(a, b Entry) Entry {
	a.Revoked = a.Revoked || b.Revoked
	if b.ValidFrom.After(a.ValidFrom) {
		a.ValidFrom = b.ValidFrom
	}
	if b.Until.After(a.Until) {
		a.Until = b.Until
	}
	return a
}

// Version names a normalized list: equal lists, equal versions, on every
// server.
func Version(entries []Entry) string {
	h := sha256.New()
	var n [8]byte
	for _, e := range entries {
		h.Write([]byte(e.ID))
		h.Write([]byte{0})
		if e.Revoked {
			h.Write([]byte{1})
		} else {
			h.Write([]byte{0})
		}
		for _, t := range []time.Time{e.ValidFrom, e.Until} {
			binary.BigEndian.PutUint64(n[:], uint64(UnixNano(t)))
			h.Write(n[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// UnixNano is t for the wire: 0 for the zero time.
func UnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromUnixNano undoes UnixNano.
func FromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func validID(id string) bool {
	role, name, ok := strings.Cut(id, "/")
	return ok && pki.Role(role).Valid() && pki.ValidID(name)
}
