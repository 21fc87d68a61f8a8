package state

import (
	"errors"
	"testing"
	"time"
)

// TestRegistrationPastTheCapEvictsAnUnusedClient: at the cap, a new
// registration evicts the oldest client that never got a token and is
// older than EvictUnusedAfter; clients with a token, with a code waiting
// or younger are never evicted, and with none evictable the cap refuses.
func TestRegistrationPastTheCapEvictsAnUnusedClient(t *testing.T) {
	s := seed(t)
	now := t0.Add(48 * time.Hour)
	used := now.Add(-3 * time.Hour)
	for _, c := range []OAuthClient{
		{ID: "cli_used", CreatedAt: now.Add(-5 * time.Hour), LastTokenAt: &used},
		{ID: "cli_waiting", CreatedAt: now.Add(-4 * time.Hour)},
		{ID: "cli_old", CreatedAt: now.Add(-3 * time.Hour)},
		{ID: "cli_young", CreatedAt: now.Add(-time.Minute)},
	} {
		must(t, s.Update(func(tx *Tx) error { return tx.RegisterOAuthClient(c, 0) }))
	}
	must(t, s.Update(func(tx *Tx) error {
		return insert(tx.tx, tableOAuthCodes, &OAuthCode{ID: "code", ClientID: "cli_waiting", UserID: "usr_a", ExpiresAt: now})
	}))
	must(t, s.Update(func(tx *Tx) error { return tx.RegisterOAuthClient(OAuthClient{ID: "cli_new", CreatedAt: now}, 4) }))
	for id, want := range map[string]bool{"cli_used": true, "cli_waiting": true, "cli_old": false, "cli_young": true, "cli_new": true} {
		if c, _ := s.OAuthClient(id); (c != nil) != want {
			t.Errorf("%s kept %v, want %v", id, c != nil, want)
		}
	}
	err := s.Update(func(tx *Tx) error { return tx.RegisterOAuthClient(OAuthClient{ID: "cli_next", CreatedAt: now}, 4) })
	if !errors.Is(err, ErrTooManyClients) {
		t.Fatalf("at the cap with nothing to evict: %v", err)
	}
}
