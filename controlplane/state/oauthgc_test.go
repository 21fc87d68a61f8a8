package state

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// oauthFixture is an account and one registered client per name,
// registered at t0.
func oauthFixture(t *testing.T, t0 time.Time, clients ...string) *Store {
	t.Helper()
	s := NewStore()
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateAccount(Account{ID: "usr_1", Email: "o@example.com", Plan: PlanPaid, PersonalWorkspaceID: "ws_a", CreatedAt: t0},
			Workspace{ID: "ws_a", Name: "Personal", OwnerID: "usr_1", Personal: true, CreatedAt: t0})
	}))
	for _, id := range clients {
		must(t, s.Update(func(tx *Tx) error {
			return tx.RegisterOAuthClient(OAuthClient{ID: id, Name: id, RedirectURIs: []string{"https://x.example/cb"}, CreatedAt: t0}, 0)
		}))
	}
	return s
}

// grant approves a code of client at at and redeems it for a token that
// expires after life.
func grant(t *testing.T, s *Store, client, tokenID string, at time.Time, life time.Duration) {
	t.Helper()
	hash := "code_" + tokenID
	exp := at.Add(life)
	must(t, s.Update(func(tx *Tx) error {
		return tx.CreateOAuthCode(OAuthCode{ID: hash, ClientID: client, UserID: "usr_1", RedirectURI: "https://x.example/cb",
			Scope: "import:read", WorkspaceID: "ws_a", ExpiresAt: at.Add(time.Minute)}, at)
	}))
	must(t, s.Update(func(tx *Tx) error {
		_, err := tx.RedeemOAuthCode(hash, Token{ID: tokenID, UserID: "usr_1", Hash: "h_" + tokenID, Kind: TokenOAuth,
			Scope: "import:read", ClientID: client, WorkspaceID: "ws_a", CreatedAt: at, ExpiresAt: &exp}, at)
		return err
	}))
}

func prune(t *testing.T, s *Store, at time.Time) int {
	t.Helper()
	var n int
	must(t, s.Update(func(tx *Tx) (err error) {
		n, err = tx.PruneOAuthClients(at, 24*time.Hour, 30*24*time.Hour)
		return err
	}))
	return n
}

// TestPruneOAuthClients: a client that never got a token is removed 24
// hours after it registered, not before; one whose tokens are all gone
// (revoked, or expired) is removed 30 days after a pass first found it
// so, not before, and its expired tokens and codes go with it; a client
// with a live token or a code in play stays, however old.
func TestPruneOAuthClients(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	s := oauthFixture(t, t0, "cli_unused", "cli_revoked", "cli_expired", "cli_live", "cli_pending")
	grant(t, s, "cli_revoked", "tok_revoked", t0.Add(time.Hour), 30*day)
	grant(t, s, "cli_expired", "tok_expired", t0.Add(time.Hour), 2*day)
	grant(t, s, "cli_live", "tok_live", t0.Add(time.Hour), 90*day)
	must(t, s.Update(func(tx *Tx) error { return tx.RevokeToken("usr_1", "tok_revoked") }))

	steps := []struct {
		name string
		at   time.Time
		gone []string // removed by this pass
		kept []string
	}{
		{"a day less a minute: all kept; the revoked client is found idle", t0.Add(day - time.Minute), nil,
			[]string{"cli_unused", "cli_revoked", "cli_expired", "cli_live", "cli_pending"}},
		{"a day: the unused client goes", t0.Add(day), []string{"cli_unused"},
			[]string{"cli_revoked", "cli_expired", "cli_live", "cli_pending"}},
		{"three days: the expired client is found idle", t0.Add(3 * day), nil,
			[]string{"cli_revoked", "cli_expired", "cli_live", "cli_pending"}},
		{"30 days after the revoked client was found idle, less a minute: kept", t0.Add(31*day - 2*time.Minute), nil,
			[]string{"cli_revoked", "cli_expired", "cli_live", "cli_pending"}},
		{"30 days after: the revoked client goes", t0.Add(31*day - time.Minute), []string{"cli_revoked"},
			[]string{"cli_expired", "cli_live", "cli_pending"}},
		{"33 days: the expired client goes, with its token and code", t0.Add(33 * day), []string{"cli_expired"},
			[]string{"cli_live", "cli_pending"}},
	}
	// cli_pending has an approved code in play at every step.
	for i, st := range steps {
		must(t, s.Update(func(tx *Tx) error {
			return tx.CreateOAuthCode(OAuthCode{ID: "pending_" + st.name, ClientID: "cli_pending", UserID: "usr_1",
				RedirectURI: "https://x.example/cb", Scope: "import:read", WorkspaceID: "ws_a", ExpiresAt: st.at.Add(time.Minute)}, st.at)
		}))
		if n := prune(t, s, st.at); n != len(st.gone) {
			t.Errorf("step %d (%s): removed %d, want %d", i, st.name, n, len(st.gone))
		}
		for _, id := range st.gone {
			if c, _ := s.OAuthClient(id); c != nil {
				t.Errorf("step %d (%s): %s kept", i, st.name, id)
			}
		}
		for _, id := range st.kept {
			if c, _ := s.OAuthClient(id); c == nil {
				t.Errorf("step %d (%s): %s removed", i, st.name, id)
			}
		}
	}
	if tok, _ := s.Token("tok_expired"); tok != nil {
		t.Error("the collected client's expired token is kept")
	}
	if code, _ := s.OAuthCode("code_tok_expired"); code != nil {
		t.Error("the collected client's code is kept")
	}
	if tok, _ := s.Token("tok_live"); tok == nil {
		t.Error("a live token was removed")
	}
	if n, _ := s.OAuthClientCount(); n != 2 {
		t.Errorf("%d clients left, want 2", n)
	}
}

// TestOAuthClientCap: a registration past the cap is refused whole; a
// cap of zero is none.
func TestOAuthClientCap(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	s := oauthFixture(t, t0, "cli_1", "cli_2")
	reg := func(id string, max int) error {
		return s.Update(func(tx *Tx) error {
			return tx.RegisterOAuthClient(OAuthClient{ID: id, RedirectURIs: []string{"https://x.example/cb"}, CreatedAt: t0}, max)
		})
	}
	must(t, reg("cli_3", 3))
	if err := reg("cli_4", 3); !errors.Is(err, ErrTooManyClients) {
		t.Fatalf("past the cap: %v", err)
	}
	if c, _ := s.OAuthClient("cli_4"); c != nil {
		t.Fatal("a refused registration was kept")
	}
	must(t, reg("cli_4", 0))
	if n, _ := s.OAuthClientCount(); n != 4 {
		t.Fatalf("%d clients, want 4", n)
	}
}

// TestOAuthTokensPerAccountAreBounded: an account that consents again and
// again holds at most MaxOAuthTokens live connector tokens; each past it
// retires the oldest, and the newest stay.
func TestOAuthTokensPerAccountAreBounded(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	s := oauthFixture(t, t0, "cli_a")
	for i := range MaxOAuthTokens + 5 {
		grant(t, s, "cli_a", fmt.Sprintf("tok_%03d", i), t0.Add(time.Duration(i)*time.Second), 30*24*time.Hour)
	}
	toks, err := s.TokensOf("usr_1")
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != MaxOAuthTokens {
		t.Fatalf("%d connector tokens kept, want %d", len(toks), MaxOAuthTokens)
	}
	for _, id := range []string{"tok_000", "tok_004"} {
		if tok, _ := s.Token(id); tok != nil {
			t.Errorf("the oldest token %s is kept", id)
		}
	}
	if tok, _ := s.Token(fmt.Sprintf("tok_%03d", MaxOAuthTokens+4)); tok == nil {
		t.Error("the newest token is gone")
	}
}
