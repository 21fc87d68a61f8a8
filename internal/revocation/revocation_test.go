package revocation_test

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/revocation"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// issue makes a certificate of id issued at at by ca.
func issue(t *testing.T, ca *pki.CA, id string, at time.Time) *x509.Certificate {
	t.Helper()
	key, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	role, name, _ := cut(id)
	_, cert, err := ca.Issue(pki.Identity{Role: pki.Role(role), ID: name}, key.Public(), 7*24*time.Hour, at)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func cut(id string) (string, string, bool) {
	for i := range id {
		if id[i] == '/' {
			return id[:i], id[i+1:], true
		}
	}
	return "", "", false
}

// TestSetChecksLikeTheServers: the agent's copy refuses what the
// servers' Check refuses — every certificate of a revoked member, a
// member's certificates from before its last join — and nothing else;
// an entry past its Until refuses nothing.
func TestSetChecksLikeTheServers(t *testing.T) {
	ca, _, err := pki.NewCA("test", t0.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	joined := t0.Add(-24 * time.Hour)
	set := revocation.New("", func() time.Time { return t0 })
	if err := set.Replace("v1", []revocation.Entry{
		{ID: "edge/gone", Revoked: true, Until: t0.Add(time.Hour)},
		{ID: "edge/back", ValidFrom: joined, Until: joined.Add(7 * 24 * time.Hour)},
		{ID: "server/old", Revoked: true, Until: t0.Add(-time.Second)},
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		id   string
		at   time.Time
		ok   bool
	}{
		{"a revoked member's certificate", "edge/gone", t0.Add(-time.Minute), false},
		{"a certificate from before the last join", "edge/back", joined.Add(-time.Second), false},
		{"a certificate of the last join", "edge/back", joined, true},
		{"a renewal since", "edge/back", joined.Add(time.Hour), true},
		{"a member the list does not name", "edge/other", t0, true},
		{"an entry past its until", "server/old", t0.Add(-time.Minute), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := set.Peer(issue(t, ca, c.id, c.at)); (err == nil) != c.ok {
				t.Fatalf("Peer = %v, want ok %v", err, c.ok)
			}
		})
	}
	if set.Version() != "v1" || set.Len() != 2 {
		t.Fatalf("version %q, %d entries: the expired one should be dropped", set.Version(), set.Len())
	}
}

// TestNormalizeBounds: the list is canonical (one entry per member,
// sorted, so every server names it with one version), drops what
// refuses nothing still valid or names no member, and holds at most
// MaxEntries, revocations first.
func TestNormalizeBounds(t *testing.T) {
	until := t0.Add(time.Hour)
	for _, c := range []struct {
		name string
		in   []revocation.Entry
		want []revocation.Entry
	}{
		{"expired and malformed are dropped", []revocation.Entry{
			{ID: "edge/a", Revoked: true, Until: t0},
			{ID: "nobody", Revoked: true, Until: until},
			{ID: "king/x", Revoked: true, Until: until},
			{ID: "edge/" + string(make([]byte, 65)), Revoked: true, Until: until},
			{ID: "edge/b", Revoked: true, Until: until},
		}, []revocation.Entry{{ID: "edge/b", Revoked: true, Until: until}}},
		{"one entry per member, refusing all", []revocation.Entry{
			{ID: "edge/b", ValidFrom: t0, Until: until},
			{ID: "agent/a", ValidFrom: t0, Until: until},
			{ID: "edge/b", Revoked: true, Until: until.Add(time.Hour)},
		}, []revocation.Entry{{ID: "agent/a", ValidFrom: t0, Until: until},
			{ID: "edge/b", Revoked: true, ValidFrom: t0, Until: until.Add(time.Hour)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := revocation.Normalize(c.in, t0)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %v\nwant %v", got, c.want)
			}
		})
	}

	var many []revocation.Entry
	for i := range revocation.MaxEntries + 10 {
		many = append(many, revocation.Entry{ID: fmt.Sprintf("edge/joined-%05d", i), ValidFrom: t0, Until: until})
	}
	many = append(many, revocation.Entry{ID: "edge/revoked", Revoked: true, Until: t0.Add(time.Minute)})
	got := revocation.Normalize(many, t0)
	if len(got) != revocation.MaxEntries {
		t.Fatalf("%d entries kept, want %d", len(got), revocation.MaxEntries)
	}
	revoked := false
	for _, e := range got {
		revoked = revoked || e.ID == "edge/revoked"
	}
	if !revoked {
		t.Fatal("a revocation was dropped for a join")
	}
	reversed := make([]revocation.Entry, len(many))
	for i, e := range many {
		reversed[len(many)-1-i] = e
	}
	if revocation.Version(got) != revocation.Version(revocation.Normalize(reversed, t0)) {
		t.Fatal("the same list in another order has another version")
	}
}

// TestSetKeptOnDisk: a restarted agent holds what it was last sent; a
// damaged file is an error, not a crash or a partial list.
func TestSetKeptOnDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "revocations.json")
	now := func() time.Time { return t0 }
	set, err := revocation.Open(path, now)
	if err != nil || set.Len() != 0 || set.Version() != "" {
		t.Fatalf("no file: %v %d %q", err, set.Len(), set.Version())
	}
	if err := set.Replace("v7", []revocation.Entry{{ID: "edge/gone", Revoked: true, Until: t0.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	again, err := revocation.Open(path, now)
	if err != nil || again.Version() != "v7" || again.Check(pki.Identity{Role: pki.RoleEdge, ID: "gone"}, nil) == nil {
		t.Fatalf("reopened: %v %q", err, again.Version())
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v %v", info, err)
	}
	if err := os.WriteFile(path, []byte(`{"version": "v8", "entries": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := revocation.Open(path, now); err == nil {
		t.Fatal("a damaged file opened")
	}
	// A version no server makes is not kept: the next heartbeat asks for
	// the list again.
	if err := set.Replace(string(make([]byte, 65)), nil); err != nil || set.Version() != "" {
		t.Fatalf("long version kept: %q %v", set.Version(), err)
	}
}
