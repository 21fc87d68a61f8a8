package api_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/plans"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

const keyHeader = "Idempotency-Key"

// TestIdempotencyKeyReplaysTheFirstAnswer: a create repeated with its key
// answers the first response byte for byte (a new token's secret
// included) and creates nothing more; another request under the key, a
// bad key, and a failed first attempt behave as the addendum says.
func TestIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	limits := plans.Default()
	limits.Free.APITokens = 20
	s := st.Single(t, st.Options{Plans: &limits})
	alice := st.NewAccount(t, s, "alice@example.com", "free")
	bob := st.NewAccount(t, s, "bob@example.com", "free")
	tokens := func(c *st.Client) int {
		return len(c.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens"))
	}

	first := alice.Do("POST", "/api/account/tokens", map[string]string{"name": "ci"}, keyHeader, "k-1").Must(t, 201)
	if first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatal("a first answer is marked replayed")
	}
	again := alice.Do("POST", "/api/account/tokens", map[string]string{"name": "ci"}, keyHeader, "k-1").Must(t, 201)
	if !bytes.Equal(first.Raw, again.Raw) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay differs:\n first %s\n again %s (%v)", first.Raw, again.Raw, again.Header)
	}
	if again.Str("secret") == "" || again.Str("secret") != first.Str("secret") {
		t.Fatal("the replay lost the token's secret")
	}
	if n := tokens(alice.Client); n != 2 {
		t.Fatalf("%d tokens after a create and its replay, want 2", n)
	}

	// Keys are per account: bob's k-1 is his own.
	bob.Do("POST", "/api/account/tokens", map[string]string{"name": "ci"}, keyHeader, "k-1").Must(t, 201)
	if n := tokens(bob.Client); n != 2 {
		t.Fatalf("bob has %d tokens, want 2", n)
	}

	// Another body, or another route, under the key: refused, nothing made.
	r := alice.Do("POST", "/api/account/tokens", map[string]string{"name": "other"}, keyHeader, "k-1").Must(t, 409)
	if r.Code() != "idempotency_key_reused" {
		t.Fatalf("reuse answered %s", r.Raw)
	}
	alice.Do("POST", "/api/app/workspaces", map[string]string{"name": "W"}, keyHeader, "k-1").Must(t, 409)
	if n := tokens(alice.Client); n != 2 {
		t.Fatalf("%d tokens after refused reuses, want 2", n)
	}

	// A failed attempt stores nothing: the key is still free afterwards.
	alice.Do("POST", "/api/account/tokens", map[string]string{"name": ""}, keyHeader, "k-2").Must(t, 400)
	alice.Do("POST", "/api/account/tokens", map[string]string{"name": "fixed"}, keyHeader, "k-2").Must(t, 201)

	for _, tc := range []struct{ name, key string }{
		{"too long", strings.Repeat("k", 256)},
		{"not printable ASCII", "clé"},
		{"control character", "a\tb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := alice.Do("POST", "/api/account/tokens", map[string]string{"name": "x"}, keyHeader, tc.key).Must(t, 400)
			if r.Code() != "invalid_request" || r.Details()["field"] != keyHeader {
				t.Fatalf("got %s", r.Raw)
			}
		})
	}
	alice.Do("POST", "/api/account/tokens", map[string]string{"name": "max"}, keyHeader, strings.Repeat("k", 255)).Must(t, 201)
	if n := tokens(alice.Client); n != 4 {
		t.Fatalf("%d tokens, want 4 (bad keys must create nothing)", n)
	}
}

// TestIdempotencyKeyConcurrentTwins sends one create eight times at once
// under one key: one is applied, all get its answer.
func TestIdempotencyKeyConcurrentTwins(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	sendTwins(t, alice.Client, "/api/app/workspaces", map[string]string{"name": "Twins"}, "twin", 201)
	named := 0
	for _, ws := range alice.Do("GET", "/api/app/workspaces", nil).Must(t, 200).List("workspaces") {
		if ws["name"] == "Twins" {
			named++
		}
	}
	if named != 1 {
		t.Fatalf("%d workspaces made by eight twins, want 1", named)
	}
}

// TestOperatorKeys: operator creates take keys too, in their own scope.
func TestOperatorKeys(t *testing.T) {
	s := st.Single(t, st.Options{})
	op := st.NewClient(t, s.URL(), s.OperatorToken())
	body := map[string]string{"email": "carol@example.com", "plan": "free"}
	a := op.Do("POST", "/api/admin/accounts", body, keyHeader, "acct-1").Must(t, 201)
	b := op.Do("POST", "/api/admin/accounts", body, keyHeader, "acct-1").Must(t, 201)
	if !bytes.Equal(a.Raw, b.Raw) {
		t.Fatalf("replay differs: %s / %s", a.Raw, b.Raw)
	}
	// Without a key the same request is a new one: the email is taken.
	op.Do("POST", "/api/admin/accounts", body).Must(t, 409)
}

// sendTwins POSTs body to path eight times at once under one key: every
// twin must answer status with the same bytes.
func sendTwins(t *testing.T, c *st.Client, path string, body any, key string, status int) {
	t.Helper()
	var wg sync.WaitGroup
	bodies := make([][]byte, 8)
	errs := make([]error, 8)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.DoErr("POST", path, body, keyHeader, key)
			if err == nil && r.Status != status {
				err = &statusError{r.Status, string(r.Raw)}
			}
			if err == nil {
				bodies[i] = r.Raw
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("twin %d: %v", i, err)
		}
		if !bytes.Equal(bodies[i], bodies[0]) {
			t.Fatalf("twin %d got another answer:\n%s\n%s", i, bodies[i], bodies[0])
		}
	}
}

type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return e.body }

// TestIdempotencyKeyThroughServices: creates that run in a service (a
// site placed on a node, a Library upload that may retry its slug) keep
// the key's promise too: eight concurrent twins make one site and all
// get its answer; an upload replayed under its key makes no second entry.
func TestIdempotencyKeyThroughServices(t *testing.T) {
	s := st.Single(t, st.Options{})
	fakeNode(t, s)
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	sendTwins(t, alice.Client, "/api/app/sites", map[string]string{"name": "Twin"}, "site-twin", 202)
	if n := len(alice.Do("GET", "/api/app/sites", nil).Must(t, 200).List("sites")); n != 1 {
		t.Fatalf("%d sites made by eight twins, want 1", n)
	}

	zip := wpzip.BuildPlugin("hello", "Hello", "1.0", "")
	body, ct := st.Multipart(nil, "file", "hello.zip", zip)
	first := alice.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct, keyHeader, "lib-1").Must(t, 201)
	again := alice.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct, keyHeader, "lib-1").Must(t, 201)
	if !bytes.Equal(first.Raw, again.Raw) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("upload replay differs:\n%s\n%s", first.Raw, again.Raw)
	}
	if n := len(alice.Do("GET", "/api/app/plugin-library", nil).Must(t, 200).List("plugins")); n != 1 {
		t.Fatalf("%d entries after an upload and its replay, want 1", n)
	}
	// Without the key the same upload is a new entry under the next slug.
	if slug := alice.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct).Must(t, 201).Str("plugin.slug"); slug != "hello-2" {
		t.Fatalf("a second upload took slug %q", slug)
	}
}
