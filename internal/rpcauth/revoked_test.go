package rpcauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/pki"
)

// member makes a member's Creds under ca.
func member(t *testing.T, ca *pki.CA, caPEM []byte, id pki.Identity) *Creds {
	t.Helper()
	key, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.Issue(id, key.Public(), time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCreds(certPEM, keyPEM, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serve runs a server member answering its own name, until the test
// ends; it returns its base URL.
func serve(t *testing.T, c *Creds, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }),
		Protocols: Protocols()}
	go func() { _ = srv.Serve(tls.NewListener(ln, c.ServerTLS(true))) }()
	t.Cleanup(func() { srv.Close() })
	return "https://" + ln.Addr().String()
}

// TestRevokedServerIsLeftAtOnce: an agent's calls to the control plane
// stop reaching a server as soon as its Checker refuses that server,
// though the agent holds an open (HTTP/2) connection to it, which
// heartbeats every two seconds would keep open for ever: it does not act
// on that server's answers, nor stays stuck on it (a handshake it
// refuses is no answer), but goes on to the next server; told that what
// the Checker refuses changed (Recheck), it does not even send the
// refused server its next call.
func TestRevokedServerIsLeftAtOnce(t *testing.T) {
	ca, _, err := pki.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caPEM := ca.CertPEM
	agent := member(t, ca, caPEM, pki.Identity{Role: pki.RoleAgent, ID: "n1"})
	s1 := serve(t, member(t, ca, caPEM, pki.Identity{Role: pki.RoleServer, ID: "s1"}), "s1")
	s2 := serve(t, member(t, ca, caPEM, pki.Identity{Role: pki.RoleServer, ID: "s2"}), "s2")
	var refused sync.Map
	agent.SetChecker(func(id pki.Identity, _ *x509.Certificate) error {
		if _, ok := refused.Load(id.ID); ok {
			return errors.New("revoked")
		}
		return nil
	})
	client := agent.FailoverClient(func() []string { return []string{s1, s2} }, pki.RoleServer)
	call := func() (string, error) {
		resp, err := client.Get(ControlPlane + "/x")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if got, err := call(); err != nil || got != "s1" {
		t.Fatalf("before: %q %v", got, err)
	}
	// Revoked under an open connection, without a word: its answer is
	// refused (the call was sent, so it is not sent again elsewhere).
	refused.Store("s1", true)
	if got, err := call(); err == nil || got == "s1" {
		t.Fatalf("the first call after s1 was revoked: %q %v", got, err)
	}
	for i := range 3 {
		if got, err := call(); err != nil || got != "s2" {
			t.Fatalf("call %d after s1 was revoked: %q %v", i, got, err)
		}
	}
	// Revoked with a word (Recheck): the next call goes elsewhere at once.
	refused.Delete("s1")
	refused.Store("s2", true)
	agent.Recheck()
	for i := range 3 {
		if got, err := call(); err != nil || got != "s1" {
			t.Fatalf("call %d after s2 was revoked and Recheck: %q %v", i, got, err)
		}
	}
}
