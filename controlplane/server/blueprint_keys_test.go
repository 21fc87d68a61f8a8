package server_test

import (
	"bytes"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// TestBlueprintCreatesTakeIdempotencyKeys: a site made from a Blueprint,
// a Blueprint applied to a site and a bake, each sent twice under one
// Idempotency-Key, make one site, one run and one template, and the
// second answer is the first byte for byte; another body under the key
// is refused.
func TestBlueprintCreatesTakeIdempotencyKeys(t *testing.T) {
	s := st.Single(t, st.Options{})
	startStepAgent(t, s)
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	bp := alice.Do("POST", "/api/app/blueprints", map[string]any{"name": "Keys", "source": `{"steps":[]}`}).Must(t, 201).Str("blueprint.id")
	count := func(path, list string) int { return len(alice.Do("GET", path, nil).Must(t, 200).List(list)) }
	twice := func(path string, body map[string]any, key string) *st.Response {
		t.Helper()
		first := alice.Do("POST", path, body, "Idempotency-Key", key).Must(t, 202)
		again := alice.Do("POST", path, body, "Idempotency-Key", key).Must(t, 202)
		if !bytes.Equal(first.Raw, again.Raw) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s: the retry is not the first answer:\n first %s\n again %s", path, first.Raw, again.Raw)
		}
		body["name"] = "Another"
		if r := alice.Do("POST", path, body, "Idempotency-Key", key).Must(t, 409); r.Code() != "idempotency_key_reused" {
			t.Fatalf("%s: another body under the key: %s", path, r.Raw)
		}
		return first
	}

	made := twice("/api/app/blueprints/"+bp+"/sites", map[string]any{"name": "Once"}, "site-1")
	if n := count("/api/app/sites", "sites"); n != 1 {
		t.Fatalf("%d sites after a create and its retry, want 1", n)
	}
	site := made.Str("site.id")
	st.WaitFor(t, 20*time.Second, "the site to be ready", func() bool {
		return alice.Do("GET", "/api/app/sites/"+site, nil).Must(t, 200).Str("site.status") == "ready"
	})
	waitRun(t, alice, bp, made.Str("run.id"))

	applied := alice.Do("POST", "/api/app/sites/"+site+"/blueprint", map[string]any{"blueprintId": bp}, "Idempotency-Key", "apply-1").Must(t, 202)
	again := alice.Do("POST", "/api/app/sites/"+site+"/blueprint", map[string]any{"blueprintId": bp}, "Idempotency-Key", "apply-1").Must(t, 202)
	if !bytes.Equal(applied.Raw, again.Raw) {
		t.Fatalf("apply: the retry is not the first answer:\n first %s\n again %s", applied.Raw, again.Raw)
	}
	if n := count("/api/app/blueprints/"+bp+"/runs", "runs"); n != 2 {
		t.Fatalf("%d runs after a create, an apply and its retry, want 2", n)
	}

	twice("/api/app/blueprints/"+bp+"/bake", map[string]any{"name": "Baked"}, "bake-1")
	if n := count("/api/app/templates", "templates"); n != 1 {
		t.Fatalf("%d templates after a bake and its retry, want 1", n)
	}
}
