package edge_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/dnstest"
	"github.com/sandboxd/sandboxd/internal/pebbletest"
	"github.com/sandboxd/sandboxd/internal/pki"
)

// TestCustomDomainCertificatesFromPebble: active custom domains get
// certificates from a real ACME CA (Pebble) on their first handshake,
// ordered once for every edge: the edge that orders is not the one the
// CA validates against (it answers from the storage they share), for
// HTTP-01 and for TLS-ALPN-01 alike, and another edge then serves the
// same certificate without ordering again. A name that is no active
// domain gets no order, and plain HTTP to an active domain goes to https, and its site's sandbox
// host to the domain.
func TestCustomDomainCertificatesFromPebble(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "wordpress at "+r.Host+" proto "+r.Header.Get("X-Forwarded-Proto"))
	}))
	defer backend.Close()
	bu, _ := url.Parse(backend.URL)
	port, _ := strconv.Atoi(bu.Port())

	dns := dnstest.Start(t)
	for _, name := range []string{"shop.example.com", "alpn.example.com", "notours.example.com", "box1.sandbox.example.net"} {
		dns.Set(t, name, "A 127.0.0.1")
	}
	// The CA validates against edge A's ports; the other edges order.
	httpA, tlsA := st.FreeAddr(t), st.FreeAddr(t)
	pebble := pebbletest.Start(t, pebbletest.Options{HTTPPort: portOf(t, httpA), TLSPort: portOf(t, tlsA), DNSServer: dns.Addr})

	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	ctx := context.Background()
	now := time.Now().UTC()
	cmds := []fsm.Command{
		fsm.UpsertNode{Node: state.Node{ID: "n1", Address: "http://127.0.0.1:1", BackendHost: "127.0.0.1"}},
	}
	for i, host := range []string{"shop.example.com", "alpn.example.com"} {
		id := "site_acme" + strconv.Itoa(i)
		cmds = append(cmds,
			fsm.CreateSiteWithJob{Site: state.Site{ID: id, WorkspaceID: alice.Personal, UserID: alice.ID, Slug: "acme" + strconv.Itoa(i),
				Status: state.SiteReady, Port: port, URL: "http://acme" + strconv.Itoa(i) + ".localhost", NodeID: "n1", CreatedAt: now, UpdatedAt: now},
				Job: state.Job{ID: "job_acme" + strconv.Itoa(i), Type: "none", WorkspaceID: alice.Personal, CreatedAt: now}},
			fsm.ConnectDomain{Domain: state.Domain{SiteID: id, WorkspaceID: alice.Personal, Hostname: host, CreatedAt: now, UpdatedAt: now}},
			fsm.PutDomain{Domain: state.Domain{SiteID: id, Hostname: host, Status: state.DomainActive, VerifiedAt: &now, UpdatedAt: now}})
	}
	// A sandbox host under a real-looking sandbox domain, for an edge that
	// gets sandbox hosts their certificates.
	cmds = append(cmds, fsm.CreateSiteWithJob{Site: state.Site{ID: "site_box1", WorkspaceID: alice.Personal, UserID: alice.ID, Slug: "box1",
		Status: state.SiteReady, Port: port, URL: "http://box1.sandbox.example.net", NodeID: "n1", CreatedAt: now, UpdatedAt: now},
		Job: state.Job{ID: "job_box1", Type: "none", WorkspaceID: alice.Personal, CreatedAt: now}})
	// notours.example.com points at the edges but is only pending.
	cmds = append(cmds, fsm.CreateSiteWithJob{Site: state.Site{ID: "site_acmex", WorkspaceID: alice.Personal, UserID: alice.ID, Slug: "acmex",
		Status: state.SiteReady, Port: port, URL: "http://acmex.localhost", NodeID: "n1", CreatedAt: now, UpdatedAt: now},
		Job: state.Job{ID: "job_acmex", Type: "none", WorkspaceID: alice.Personal, CreatedAt: now}},
		fsm.ConnectDomain{Domain: state.Domain{SiteID: "site_acmex", WorkspaceID: alice.Personal, Hostname: "notours.example.com", CreatedAt: now, UpdatedAt: now}})
	for _, c := range cmds {
		if _, err := s.Node().Apply(ctx, c); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
	}

	logA := &st.LogBuffer{}
	newEdge := func(id, addr, tlsAddr string, acme edge.ACMEConfig) *edge.Edge {
		acme.CA, acme.Roots = pebble.Directory, pebble.ServerRoots
		log := slog.New(slog.DiscardHandler)
		if id == "edge-a" {
			log = slog.New(slog.NewTextHandler(logA, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		e, err := edge.New(edge.Config{ID: id, ControlPlane: []string{s.ClusterURL()}, Creds: st.Member(t, s, pki.RoleEdge, "edge-"+randName()), Addr: addr, TLSAddr: tlsAddr, ACME: acme, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		e.Start()
		t.Cleanup(func() { e.Close() })
		st.Await(t, e.Ready(), time.Minute, "the edge's route table")
		return e
	}
	a := newEdge("edge-a", httpA, tlsA, edge.ACMEConfig{})
	b := newEdge("edge-b", "127.0.0.1:0", "127.0.0.1:0", edge.ACMEConfig{DisableTLSALPNChallenge: true})
	c := newEdge("edge-c", "127.0.0.1:0", "127.0.0.1:0", edge.ACMEConfig{DisableHTTPChallenge: true})
	roots := pebble.IssuerRoots(t)

	get := func(e *edge.Edge, host string) (*http.Response, string, error) {
		client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, e.TLSAddr())
			},
		}}
		resp, err := client.Get("https://" + host + "/")
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body), nil
	}
	serial := func(resp *http.Response) string { return resp.TLS.PeerCertificates[0].SerialNumber.String() }

	// HTTP-01: edge B orders, the CA's request reaches edge A.
	resp, body, err := get(b, "shop.example.com")
	if err != nil {
		t.Fatalf("https via edge B: %v\npebble:\n%s", err, pebble.Log())
	}
	if resp.StatusCode != 200 || body != "wordpress at shop.example.com proto https" {
		t.Fatalf("https via edge B: %d %q", resp.StatusCode, body)
	}
	if got := pebble.Orders(); got != 1 {
		t.Fatalf("orders after the first handshake: %d, want 1", got)
	}
	if !strings.Contains(pebble.Log(), "validate w/ HTTP: http://shop.example.com:") ||
		!strings.Contains(logA.String(), `challenge=http-01`) {
		t.Fatalf("the CA did not validate shop.example.com over HTTP-01 at edge A:\npebble:\n%s\nedge A:\n%s", pebble.Log(), logA.String())
	}
	shopSerial := serial(resp)
	// Edge A serves the same certificate from the shared storage.
	resp, _, err = get(a, "shop.example.com")
	if err != nil {
		t.Fatalf("https via edge A: %v", err)
	}
	if serial(resp) != shopSerial || pebble.Orders() != 1 {
		t.Fatalf("edge A: serial %s (edge B %s), %d orders: the certificate was not shared", serial(resp), shopSerial, pebble.Orders())
	}

	// TLS-ALPN-01: edge C orders, edge A answers the CA's handshake.
	resp, _, err = get(c, "alpn.example.com")
	if err != nil {
		t.Fatalf("https via edge C: %v\npebble:\n%s", err, pebble.Log())
	}
	if resp.StatusCode != 200 || resp.TLS.PeerCertificates[0].VerifyHostname("alpn.example.com") != nil {
		t.Fatalf("https via edge C: %d, certificate for %v", resp.StatusCode, resp.TLS.PeerCertificates[0].DNSNames)
	}
	if strings.Contains(pebble.Log(), "http://alpn.example.com") || !strings.Contains(logA.String(), `challenge=tls-alpn-01`) {
		t.Fatalf("the CA did not validate alpn.example.com over TLS-ALPN-01 at edge A:\npebble:\n%s\nedge A:\n%s", pebble.Log(), logA.String())
	}
	if got := pebble.Orders(); got != 2 {
		t.Fatalf("orders after the second name: %d, want 2", got)
	}
	if _, _, err := get(b, "alpn.example.com"); err != nil || pebble.Orders() != 2 {
		t.Fatalf("edge B on the second name: %v, %d orders", err, pebble.Orders())
	}

	// A name that is no active domain: no certificate, no order.
	if _, _, err := get(a, "notours.example.com"); err == nil {
		t.Fatal("a pending domain got a certificate")
	}
	if _, _, err := get(b, "elsewhere.example.net"); err == nil {
		t.Fatal("an unknown name got a certificate")
	}
	if got := pebble.Orders(); got != 2 {
		t.Fatalf("orders after handshakes for names that are not served: %d, want 2", got)
	}

	// Sandbox hosts get certificates only from an edge told to get them.
	if _, _, err := get(b, "box1.sandbox.example.net"); err == nil || pebble.Orders() != 2 {
		t.Fatalf("a sandbox host got a certificate from an edge not told to: %v, %d orders", err, pebble.Orders())
	}
	d := newEdge("edge-d", "127.0.0.1:0", "127.0.0.1:0", edge.ACMEConfig{SandboxHosts: true})
	resp, body, err = get(d, "box1.sandbox.example.net")
	if err != nil || resp.StatusCode != 200 || body != "wordpress at box1.sandbox.example.net proto https" || pebble.Orders() != 3 {
		t.Fatalf("a sandbox host from an edge with SandboxHosts: %v %v %q, %d orders", err, resp, body, pebble.Orders())
	}
	// … but not the sandbox host of a site that moved to its domain.
	if _, _, err := get(d, "acme0.localhost"); err == nil || pebble.Orders() != 3 {
		t.Fatalf("the sandbox host of a site on its domain: %v, %d orders", err, pebble.Orders())
	}

	// Plain HTTP to an active domain is sent to https; a sandbox host is not.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", "http://"+a.Addr()+"/wp-admin/?x=1", nil)
	req.Host = "shop.example.com"
	hr, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	want := "https://shop.example.com:" + strconv.Itoa(portOf(t, a.TLSAddr())) + "/wp-admin/?x=1"
	if hr.StatusCode != http.StatusPermanentRedirect || hr.Header.Get("Location") != want {
		t.Fatalf("http on an active domain: %d %q, want 308 %q", hr.StatusCode, hr.Header.Get("Location"), want)
	}
	// The sandbox host of a site on its domain leads there (temporarily:
	// the domain may go); one whose domain is pending serves as before.
	req.Host = "acme0.localhost"
	hr, err = noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != http.StatusTemporaryRedirect || hr.Header.Get("Location") != "https://shop.example.com/wp-admin/?x=1" {
		t.Fatalf("http on the sandbox host of a site on its domain: %d %q", hr.StatusCode, hr.Header.Get("Location"))
	}
	req.Host = "acmex.localhost"
	hr, err = noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != 200 {
		t.Fatalf("http on a sandbox host: %d, want 200", hr.StatusCode)
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}
