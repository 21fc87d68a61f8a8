package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// TestConnectorIdempotencyKeysAreTheirOwn: two connectors (OAuth clients)
// of one account sending the same Idempotency-Key and body each create
// their own import: one client never gets the other's answer replayed.
func TestConnectorIdempotencyKeysAreTheirOwn(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	mk := func(client string) *st.Client {
		plain := secret.New(secret.TokenPrefix)
		tok := state.Token{ID: "tok_" + client, UserID: alice.ID, Name: "OAuth: " + client, Hash: secret.Hash(plain),
			Prefix: secret.Display(plain), CreatedAt: time.Now().UTC(), Kind: state.TokenOAuth, Scope: "import:read import:write",
			ClientID: client, ClientName: client, WorkspaceID: alice.Personal}
		if _, err := s.Node().Apply(context.Background(), fsm.CreateToken{Token: tok, Quota: state.Quota{Limit: 100}}); err != nil {
			t.Fatal(err)
		}
		return st.NewClient(t, s.URL(), plain)
	}
	x, y := mk("cli_x"), mk("cli_y")
	body := map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 10}
	first := x.Do("POST", "/api/app/imports", body, "Idempotency-Key", "same").Must(t, 201)
	other := y.Do("POST", "/api/app/imports", body, "Idempotency-Key", "same").Must(t, 201)
	if other.Header.Get("Idempotent-Replayed") != "" || other.Str("import.id") == first.Str("import.id") {
		t.Fatalf("client y got client x's answer: %s", other.Raw)
	}
	if again := x.Do("POST", "/api/app/imports", body, "Idempotency-Key", "same").Must(t, 201); again.Str("import.id") != first.Str("import.id") {
		t.Fatalf("client x's own retry is not replayed: %s", again.Raw)
	}
}
