package pki

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

func TestIssueAndVerify(t *testing.T) {
	now := time.Now()
	ca, keyPEM, err := NewCA("test CA", now)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadCA(ca.CertPEM, keyPEM)
	if err != nil || loaded.Fingerprint() != ca.Fingerprint() {
		t.Fatalf("load: %v", err)
	}
	other, _, err := NewCA("another CA", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(ca.CertPEM, mustKeyPEM(t)); err == nil {
		t.Fatal("a CA with a key that is not its own loaded")
	}
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *CA, id Identity, ttl time.Duration, at time.Time) *x509.Certificate {
		t.Helper()
		_, c, err := ca.Issue(id, key.Public(), ttl, at)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	agent := issue(ca, Identity{RoleAgent, "node-1"}, time.Hour, now)
	expired := issue(ca, Identity{RoleAgent, "node-1"}, time.Minute, now.Add(-time.Hour))
	foreign := issue(other, Identity{RoleServer, "server-1"}, time.Hour, now)

	for _, c := range []struct {
		name  string
		cert  *x509.Certificate
		roles []Role
		want  string // error substring; "" means accepted
	}{
		{"an agent as an agent", agent, []Role{RoleAgent}, ""},
		{"an agent where any role will do", agent, nil, ""},
		{"an agent where a server is wanted", agent, []Role{RoleServer, RoleEdge}, "may not"},
		{"an expired certificate", expired, nil, "expired"},
		{"another cluster's certificate", foreign, []Role{RoleServer}, "unknown authority"},
	} {
		id, err := Verify([]*x509.Certificate{c.cert}, ca.Pool(), now, c.roles...)
		switch {
		case c.want == "" && (err != nil || id != (Identity{RoleAgent, "node-1"})):
			t.Errorf("%s: %v %v", c.name, id, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
	for _, bad := range []Identity{{"admin", "x"}, {RoleAgent, ""}, {RoleAgent, "Node"}, {RoleAgent, "a/b"}, {RoleAgent, strings.Repeat("a", 65)}} {
		if _, _, err := ca.Issue(bad, key.Public(), time.Hour, now); err == nil {
			t.Errorf("issued for %q", bad)
		}
	}
}

func TestPublicKeys(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	p, err := EncodePublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePublicKey(p); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", string(mustKeyPEM(t))} {
		if _, err := ParsePublicKey([]byte(bad)); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
}

func mustKeyPEM(t *testing.T) []byte {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	p, err := EncodeKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
