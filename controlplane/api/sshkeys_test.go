package api_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/controlplane/plans"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

func authorizedKey(t *testing.T, pub any) string {
	t.Helper()
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

func TestSSHKeys(t *testing.T) {
	limits := plans.Default()
	limits.Free.SSHKeys = 2
	s := st.Single(t, st.Options{Plans: &limits})
	alice := st.NewAccount(t, s, "alice@example.com", "free")
	bob := st.NewAccount(t, s, "bob@example.com", "free")
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	line := authorizedKey(t, pub)

	r := alice.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "laptop", "publicKey": line + " alice@laptop"}).Must(t, 201)
	id := r.Str("sshKey.id")
	if !strings.HasPrefix(id, "key_") || r.Str("sshKey.type") != "ssh-ed25519" || r.Str("sshKey.publicKey") != line ||
		!strings.HasPrefix(r.Str("sshKey.fingerprint"), "SHA256:") || r.Get("sshKey.lastUsedAt") != nil {
		t.Fatalf("add: %s", r.Raw)
	}
	if got := alice.Do("GET", "/api/account/ssh-keys", nil).Must(t, 200).List("sshKeys"); len(got) != 1 || got[0]["id"] != id {
		t.Fatalf("list: %v", got)
	}
	if got := bob.Do("GET", "/api/account/ssh-keys", nil).Must(t, 200).List("sshKeys"); len(got) != 0 {
		t.Fatalf("bob sees alice's keys: %v", got)
	}
	// One key, one account: not twice, not on another account.
	for _, c := range []*st.Account{alice, bob} {
		if r := c.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "again", "publicKey": line}); r.Status != 409 || r.Code() != "conflict" {
			t.Fatalf("the same key again: %d %s", r.Status, r.Raw)
		}
	}
	weak, _ := rsa.GenerateKey(rand.Reader, 2048)
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"name": "x", "publicKey": authorizedKey(t, &weak.PublicKey)}, "publicKey"},
		{map[string]any{"name": "x", "publicKey": "-----BEGIN OPENSSH PRIVATE KEY-----"}, "publicKey"},
		{map[string]any{"name": "x", "publicKey": "not a key"}, "publicKey"},
		{map[string]any{"name": "", "publicKey": line}, "name"},
		{map[string]any{"name": "x", "publicKey": line, "admin": true}, "admin"},
	} {
		if r := alice.Do("POST", "/api/account/ssh-keys", c.body); r.Status != 400 || r.Details()["field"] != c.field {
			t.Errorf("%v: %d %s", c.body, r.Status, r.Raw)
		}
	}
	second, _, _ := ed25519.GenerateKey(rand.Reader)
	alice.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "ci", "publicKey": authorizedKey(t, second)}).Must(t, 201)
	third, _, _ := ed25519.GenerateKey(rand.Reader)
	if r := alice.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "more", "publicKey": authorizedKey(t, third)}); r.Status != 402 ||
		r.Code() != "plan_limit_reached" || r.Details()["resource"] != "sshKeys" {
		t.Fatalf("over the plan: %d %s", r.Status, r.Raw)
	}
	if r := bob.Do("DELETE", "/api/account/ssh-keys/"+id, nil); r.Status != 404 || r.Code() != "ssh_key_not_found" {
		t.Fatalf("bob deletes alice's key: %d %s", r.Status, r.Raw)
	}
	alice.Do("DELETE", "/api/account/ssh-keys/"+id, nil).Must(t, 200)
	if r := alice.Do("DELETE", "/api/account/ssh-keys/"+id, nil); r.Status != 404 {
		t.Fatalf("delete twice: %d", r.Status)
	}
	// Gone from the account, the key is free for another.
	bob.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "now mine", "publicKey": line}).Must(t, 201)
	if u := alice.Do("GET", "/api/account/usage", nil).Must(t, 200); u.Get("usage.counts.sshKeys") != float64(1) {
		t.Fatalf("usage: %s", u.Raw)
	}
}
