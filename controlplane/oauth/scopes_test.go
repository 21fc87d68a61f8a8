package oauth_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// TestScopedTokens: a connector's token works on GET /api/account/me and
// the Imports routes its scopes allow; elsewhere it is no credential
// (401), and a missing scope is 403 insufficient_scope.
func TestScopedTokens(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	mk := func(scope string) *st.Client {
		plain := secret.New(secret.TokenPrefix)
		tok := state.Token{ID: "tok_" + scope[len(scope)-4:], UserID: alice.ID, Name: "OAuth: test", Hash: secret.Hash(plain),
			Prefix: secret.Display(plain), CreatedAt: time.Now().UTC(), Kind: state.TokenOAuth, Scope: scope, ClientID: "cli_x", ClientName: "test"}
		if _, err := s.Node().Apply(context.Background(), fsm.CreateToken{Token: tok, Quota: state.Quota{Limit: 100}}); err != nil {
			t.Fatal(err)
		}
		return st.NewClient(t, s.URL(), plain)
	}
	reader, writer := mk("import:read"), mk("import:read import:write")
	for _, c := range []*st.Client{reader, writer} {
		if r := c.Do("GET", "/api/account/me", nil).Must(t, 200); r.Str("user.email") != "alice@example.com" {
			t.Fatalf("me: %s", r.Raw)
		}
		c.Do("GET", "/api/app/imports", nil).Must(t, 200)
		for _, p := range []string{"/api/app/sites", "/api/account/tokens", "/api/app/templates", "/api/app/workspaces", "/api/account/usage"} {
			if r := c.Do("GET", p, nil).Must(t, 401); r.Code() != "auth_required" {
				t.Fatalf("%s: %s", p, r.Raw)
			}
		}
		c.Do("POST", "/api/app/sites", map[string]any{}).Must(t, 401)
		c.Do("POST", "/api/account/tokens", map[string]any{"name": "escalate"}).Must(t, 401)
	}
	r := reader.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 5}).Must(t, 403)
	if r.Code() != "insufficient_scope" || r.Details()["scope"] != "import:write" {
		t.Fatalf("reader writes: %s", r.Raw)
	}
	id := writer.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 5}).Must(t, 201).Str("import.id")
	reader.Do("GET", "/api/app/imports/"+id, nil).Must(t, 200)
	reader.Do("DELETE", "/api/app/imports/"+id, nil).Must(t, 403)
	// The account lists the token as an oauth one and can revoke it.
	toks := alice.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens")
	oauthTokens := 0
	for _, tk := range toks {
		if tk["kind"] == "oauth" && tk["clientName"] == "test" {
			oauthTokens++
		}
	}
	if oauthTokens != 2 {
		t.Fatalf("tokens: %v", toks)
	}
	alice.Do("DELETE", "/api/account/tokens/tok_read", nil).Must(t, 200)
	reader.Do("GET", "/api/app/imports", nil).Must(t, 401)
}
