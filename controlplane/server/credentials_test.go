package server_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/secret"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// TestStolenCredentials: each certificate does only its role's work —
// an agent cannot call operator or server routes, an edge cannot
// register a node or write through the API, a node cannot speak for
// another; a revoked member is refused at once; the API port serves none
// of the cluster's paths; Raft takes servers only.
func TestStolenCredentials(t *testing.T) {
	s := st.Single(t, st.Options{})
	ctx := context.Background()
	agent := st.Member(t, s, pki.RoleAgent, "node-1")
	edgeCreds := st.Member(t, s, pki.RoleEdge, "edge-1")

	// An agent's or edge's certificate on the cluster port: no operator
	// routes, no API writes, no Raft membership, no blobs.
	for _, c := range []struct {
		name string
		cl   *st.Client
	}{{"agent", st.PeerClient(t, s, agent)}, {"edge", st.PeerClient(t, s, edgeCreds)}} {
		for _, call := range []struct{ method, path string }{
			{"POST", "/api/admin/accounts"}, {"GET", "/api/admin/accounts"}, {"POST", "/api/admin/join-tokens"},
			{"POST", "/internal/cluster/join"}, {"GET", "/internal/blobs/" + strings.Repeat("ab", 32)}, {"GET", "/api/app/sites"},
		} {
			if r := c.cl.Do(call.method, call.path, map[string]any{"email": "x@example.com", "plan": "paid"}); r.Status != 403 {
				t.Errorf("%s %s %s: %d %s", c.name, call.method, call.path, r.Status, r.Raw)
			}
		}
	}
	// An edge cannot register a node; a node cannot speak for another.
	reg := func(creds *rpcauth.Creds) agentv1connect.RegistryServiceClient {
		return agentv1connect.NewRegistryServiceClient(creds.Client("", pki.RoleServer), s.ClusterURL())
	}
	if _, err := reg(edgeCreds).Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: "edge-1", Address: "https://x"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("an edge registered: %v", err)
	}
	if _, err := reg(agent).Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: "node-2", Address: "https://x"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("node-1 registered node-2: %v", err)
	}
	if _, err := reg(agent).Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: "node-1", Address: "https://127.0.0.1:1"})); err != nil {
		t.Errorf("node-1 registered itself: %v", err)
	}

	// Revoked: refused at the next call, by any server.
	st.Operator(t, s).Do("DELETE", "/api/admin/members/agent/node-1", nil).Must(t, 200)
	if _, err := reg(agent).Heartbeat(ctx, connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: "node-1"})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a revoked node heartbeated: %v", err)
	}
	if r := st.Operator(t, s).Do("DELETE", "/api/admin/members/agent/nobody", nil); r.Status != 404 {
		t.Errorf("revoke unknown member: %d", r.Status)
	}
	if r := st.Operator(t, s).Do("DELETE", "/api/admin/members/admin/x", nil); r.Status != 400 {
		t.Errorf("revoke a bad member id: %d", r.Status)
	}

	// The API port serves none of the cluster's paths, whatever the token.
	for _, path := range []string{"/internal/members/join", "/internal/cluster/join", "/" + agentv1connect.RegistryServiceName + "/Register"} {
		if r := st.Operator(t, s).Do("POST", path, map[string]any{}); r.Status != 404 {
			t.Errorf("%s on the API port: %d", path, r.Status)
		}
	}
	// The cluster port without a certificate: only a join.
	anon := st.NewClient(t, s.ClusterURL(), s.OperatorToken())
	anon.HTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if r := anon.Do("GET", "/api/admin/accounts", nil); r.Status != 401 {
		t.Errorf("no certificate, operator token: %d", r.Status)
	}

	// Raft's port takes servers only (a single-node test server has none,
	// so a cluster is made).
	servers, _ := st.Cluster(t, 2, st.Options{})
	raftAddr := servers[0].Node().RaftAddr()
	for name, cfg := range map[string]*tls.Config{
		"an agent's certificate": st.Member(t, st.Leader(t, servers), pki.RoleAgent, "node-r").ClientTLS("", pki.RoleServer),
		"no certificate":         {InsecureSkipVerify: true},
	} {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", raftAddr, cfg)
		if err == nil {
			// TLS 1.3 reports a refused client certificate at the first read.
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || strings.Contains(err.Error(), "timeout") {
			t.Errorf("raft with %s: %v", name, err)
		}
	}
}

// TestCertificatesRenewThemselves: with a short certificate lifetime, a
// server and a member renew before expiry (a new serial, a new key) and
// go on working.
// TestBootstrapOperatorTokenWorksOnceInItsFile: the operator token a new
// cluster's first server makes appears in <data-dir>/operator-token only
// once its hash is committed, so a script that uses it the moment it
// appears is never refused; a restart keeps it.
func TestBootstrapOperatorTokenWorksOnceInItsFile(t *testing.T) {
	for run := range 3 {
		cfg := st.NodeConfig(t, t.TempDir(), st.FreeAddr(t), st.FreeAddr(t), server.NewSealingKey(), true, nil, st.Options{})
		cfg.FastRaftForTests = false // an operator's timings: the first election takes a while
		s := st.Start(t, cfg)
		file := filepath.Join(cfg.DataDir, "operator-token")
		var tok []byte
		st.WaitFor(t, 20*time.Second, "the operator token file", func() bool {
			var err error
			if tok, err = os.ReadFile(file); err != nil {
				return false
			}
			if op, _ := s.Node().Store().OperatorTokenByHash(secret.Hash(strings.TrimSpace(string(tok)))); op == nil {
				t.Fatalf("run %d: the token is in its file before its hash is in the state", run)
			}
			return true
		})
		op := st.NewClient(t, s.URL(), strings.TrimSpace(string(tok)))
		if r := op.Do("GET", "/api/admin/operator-tokens", nil); r.Status != 200 {
			t.Fatalf("run %d: the token in its file was refused the moment it appeared: %d %s", run, r.Status, r.Raw)
		}
		if _, err := os.Stat(file + ".pending"); !os.IsNotExist(err) {
			t.Errorf("run %d: the pending file is still there: %v", run, err)
		}
		if run == 0 {
			_ = s.Close()
			s = st.Start(t, cfg)
			st.WaitFor(t, 20*time.Second, "the restarted server to lead", func() bool { return s.Node().IsLeader() })
			if r := st.NewClient(t, s.URL(), strings.TrimSpace(string(tok))).Do("GET", "/api/admin/operator-tokens", nil); r.Status != 200 {
				t.Fatalf("after a restart the token was refused: %d %s", r.Status, r.Raw)
			}
			if got, _ := os.ReadFile(file); string(got) != string(tok) {
				t.Errorf("a restart changed the token file")
			}
		}
	}
}

func TestCertificatesRenewThemselves(t *testing.T) {
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.CertTTL = 6 * time.Second }})
	dir := t.TempDir()
	cfg := enroll.Config{Dir: dir, Role: pki.RoleEdge, Name: "edge-r", Servers: []string{s.ClusterURL()}, JoinToken: st.JoinToken(t, s, pki.RoleEdge, "edge-r")}
	creds, err := enroll.Obtain(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go enroll.KeepFresh(ctx, cfg, creds, func() []string { return []string{s.ClusterURL()} })
	first, serverFirst := creds.Leaf().SerialNumber.String(), s.Creds().Leaf().SerialNumber.String()
	st.WaitFor(t, 30*time.Second, "both certificates renewed", func() bool {
		return creds.Leaf().SerialNumber.String() != first && s.Creds().Leaf().SerialNumber.String() != serverFirst
	})
	// The renewed certificate is kept on disk and works.
	again, err := enroll.Load(dir)
	if err != nil || again.Leaf().SerialNumber.String() == first {
		t.Fatalf("renewed certificate not saved: %v", err)
	}
	if r := st.PeerClient(t, s, again).Do("GET", "/api/app/sites", nil); r.Status != 403 {
		t.Fatalf("renewed certificate: %d %s", r.Status, r.Raw)
	}
	m, _ := s.Node().Store().ClusterMember("edge/edge-r")
	if m == nil || m.Serial == "" {
		t.Fatalf("member: %+v", m)
	}
}
