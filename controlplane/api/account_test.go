package api_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

func TestAuthRequired(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "free")
	cases := []struct {
		name   string
		header []string
	}{
		{"no header", []string{"Authorization", ""}},
		{"empty bearer", []string{"Authorization", "Bearer "}},
		{"basic scheme", []string{"Authorization", "Basic " + alice.Token}},
		{"unknown token", []string{"Authorization", "Bearer sbx_" + strings.Repeat("A", 43)}},
		{"malformed token", []string{"Authorization", "Bearer nope"}},
		{"an operator token is not a user token", []string{"Authorization", "Bearer " + s.OperatorToken()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := alice.Do("GET", "/api/account/me", nil, tc.header...)
			r.Must(t, 401)
			if r.Code() != "auth_required" || r.Details() == nil {
				t.Fatalf("want auth_required with details {}, got %s", r.Raw)
			}
		})
	}
}

func TestMeAndUsage(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "Alice@Example.com", "free")
	me := alice.Do("GET", "/api/account/me", nil).Must(t, 200)
	if me.Str("user.email") != "alice@example.com" || me.Str("user.plan") != "free" || me.Str("user.id") != alice.ID {
		t.Fatalf("me: %s", me.Raw)
	}
	u := alice.Do("GET", "/api/account/usage", nil).Must(t, 200)
	if u.Get("usage.limits.sites").(float64) != 3 || u.Get("usage.counts.apiTokens").(float64) != 1 ||
		u.Get("usage.counts.workspaces").(float64) != 1 || u.Str("usage.plan") != "free" {
		t.Fatalf("usage: %s", u.Raw)
	}
}

func TestTokens(t *testing.T) {
	limits := plans.Default()
	limits.Free.APITokens = 3
	s := st.Single(t, st.Options{Plans: &limits})
	alice := st.NewAccount(t, s, "alice@example.com", "free")
	bob := st.NewAccount(t, s, "bob@example.com", "free")

	created := alice.Do("POST", "/api/account/tokens", map[string]any{"name": "ci", "expiresInDays": 30}).Must(t, 201)
	secret, id := created.Str("secret"), created.Str("token.id")
	if !strings.HasPrefix(secret, "sbx_") || !strings.HasPrefix(id, "tok_") || created.Get("token.expiresAt") == nil {
		t.Fatalf("create: %s", created.Raw)
	}
	list := alice.Do("GET", "/api/account/tokens", nil).Must(t, 200)
	if n := len(list.List("tokens")); n != 2 {
		t.Fatalf("want 2 tokens, got %d: %s", n, list.Raw)
	}
	if strings.Contains(string(list.Raw), secret) || strings.Contains(string(list.Raw), "hash") {
		t.Fatalf("token list leaks a secret or hash: %s", list.Raw)
	}
	// The new token works.
	alice.As(secret).Do("GET", "/api/account/me", nil).Must(t, 200)

	bad := []struct {
		name, body, field string
	}{
		{"missing name", `{}`, "name"},
		{"blank name", `{"name":"  "}`, "name"},
		{"control characters", `{"name":"a\u0007b"}`, "name"},
		{"expiry too long", `{"name":"x","expiresInDays":4000}`, "expiresInDays"},
		{"expiry zero", `{"name":"x","expiresInDays":0}`, "expiresInDays"},
		{"expiry not a number", `{"name":"x","expiresInDays":"7"}`, "expiresInDays"},
		{"unknown field", `{"name":"x","scopes":["all"]}`, "scopes"},
		{"malformed", `{"name":`, ""},
		{"array body", `[1]`, ""},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			r := alice.Do("POST", "/api/account/tokens", tc.body).Must(t, 400)
			if r.Code() != "invalid_request" {
				t.Fatalf("code %q", r.Code())
			}
			if tc.field != "" && r.Details()["field"] != tc.field {
				t.Fatalf("details.field = %v, want %s", r.Details()["field"], tc.field)
			}
		})
	}
	t.Run("wrong content type", func(t *testing.T) {
		r := alice.Do("POST", "/api/account/tokens", `{"name":"x"}`, "Content-Type", "text/plain").Must(t, 400)
		if r.Code() != "invalid_request" {
			t.Fatal(r.Code())
		}
	})
	t.Run("body too large", func(t *testing.T) {
		big := `{"name":"` + strings.Repeat("a", 2<<20) + `"}`
		r := alice.Do("POST", "/api/account/tokens", big).Must(t, 413)
		if r.Code() != "payload_too_large" {
			t.Fatal(r.Code())
		}
	})

	// Plan limit: 3 tokens on this free plan (the operator's, "ci", one more).
	alice.Do("POST", "/api/account/tokens", map[string]any{"name": "third"}).Must(t, 201)
	lim := alice.Do("POST", "/api/account/tokens", map[string]any{"name": "fourth"}).Must(t, 402)
	if lim.Code() != "plan_limit_reached" || lim.Details()["plan"] != "free" || lim.Details()["limit"] != float64(3) || lim.Details()["resource"] != "apiTokens" {
		t.Fatalf("plan limit: %s", lim.Raw)
	}

	// Another account's token is unknown to alice.
	bobTok := bob.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens")[0]["id"].(string)
	if r := alice.Do("DELETE", "/api/account/tokens/"+bobTok, nil).Must(t, 404); r.Code() != "token_not_found" {
		t.Fatal(r.Code())
	}
	bob.Do("GET", "/api/account/me", nil).Must(t, 200)

	// Revocation takes effect for the next request and is not repeatable.
	if r := alice.Do("DELETE", "/api/account/tokens/"+id, nil).Must(t, 200); r.Get("deleted") != true {
		t.Fatalf("revoke: %s", r.Raw)
	}
	alice.As(secret).Do("GET", "/api/account/me", nil).Must(t, 401)
	alice.Do("DELETE", "/api/account/tokens/"+id, nil).Must(t, 404)
}

func TestExpiredTokenIsRejected(t *testing.T) {
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.Now = clock }})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	tok := alice.Do("POST", "/api/account/tokens", map[string]any{"name": "short", "expiresInDays": 1}).Must(t, 201).Str("secret")
	alice.As(tok).Do("GET", "/api/account/me", nil).Must(t, 200)
	offset.Store(int64(23 * time.Hour))
	alice.As(tok).Do("GET", "/api/account/me", nil).Must(t, 200)
	offset.Store(int64(24*time.Hour + time.Second))
	if r := alice.As(tok).Do("GET", "/api/account/me", nil).Must(t, 401); r.Code() != "auth_required" {
		t.Fatal(r.Code())
	}
	// A token without expiry still works.
	alice.Do("GET", "/api/account/me", nil).Must(t, 200)
}

// TestPlanLimitHoldsUnderConcurrency races 20 token creations for the
// last free slots: exactly the limit is granted, the rest get 402.
func TestPlanLimitHoldsUnderConcurrency(t *testing.T) {
	limits := plans.Default()
	limits.Free.APITokens = 5
	s := st.Single(t, st.Options{Plans: &limits})
	alice := st.NewAccount(t, s, "alice@example.com", "free") // holds 1 token
	var wg sync.WaitGroup
	codes := make(chan int, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := alice.DoErr("POST", "/api/account/tokens", map[string]any{"name": fmt.Sprint("t", i)})
			if err != nil {
				codes <- 0
				return
			}
			codes <- r.Status
		}(i)
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[201] != 4 || count[402] != 16 {
		t.Fatalf("statuses %v; want 4×201 and 16×402", count)
	}
	if n := len(alice.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens")); n != 5 {
		t.Fatalf("%d tokens held", n)
	}
}
