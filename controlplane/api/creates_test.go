package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// notCreates are the POST routes that answer 201 or 202 and yet take no
// Idempotency-Key, each with the reason a retry is already safe.
var notCreates = map[string]string{
	// A second call on an import already restoring answers that restore
	// (imports.Service.Complete): the import's own state is the key.
	"POST /api/app/imports/{id}/complete": "repeats answer the restore already started",
	// The same for the object-store path (imports.Service.Finalize).
	"POST /api/app/imports/{id}/multipart/finalize": "repeats answer the restore already started",
	// RFC 7591 registration: anonymous, so there is no account whose keys
	// a key could be kept under; bounded per address instead.
	"POST /api/connect/register": "anonymous (RFC 7591); bounded per address",
}

// TestEveryCreateTakesAnIdempotencyKey walks the router: every POST that
// makes something (its success is 201 Created or 202 Accepted: a new
// resource, or a job) takes an Idempotency-Key, as the addendum says,
// unless it is listed in notCreates with the reason a retry is safe
// without one. A new create route that forgets the key fails here.
func TestEveryCreateTakesAnIdempotencyKey(t *testing.T) {
	s := st.Single(t, st.Options{})
	seen := map[string]bool{}
	for _, rt := range s.Router().Routes() {
		if rt.Method != http.MethodPost || rt.Internal {
			continue
		}
		seen[rt.Pattern()] = true
		if rt.Status != http.StatusCreated && rt.Status != http.StatusAccepted {
			continue
		}
		_, exempt := notCreates[rt.Pattern()]
		switch {
		case rt.Idempotent && exempt:
			t.Errorf("%s takes an Idempotency-Key: remove it from notCreates", rt.Pattern())
		case !rt.Idempotent && !exempt:
			t.Errorf("%s answers %d (it makes something) but ignores Idempotency-Key: a retry makes it twice", rt.Pattern(), rt.Status)
		}
	}
	for p := range notCreates {
		if !seen[p] {
			t.Errorf("notCreates names %s, which is no route", p)
		}
	}
}

// TestOperatorCreatesReplay: operator tokens and join tokens made twice
// under one key are made once, and the retry gets the same secret.
func TestOperatorCreatesReplay(t *testing.T) {
	s := st.Single(t, st.Options{})
	op := st.Operator(t, s)
	for _, c := range []struct{ path, body, list, secret string }{
		{"/api/admin/operator-tokens", `{"name":"ci"}`, "operatorTokens", "token"},
		{"/api/admin/join-tokens", `{"role":"agent"}`, "joinTokens", "token"},
	} {
		before := len(op.Do("GET", c.path, nil).Must(t, 200).List(c.list))
		first := op.Do("POST", c.path, json.RawMessage(c.body), "Idempotency-Key", "op-"+c.list).Must(t, 201)
		again := op.Do("POST", c.path, json.RawMessage(c.body), "Idempotency-Key", "op-"+c.list).Must(t, 201)
		if !bytes.Equal(first.Raw, again.Raw) || first.Str(c.secret) == "" {
			t.Fatalf("%s: the retry is not the first answer:\n first %s\n again %s", c.path, first.Raw, again.Raw)
		}
		if n := len(op.Do("GET", c.path, nil).Must(t, 200).List(c.list)); n != before+1 {
			t.Fatalf("%s: %d made by a create and its retry, want 1", c.path, n-before)
		}
	}
}
