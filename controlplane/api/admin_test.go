package api_test

import (
	"testing"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

func TestOperatorRoutes(t *testing.T) {
	s := st.Single(t, st.Options{})
	op := st.NewClient(t, s.URL(), s.OperatorToken())

	acct := op.Do("POST", "/api/admin/accounts", map[string]string{"email": "Ops@Example.com", "plan": "free"}).Must(t, 201)
	if acct.Str("user.email") != "ops@example.com" || acct.Str("user.personalWorkspaceId") == "" {
		t.Fatalf("create: %s", acct.Raw)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		code, field        string
	}{
		{"POST", "/api/admin/accounts", `{"email":"ops@example.com","plan":"free"}`, 409, "conflict", ""},
		{"POST", "/api/admin/accounts", `{"email":"x@example.com","plan":"gold"}`, 400, "invalid_request", "plan"},
		{"POST", "/api/admin/accounts", `{"email":"nope","plan":"free"}`, 400, "invalid_request", "email"},
		{"POST", "/api/admin/accounts", `{"email":"x@example.com"}`, 400, "invalid_request", "plan"},
		{"PUT", "/api/admin/accounts/ghost@example.com/plan", `{"plan":"paid"}`, 404, "account_not_found", ""},
		{"PUT", "/api/admin/accounts/ops@example.com/plan", `{"plan":"enterprise"}`, 400, "invalid_request", "plan"},
		{"POST", "/api/admin/tokens", `{"email":"ghost@example.com"}`, 404, "account_not_found", ""},
		{"POST", "/api/admin/tokens", `{"email":"ops@example.com","name":"bad\u0000name"}`, 400, "invalid_request", "name"},
	} {
		r := op.Do(tc.method, tc.path, tc.body)
		if r.Status != tc.status || r.Code() != tc.code || (tc.field != "" && r.Details()["field"] != tc.field) {
			t.Errorf("%s %s %s: %d %s", tc.method, tc.path, tc.body, r.Status, r.Raw)
		}
	}

	if r := op.Do("PUT", "/api/admin/accounts/OPS@example.com/plan", map[string]string{"plan": "paid"}).Must(t, 200); r.Str("user.plan") != "paid" {
		t.Fatal(r.Raw)
	}
	tok := op.Do("POST", "/api/admin/tokens", map[string]string{"email": "ops@example.com"}).Must(t, 201).Str("secret")
	if me := st.NewClient(t, s.URL(), tok).Do("GET", "/api/account/me", nil).Must(t, 200); me.Str("user.plan") != "paid" {
		t.Fatal(me.Raw)
	}
	if n := len(op.Do("GET", "/api/admin/accounts", nil).Must(t, 200).List("users")); n != 1 {
		t.Fatalf("accounts: %d", n)
	}
	c := op.Do("GET", "/api/admin/cluster", nil).Must(t, 200)
	if c.Str("cluster.state") != "Leader" || len(c.Get("cluster.servers").([]any)) != 1 {
		t.Fatalf("cluster: %s", c.Raw)
	}
	if r := op.As("sbxc_wrong").Do("GET", "/api/admin/accounts", nil).Must(t, 401); r.Code() != "auth_required" {
		t.Fatal(r.Code())
	}
}
