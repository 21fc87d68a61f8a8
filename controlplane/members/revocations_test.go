package members_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/members"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/revocation"
)

// TestRevocationsBounded: agents are sent each revoked member and each
// member's last join while a certificate they refuse may still be valid,
// and nothing older: the list holds a certificate lifetime's worth.
func TestRevocationsBounded(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	ttl := 7 * 24 * time.Hour
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	for _, c := range []struct {
		name string
		m    state.ClusterMember
		want string // "" for no entry
	}{
		{"revoked yesterday", state.ClusterMember{ID: "edge/a", RevokedAt: at(-24 * time.Hour), ExpiresAt: now.Add(5 * 24 * time.Hour),
			ValidFrom: now.Add(-30 * 24 * time.Hour)}, "{edge/a true 0001-01-01 00:00:00 +0000 UTC 2026-03-07 00:00:00 +0000 UTC}"},
		{"revoked, its last certificate outliving ttl", state.ClusterMember{ID: "edge/b", RevokedAt: at(-8 * 24 * time.Hour),
			ExpiresAt: now.Add(time.Hour)}, "{edge/b true 0001-01-01 00:00:00 +0000 UTC 2026-03-01 01:00:00 +0000 UTC}"},
		{"revoked longer ago than any certificate lives", state.ClusterMember{ID: "edge/c", RevokedAt: at(-8 * 24 * time.Hour),
			ExpiresAt: now.Add(-time.Hour)}, ""},
		{"joined again two days ago", state.ClusterMember{ID: "agent/d", ValidFrom: now.Add(-48 * time.Hour), ExpiresAt: now.Add(5 * 24 * time.Hour)},
			"{agent/d false 2026-02-27 00:00:00 +0000 UTC 2026-03-06 00:00:00 +0000 UTC}"},
		{"joined a month ago", state.ClusterMember{ID: "agent/e", ValidFrom: now.Add(-30 * 24 * time.Hour), ExpiresAt: now.Add(5 * 24 * time.Hour)}, ""},
		{"the bootstrap server", state.ClusterMember{ID: "server/f", ExpiresAt: now.Add(5 * 24 * time.Hour)}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := members.Revocations([]*state.ClusterMember{&c.m}, now, ttl)
			switch {
			case c.want == "" && len(got) != 0:
				t.Fatalf("sent %v", got)
			case c.want != "" && (len(got) != 1 || fmt.Sprint(got[0]) != c.want):
				t.Fatalf("got %v\nwant [%s]", got, c.want)
			}
		})
	}
	var many []*state.ClusterMember
	for i := range revocation.MaxEntries * 2 {
		many = append(many, &state.ClusterMember{ID: fmt.Sprintf("edge/e%d", i), RevokedAt: at(-time.Hour)})
	}
	if n := len(members.Revocations(many, now, ttl)); n != revocation.MaxEntries {
		t.Fatalf("%d entries sent, want at most %d", n, revocation.MaxEntries)
	}
}
