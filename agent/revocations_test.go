package agent

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/agentmetrics"
	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/templates"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/revocation"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/rpclimit"
	"github.com/sandboxd/sandboxd/internal/siteingress"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// backends is the ingress's view of the node's sites.
type backends map[string]string

func (b backends) Backend(id string) (string, bool) { a, ok := b[id]; return a, ok }
func (b backends) Hold(context.Context, string) (func(), error) {
	return func() {}, nil
}

// TestRevokedMembersRefusedBeforeExpiry: an operator revokes an edge and
// a server of a running cluster. The node's agent, heartbeating to the
// real control plane, turns both away at its listeners' TLS handshakes
// days before their certificates expire, cuts the edge's open ingress
// connection, keeps serving the members still honoured, and a restarted
// agent refuses them before it has reached the control plane.
func TestRevokedMembersRefusedBeforeExpiry(t *testing.T) {
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.HeartbeatInterval = 50 * time.Millisecond }})
	node := st.Member(t, s, pki.RoleAgent, "n1")
	edge := st.Member(t, s, pki.RoleEdge, "e1")
	otherEdge := st.Member(t, s, pki.RoleEdge, "e2")
	peer := st.Member(t, s, pki.RoleServer, "s2")

	// The agent, with its real registration and heartbeat loop and its
	// two listeners as New makes them.
	mgr, err := sites.New(sites.Config{Dir: t.TempDir(), Network: noNetwork{}, UIDs: noUIDs{}})
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := images.Load(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	a := &Agent{cfg: Config{NodeID: "n1", DataDir: dataDir, ControlPlane: []string{s.ClusterURL()}},
		log: slog.New(slog.DiscardHandler), creds: node, catalog: catalog, sites: mgr, templates: templates.New(templates.Config{Sites: mgr}), metrics: agentmetrics.New(),
		registered: make(chan struct{}), done: make(chan struct{})}
	a.servers.Store(&a.cfg.ControlPlane)
	a.registry = agentv1connect.NewRegistryServiceClient(node.FailoverClient(a.Servers, pki.RoleServer), rpcauth.ControlPlane,
		rpclimit.RegistryClient()...)
	a.openRevocations()
	if a.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	a.url = "https://" + a.ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })
	a.serveService(mux)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "site") }))
	defer site.Close()
	if err := a.serveIngress(backends{"site_a": strings.TrimPrefix(site.URL, "http://")}); err != nil {
		t.Fatal(err)
	}
	defer a.closeParts()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { defer close(a.done); a.loop(ctx) }()
	defer func() { cancel(); <-a.done }()
	st.Await(t, a.Registered(), 10*time.Second, "the agent to register")

	// A request on an ingress connection (kept open: HTTP keep-alive).
	request := func(c net.Conn, r *bufio.Reader) (string, error) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: shop.example\r\n\r\n"); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	dial := func(creds *rpcauth.Creds) (net.Conn, *bufio.Reader, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := siteingress.Dial(ctx, a.ingress.Addr(), creds.ClientTLS("n1", pki.RoleAgent), "site_a")
		if err != nil {
			return nil, nil, err
		}
		return c, bufio.NewReader(c), nil
	}
	visit := func(creds *rpcauth.Creds) error {
		c, r, err := dial(creds)
		if err != nil {
			return err
		}
		defer c.Close()
		body, err := request(c, r)
		if err == nil && body != "site" {
			err = fmt.Errorf("answered %q", body)
		}
		return err
	}
	get := func(client *http.Client) error {
		resp, err := client.Get(a.url + "/ping")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	ping := func(creds *rpcauth.Creds) error {
		client := creds.Client("n1", pki.RoleAgent)
		defer client.CloseIdleConnections()
		return get(client)
	}

	open, openR, err := dial(edge)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if body, err := request(open, openR); err != nil || body != "site" {
		t.Fatalf("the edge through the ingress: %q %v", body, err)
	}
	// A server's connection, kept open (HTTP/2).
	held := peer.Client("n1", pki.RoleAgent)
	defer held.CloseIdleConnections()
	if err := get(held); err != nil {
		t.Fatalf("a server calling the agent: %v", err)
	}

	op := st.Operator(t, s)
	op.Do("DELETE", "/api/admin/members/edge/e1", nil).Must(t, 200)
	op.Do("DELETE", "/api/admin/members/server/s2", nil).Must(t, 200)
	if left := time.Until(edge.Leaf().NotAfter); left < 6*24*time.Hour {
		t.Fatalf("the edge's certificate expires in %s: the test proves nothing", left)
	}

	st.WaitFor(t, 10*time.Second, "the agent to refuse the revoked edge", func() bool { return visit(edge) != nil })
	// Refused at the handshake: no HTTP answer at all (a request
	// refused later would get a status).
	if err := visit(edge); err == nil || strings.Contains(err.Error(), "answered") {
		t.Fatalf("a revoked edge's new connection: %v, want a refused TLS handshake", err)
	}
	if err := ping(peer); err == nil || strings.HasPrefix(err.Error(), "status") {
		t.Fatalf("a revoked server calling the agent: %v, want a refused TLS handshake", err)
	}
	// What they had open gets no further: the server's next request on
	// its connection is refused, the edge's connection is cut.
	if err := get(held); err == nil || err.Error() != "status 401" {
		t.Fatalf("a revoked server's open connection: %v, want 401", err)
	}
	// Cut right after new handshakes are refused: a request sent in
	// between may still be answered, none after.
	var cutErr error
	for deadline := time.Now().Add(5 * time.Second); cutErr == nil && time.Now().Before(deadline); {
		if _, cutErr = request(open, openR); cutErr == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if cutErr == nil {
		t.Fatal("the revoked edge's open connection still answers")
	} else if strings.Contains(cutErr.Error(), "timeout") {
		t.Fatalf("the revoked edge's open connection was not cut: %v", cutErr)
	}
	if err := visit(otherEdge); err != nil {
		t.Fatalf("an edge still honoured: %v", err)
	}

	// A restarted agent refuses them from what it kept, before any
	// heartbeat.
	kept, err := revocation.Open(filepath.Join(dataDir, revocationsFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		leaf *x509.Certificate
		ok   bool
	}{{"the revoked edge", edge.Leaf(), false}, {"the revoked server", peer.Leaf(), false}, {"another edge", otherEdge.Leaf(), true}} {
		if err := kept.Peer(c.leaf); (err == nil) != c.ok {
			t.Errorf("%s after a restart: %v", c.name, err)
		}
	}
}
