package edge_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/pki"
)

// selfSigned writes a certificate for *.localhost and returns its files
// and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "*.localhost"},
		DNSNames: []string{"*.localhost"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestEdgeServesHTTPSFromAConfiguredCertificate(t *testing.T) {
	var proto string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto = r.Header.Get("X-Forwarded-Proto")
		io.WriteString(w, "ok")
	}))
	defer backend.Close()
	bu, _ := url.Parse(backend.URL)
	port, _ := strconv.Atoi(bu.Port())

	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	ctx := context.Background()
	now := time.Now().UTC()
	for _, c := range []fsm.Command{
		fsm.UpsertNode{Node: state.Node{ID: "n1", Address: "http://127.0.0.1:1", BackendHost: "127.0.0.1"}},
		fsm.CreateSiteWithJob{Site: state.Site{ID: "site_tls1", WorkspaceID: alice.Personal, UserID: alice.ID, Slug: "secure-ab12c",
			Status: state.SiteReady, Port: port, URL: "https://secure-ab12c.localhost", NodeID: "n1", CreatedAt: now, UpdatedAt: now},
			Job: state.Job{ID: "job_tls1", Type: "none", WorkspaceID: alice.Personal, CreatedAt: now}},
	} {
		if _, err := s.Node().Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	certFile, keyFile, pool := selfSigned(t)
	e, err := edge.New(edge.Config{ControlPlane: []string{s.ClusterURL()}, Creds: st.Member(t, s, pki.RoleEdge, "edge-"+randName()), Addr: "127.0.0.1:0",
		TLSAddr: "127.0.0.1:0", TLSCertFile: certFile, TLSKeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	defer e.Close()
	st.Await(t, e.Ready(), time.Minute, "the edge's route table")
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, e.TLSAddr())
		},
	}}
	resp, err := c.Get("https://secure-ab12c.localhost/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "ok" || proto != "https" {
		t.Fatalf("https: %d %q, backend saw proto %q", resp.StatusCode, b, proto)
	}
	if _, err := edge.New(edge.Config{ControlPlane: []string{s.ClusterURL()}, Creds: st.Member(t, s, pki.RoleEdge, "edge-bad"), Addr: "127.0.0.1:0", TLSAddr: "127.0.0.1:0", TLSCertFile: "/nonexistent", TLSKeyFile: keyFile}); err == nil {
		t.Fatal("a missing certificate was accepted")
	}
}
