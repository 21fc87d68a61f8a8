package siteingress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/siteingress"
)

type sites map[string]string

func (s sites) Backend(id string) (string, bool) { a, ok := s[id]; return a, ok }
func (s sites) Hold(context.Context, string) (func(), error) {
	return func() {}, nil
}

// sleepy is a node whose sites wake when held; site_broken cannot.
type sleepy struct {
	sites
	mu     sync.Mutex
	holds  map[string]int // taken
	active map[string]int // not yet released
}

func (s *sleepy) Hold(_ context.Context, id string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holds[id]++
	if id == "site_broken" {
		return nil, errors.New("its disk is gone")
	}
	s.active[id]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.active[id]--
	}, nil
}

func (s *sleepy) count(id string) (holds, active int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds[id], s.active[id]
}

// member issues credentials for id under ca.
func member(t *testing.T, ca *pki.CA, id pki.Identity) *rpcauth.Creds {
	t.Helper()
	key, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := pki.EncodeKey(key)
	certPEM, _, err := ca.Issue(id, key.Public(), time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := rpcauth.NewCreds(certPEM, keyPEM, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestIngress: an edge's certificate reaches a site of the node by its
// id; anything else — another role, another cluster, the wrong node, an
// unknown site, an address instead of a site id — reaches nothing.
func TestIngress(t *testing.T) {
	ca, _, err := pki.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := pki.NewCA("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "site at %s%s", r.Host, r.URL.Path)
	}))
	defer site.Close()
	secret := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "node secret") }))
	defer secret.Close()

	node := member(t, ca, pki.Identity{Role: pki.RoleAgent, ID: "node-1"})
	cfg := node.ServerTLS(true)
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		_, err := pki.Verify(cs.PeerCertificates, node.Roots(), time.Now(), pki.RoleEdge)
		return err
	}
	in, err := siteingress.Listen("127.0.0.1:0", cfg, sites{"site_a": strings.TrimPrefix(site.URL, "http://")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go in.Serve()
	defer in.Close()

	get := func(creds *rpcauth.Creds, nodeID, siteID string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := siteingress.Dial(ctx, in.Addr(), creds.ClientTLS(nodeID, pki.RoleAgent), siteID)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /hello HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n"); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	edge := member(t, ca, pki.Identity{Role: pki.RoleEdge, ID: "edge-1"})
	if body, err := get(edge, "node-1", "site_a"); err != nil || body != "site at shop.example/hello" {
		t.Fatalf("an edge to its site: %q %v", body, err)
	}
	for _, c := range []struct {
		name   string
		creds  *rpcauth.Creds
		node   string
		siteID string
	}{
		{"an agent's certificate", member(t, ca, pki.Identity{Role: pki.RoleAgent, ID: "node-2"}), "node-1", "site_a"},
		{"a server's certificate", member(t, ca, pki.Identity{Role: pki.RoleServer, ID: "server-1"}), "node-1", "site_a"},
		{"another cluster's edge", member(t, other, pki.Identity{Role: pki.RoleEdge, ID: "edge-1"}), "node-1", "site_a"},
		{"the wrong node", edge, "node-9", "site_a"},
		{"an unknown site", edge, "node-1", "site_nope"},
		{"an address", edge, "node-1", strings.TrimPrefix(secret.URL, "http://")},
	} {
		body, err := get(c.creds, c.node, c.siteID)
		if err == nil || strings.Contains(body, "secret") || strings.Contains(body, "site at") {
			t.Errorf("%s: %q %v", c.name, body, err)
		}
	}

	// A client that never finishes its preamble is cut, and nothing
	// without a certificate gets past the handshake.
	raw, err := net.Dial("tcp", in.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	io.WriteString(raw, "sandboxd-site site_a\n")
	_ = raw.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadAll(raw); err != nil && strings.Contains(err.Error(), "timeout") {
		t.Fatal("a plain TCP client was kept")
	}
}

// TestIngressWakesSites: a connection an edge opens holds its site
// awake (woken first if it slept) before the site sees a byte, for as
// long as it lasts, every request on it included; a site that cannot be
// woken gets the edge a 503 it recognises, and is never dialled.
func TestIngressWakesSites(t *testing.T) {
	ca, _, err := pki.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var node *sleepy
	var served atomic.Int32
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if _, active := node.count("site_a"); active != 1 {
			t.Errorf("a request reached the site with %d holds on it", active)
		}
		io.WriteString(w, "ok")
	}))
	defer site.Close()
	addr := strings.TrimPrefix(site.URL, "http://")
	node = &sleepy{sites: sites{"site_a": addr, "site_broken": addr}, holds: map[string]int{}, active: map[string]int{}}
	creds := member(t, ca, pki.Identity{Role: pki.RoleAgent, ID: "node-1"})
	in, err := siteingress.Listen("127.0.0.1:0", creds.ServerTLS(true), node, nil)
	if err != nil {
		t.Fatal(err)
	}
	go in.Serve()
	defer in.Close()
	edge := member(t, ca, pki.Identity{Role: pki.RoleEdge, ID: "edge-1"})
	dial := func(id string) (net.Conn, *bufio.Reader) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := siteingress.Dial(ctx, in.Addr(), edge.ClientTLS("node-1", pki.RoleAgent), id)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	c, br := dial("site_a")
	for i := 1; i <= 3; i++ {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if holds, active := node.count("site_a"); resp.StatusCode != 200 || holds != 1 || active != 1 {
			t.Fatalf("request %d: %d, %d holds taken, %d active", i, resp.StatusCode, holds, active)
		}
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for _, active := node.count("site_a"); active != 0 && time.Now().Before(deadline); _, active = node.count("site_a") {
		time.Sleep(10 * time.Millisecond)
	}
	if _, active := node.count("site_a"); active != 0 {
		t.Fatal("a closed connection still holds its site")
	}

	before := served.Load()
	b, bbr := dial("site_broken")
	defer b.Close()
	io.WriteString(b, "GET / HTTP/1.1\r\nHost: b.example\r\n\r\n")
	resp, err := http.ReadResponse(bbr, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(siteingress.WakeFailedHeader) != "failed" ||
		resp.Header.Get("Retry-After") == "" || strings.Contains(string(body), "disk") {
		t.Fatalf("a site that cannot wake: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if served.Load() != before {
		t.Fatal("the site that could not wake was reached")
	}
}
