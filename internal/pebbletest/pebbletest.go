// Package pebbletest runs Pebble, Let's Encrypt's ACME test server from
// Debian's pebble package, for tests: real orders, real HTTP-01 and
// TLS-ALPN-01 validation against the ports a test names, DNS from the
// test's own server. Missing Pebble fails the test (install-deps.sh
// installs it).
package pebbletest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// T is what Pebble needs of a test: a testing.TB, or the stand-in a
// benchmark command brings.
type T interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Pebble is a running Pebble.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// ServerRoots trusts Pebble's own HTTPS (its listener certificate).
	ServerRoots *x509.CertPool
	// ServerRootFile is that certificate as a PEM file.
	ServerRootFile string
	mgmt           string
	log            *syncBuffer
}

// Options says where Pebble validates challenges and resolves names.
type Options struct {
	// HTTPPort and TLSPort are the ports HTTP-01 and TLS-ALPN-01
	// validation connect to on the address the name resolves to.
	HTTPPort, TLSPort int
	// DNSServer is host:port of the resolver Pebble asks.
	DNSServer string
}

// Start runs Pebble until the test ends.
func Start(t T, o Options) *Pebble {
	t.Helper()
	bin, err := exec.LookPath("pebble")
	if err != nil {
		t.Fatalf("pebble is not installed (deploy/dev/install-deps.sh installs Debian's pebble): %v", err)
	}
	dir := t.TempDir()
	certPEM, keyPEM := serverCert(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	must(t, os.WriteFile(certFile, certPEM, 0o600))
	must(t, os.WriteFile(keyFile, keyPEM, 0o600))
	listen, mgmt := freeAddr(t), freeAddr(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress": listen, "managementListenAddress": mgmt, "certificate": certFile, "privateKey": keyFile,
		"httpPort": o.HTTPPort, "tlsPort": o.TLSPort, "ocspResponderURL": "", "externalAccountBindingRequired": false,
	}}
	b, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	must(t, os.WriteFile(cfgFile, b, 0o600))
	p := &Pebble{Directory: "https://" + listen + "/dir", mgmt: mgmt, log: &syncBuffer{}, ServerRootFile: certFile}
	p.ServerRoots = x509.NewCertPool()
	p.ServerRoots.AppendCertsFromPEM(certPEM)
	cmd := exec.Command(bin, "-config", cfgFile, "-dnsserver", o.DNSServer)
	// No random waits before validation, no rejected nonces: the test is
	// about the edges, not about clients surviving Pebble's chaos.
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	must(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	client := p.Client()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(p.Directory)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble did not start: %v\n%s", err, p.log.String())
		}
		select {
		case <-done:
			t.Fatalf("pebble exited:\n%s", p.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return p
}

// Client trusts Pebble's own HTTPS.
func (p *Pebble) Client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ServerRoots}}}
}

// IssuerRoots trusts the certificates Pebble issues (its root is made
// at start, so it is read from the management interface).
func (p *Pebble) IssuerRoots(t T) *x509.CertPool {
	t.Helper()
	resp, err := p.Client().Get("https://" + p.mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("pebble root: %q", b)
	}
	return pool
}

// Orders counts the new orders Pebble has received.
func (p *Pebble) Orders() int { return strings.Count(p.log.String(), "POST /order-plz") }

// Log is everything Pebble printed.
func (p *Pebble) Log() string { return p.log.String() }

func serverCert(t T) (certPEM, keyPEM []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "pebble test server"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func freeAddr(t T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

func must(t T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(fmt.Errorf("pebbletest: %w", err))
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
