package edge_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/dnstest"
	"github.com/sandboxd/sandboxd/internal/pebbletest"
	"github.com/sandboxd/sandboxd/internal/pki"
)

// TestCertificateOrdersStopAtTheirBudget: a tenant that connects,
// activates and disconnects custom domains in a loop, each visited over
// HTTPS once (the handshake orders its certificate), gets as many orders
// from the real ACME CA (Pebble counts them) as its workspace's budget
// and no more, whichever edge the handshakes reach; the domain whose
// order was refused says so, and when the budget refills. A name
// connected again reuses its certificate from storage at no cost, and
// the cluster's budget caps every tenant together.
func TestCertificateOrdersStopAtTheirBudget(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "wordpress at "+r.Host)
	}))
	defer backend.Close()
	bu, _ := url.Parse(backend.URL)
	port, _ := strconv.Atoi(bu.Port())

	dns := dnstest.Start(t)
	httpA, tlsA := st.FreeAddr(t), st.FreeAddr(t)
	pebble := pebbletest.Start(t, pebbletest.Options{HTTPPort: portOf(t, httpA), TLSPort: portOf(t, tlsA), DNSServer: dns.Addr})

	const perWorkspace, cluster = 3, 4
	logs := &st.LogBuffer{}
	s := st.Single(t, st.Options{Logs: logs, Configure: func(c *server.Config) {
		c.CertBudget = state.CertBudget{Cluster: cluster, Workspace: perWorkspace, Window: 3 * time.Hour,
			RegisteredDomain: 40, RegisteredDomainWindow: 7 * 24 * time.Hour, Cooldown: 24 * time.Hour}
	}})
	mallory := st.NewAccount(t, s, "mallory@example.net", "paid")
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	ctx := context.Background()
	now := time.Now().UTC()
	apply := func(cmds ...fsm.Command) {
		t.Helper()
		for _, c := range cmds {
			if _, err := s.Node().Apply(ctx, c); err != nil {
				t.Fatalf("%T: %v", c, err)
			}
		}
	}
	apply(fsm.UpsertNode{Node: state.Node{ID: "n1", Address: "http://127.0.0.1:1", BackendHost: "127.0.0.1"}})
	site := func(a *st.Account, slug string) string {
		id := "site_" + slug
		apply(fsm.CreateSiteWithJob{Site: state.Site{ID: id, WorkspaceID: a.Personal, UserID: a.ID, Slug: slug, Status: state.SiteReady,
			Port: port, URL: "http://" + slug + ".localhost", NodeID: "n1", CreatedAt: now, UpdatedAt: now},
			Job: state.Job{ID: "job_" + slug, Type: "none", WorkspaceID: a.Personal, CreatedAt: now}})
		return id
	}
	squat, shop := site(mallory, "squat"), site(alice, "shop")
	// connect makes host an active domain of a site, as connect and a
	// passing check do; disconnect removes it.
	connect := func(a *st.Account, siteID, host string) {
		t.Helper()
		dns.Set(t, host, "A 127.0.0.1")
		at := time.Now().UTC()
		apply(fsm.ConnectDomain{Domain: state.Domain{SiteID: siteID, WorkspaceID: a.Personal, Hostname: host, CreatedAt: at, UpdatedAt: at}},
			fsm.PutDomain{Domain: state.Domain{SiteID: siteID, Hostname: host, Status: state.DomainActive, VerifiedAt: &at, UpdatedAt: at}})
	}
	disconnect := func(siteID, host string) {
		t.Helper()
		apply(fsm.DisconnectDomain{SiteID: siteID, Hostname: host})
	}

	newEdge := func(id, addr, tlsAddr string) *edge.Edge {
		e, err := edge.New(edge.Config{ID: id, ControlPlane: []string{s.ClusterURL()}, Creds: st.Member(t, s, pki.RoleEdge, "edge-"+randName()),
			Addr: addr, TLSAddr: tlsAddr, ACME: edge.ACMEConfig{CA: pebble.Directory, Roots: pebble.ServerRoots}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		e.Start()
		t.Cleanup(func() { e.Close() })
		return e
	}
	// The CA validates at edge A; handshakes alternate between the edges.
	edges := []*edge.Edge{newEdge("edge-a", httpA, tlsA), newEdge("edge-b", "127.0.0.1:0", "127.0.0.1:0")}
	roots := pebble.IssuerRoots(t)
	// visit is one HTTPS request through e once its route table serves
	// host as an active domain; it returns the certificate's serial.
	visit := func(e *edge.Edge, host string) (string, error) {
		st.WaitFor(t, 20*time.Second, "the edge to route "+host, func() bool {
			r := e.Route(host)
			return r != nil && r.Custom
		})
		return get(e, host, roots)
	}
	defer func() {
		if t.Failed() {
			t.Logf("pebble:\n%s\nserver:\n%s", pebble.Log(), logs.String())
		}
	}()

	// The loop: each name gets a certificate until the workspace's budget
	// is spent, then none.
	var first string
	for i := range 2 * perWorkspace {
		host := "n" + strconv.Itoa(i) + ".squat.example"
		connect(mallory, squat, host)
		serial, err := visit(edges[i%2], host)
		switch {
		case i < perWorkspace && err != nil:
			t.Fatalf("name %d of the loop, within the budget: %v", i, err)
		case i >= perWorkspace && err == nil:
			t.Fatalf("name %d of the loop got a certificate past the workspace's budget of %d (%d orders)", i, perWorkspace, pebble.Orders())
		}
		if i == 0 {
			first = serial
		}
		if i == perWorkspace {
			// The refused domain says why and until when.
			d := mallory.Do("GET", "/api/app/sites/"+squat+"/domain", nil).Must(t, 200)
			msg := d.Str("domain.lastError")
			_, refill, _ := strings.Cut(msg, "refills at ")
			refill, _, _ = strings.Cut(refill, ",")
			at, err := time.Parse(time.RFC3339, refill)
			if d.Str("domain.status") != "active" || !strings.Contains(msg, "workspace's certificate budget (3 orders per 3 hours) is spent") ||
				err != nil || at.Before(now.Add(3*time.Hour-time.Second)) || at.After(time.Now().Add(3*time.Hour)) {
				t.Fatalf("the domain whose order was refused does not say the budget is spent until 3 hours after the first order: %s", d.Raw)
			}
		}
		disconnect(squat, host)
	}
	if got := pebble.Orders(); got != perWorkspace {
		t.Fatalf("the loop placed %d orders with the CA, want the budget's %d", got, perWorkspace)
	}

	// A name connected again serves the certificate it was issued,
	// without an order, although the budget is spent.
	connect(mallory, squat, "n0.squat.example")
	serial, err := visit(edges[1], "n0.squat.example")
	if err != nil || serial != first || pebble.Orders() != perWorkspace {
		t.Fatalf("the first name connected again: %v, serial %s (was %s), %d orders", err, serial, first, pebble.Orders())
	}
	disconnect(squat, "n0.squat.example")

	// Another workspace still orders, until the cluster's budget is spent.
	for i, want := range []bool{true, false} {
		host := "www" + strconv.Itoa(i) + ".shop.example"
		connect(alice, shop, host)
		_, err := visit(edges[0], host)
		if (err == nil) != want {
			t.Fatalf("another workspace's name %d: %v, want a certificate %v (%d orders)", i, err, want, pebble.Orders())
		}
		if !want {
			d := alice.Do("GET", "/api/app/sites/"+shop+"/domain", nil).Must(t, 200)
			if !strings.Contains(d.Str("domain.lastError"), "the service's certificate budget (4 orders per 3 hours for every customer) is spent") {
				t.Fatalf("the domain the cluster's budget refused: %s", d.Raw)
			}
		}
		disconnect(shop, host)
	}
	if got := pebble.Orders(); got != cluster {
		t.Fatalf("%d orders in all, want the cluster's budget of %d", got, cluster)
	}
}

// get is one HTTPS request for host through e's TLS listener; it returns
// the served certificate's serial.
func get(e *edge.Edge, host string, roots *x509.CertPool) (string, error) {
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, e.TLSAddr())
		},
	}}
	resp, err := client.Get("https://" + host + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.TLS.PeerCertificates[0].SerialNumber.String(), nil
}
