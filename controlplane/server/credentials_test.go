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

	"github.com/sandboxd/sandboxd/controlplane/memberspec"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/secret"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// TestJoinTokens: a join token is spent once, for its role (and name),
// until it expires or is revoked; the member that joins trusts only the
// CA its token names; every refusal leaves no member behind.
func TestJoinTokens(t *testing.T) {
	s := st.Single(t, st.Options{})
	ctx := context.Background()
	op := st.Operator(t, s)
	join := func(tok string, role pki.Role, name string) error {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := enroll.Obtain(c, enroll.Config{Dir: t.TempDir(), Role: role, Name: name, Servers: []string{s.ClusterURL()}, JoinToken: tok})
		return err
	}
	create := func(body map[string]any) (string, string) {
		r := op.Do("POST", "/api/admin/join-tokens", body).Must(t, 201)
		return r.Str("token"), r.Str("joinToken.id")
	}

	tok, id := create(map[string]any{"role": "agent"})
	if err := join(tok, pki.RoleAgent, "node-1"); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if err := join(tok, pki.RoleAgent, "node-2"); err == nil || !strings.Contains(err.Error(), "used already") {
		t.Fatalf("second use: %v", err)
	}
	list := op.Do("GET", "/api/admin/join-tokens", nil).Must(t, 200)
	if l := list.List("joinTokens"); len(l) != 1 || l[0]["id"] != id || l[0]["usedBy"] != "agent/node-1" || strings.Contains(string(list.Raw), tok) {
		t.Fatalf("list: %s", list.Raw)
	}

	revokedTok, revokedID := create(map[string]any{"role": "agent"})
	op.Do("DELETE", "/api/admin/join-tokens/"+revokedID, nil).Must(t, 200)
	edgeTok, _ := create(map[string]any{"role": "edge"})
	namedTok, _ := create(map[string]any{"role": "agent", "name": "node-9"})
	shortTok, _ := create(map[string]any{"role": "agent", "ttlMinutes": 1})
	for _, c := range []struct {
		name, tok string
		role      pki.Role
		member    string
		want      string
	}{
		{"a revoked token", revokedTok, pki.RoleAgent, "node-3", "revoked"},
		{"an edge's token used by an agent", edgeTok, pki.RoleAgent, "node-3", "for a edge"},
		{"a token for another name", namedTok, pki.RoleAgent, "node-3", `for "node-9"`},
		{"a made-up secret", tok[:strings.LastIndex(tok, ".")+1] + "AAAA", pki.RoleAgent, "node-3", "not valid"},
		{"another cluster's token", "sbxj1." + strings.Repeat("ab", 32) + ".x.y", pki.RoleAgent, "node-3", "not the one the join token names"},
		{"not a token", "sbxc_old-cluster-token", pki.RoleAgent, "node-3", "not a join token"},
		{"a bad name", shortTok, pki.RoleAgent, "Node 3", "name"},
	} {
		if err := join(c.tok, c.role, c.member); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
	if m, _ := s.Node().Store().ClusterMember("agent/node-3"); m != nil {
		t.Fatal("a refused join left a member")
	}
	if err := join(shortTok, pki.RoleAgent, "node-3"); err != nil {
		t.Fatalf("an unexpired token: %v", err)
	}
	for _, body := range []map[string]any{{"role": "admin"}, {"role": "agent", "ttlMinutes": 99999}, {"role": "agent", "name": "Bad Name"}, {}} {
		if r := op.Do("POST", "/api/admin/join-tokens", body); r.Status != 400 {
			t.Errorf("join token %v: %d %s", body, r.Status, r.Raw)
		}
	}
	if r := op.Do("DELETE", "/api/admin/join-tokens/nope", nil); r.Status != 404 {
		t.Errorf("revoke unknown: %d", r.Status)
	}
}

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

// TestOperatorTokens: operator tokens are made, listed without secrets
// and revoked; a revoked one is refused at once; an API user's token is
// not an operator's.
func TestOperatorTokens(t *testing.T) {
	s := st.Single(t, st.Options{})
	op := st.Operator(t, s)
	r := op.Do("POST", "/api/admin/operator-tokens", map[string]any{"name": "alice"}).Must(t, 201)
	tok, id := r.Str("token"), r.Str("operatorToken.id")
	if !strings.HasPrefix(tok, memberspec.OperatorTokenPrefix) {
		t.Fatalf("token %q", tok)
	}
	alice := st.NewClient(t, s.URL(), tok)
	alice.Do("GET", "/api/admin/accounts", nil).Must(t, 200)
	if l := op.Do("GET", "/api/admin/operator-tokens", nil).Must(t, 200); len(l.List("operatorTokens")) != 2 || strings.Contains(string(l.Raw), tok) {
		t.Fatalf("list: %s", l.Raw)
	}
	op.Do("DELETE", "/api/admin/operator-tokens/"+id, nil).Must(t, 200)
	if r := alice.Do("GET", "/api/admin/accounts", nil); r.Status != 401 {
		t.Fatalf("a revoked operator token: %d", r.Status)
	}
	user := st.NewAccount(t, s, "u@example.com", "free")
	if r := st.NewClient(t, s.URL(), user.Token).Do("GET", "/api/admin/accounts", nil); r.Status != 401 {
		t.Fatalf("a user token on an operator route: %d", r.Status)
	}
	for _, body := range []map[string]any{{}, {"name": strings.Repeat("x", 101)}} {
		if r := op.Do("POST", "/api/admin/operator-tokens", body); r.Status != 400 {
			t.Errorf("operator token %v: %d", body, r.Status)
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

// TestRejoinSupersedesOldCertificates: a member that joins again (with a
// token naming it) or is revoked leaves every earlier certificate of its
// name refused — a stolen copy stays useless — while a token without a
// name cannot take a name a member holds; a made-up token writes
// nothing to the log.
func TestRejoinSupersedesOldCertificates(t *testing.T) {
	s := st.Single(t, st.Options{})
	ctx := context.Background()
	join := func(tok string) (*rpcauth.Creds, error) {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return enroll.Obtain(c, enroll.Config{Dir: t.TempDir(), Role: pki.RoleAgent, Name: "node-x", Servers: []string{s.ClusterURL()}, JoinToken: tok})
	}
	heartbeat := func(c *rpcauth.Creds) error {
		reg := agentv1connect.NewRegistryServiceClient(c.Client("", pki.RoleServer), s.ClusterURL())
		_, err := reg.Heartbeat(ctx, connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: "node-x"}))
		return err
	}
	unnamed := func() string {
		tok, _, err := s.Members().CreateJoinToken(ctx, memberspec.JoinTokenOptions{Role: pki.RoleAgent})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	first, err := join(unnamed())
	if err != nil {
		t.Fatal(err)
	}
	if err := heartbeat(first); err != nil {
		t.Fatalf("first certificate: %v", err)
	}
	if _, err := join(unnamed()); err == nil || !strings.Contains(err.Error(), "member already") {
		t.Fatalf("an unnamed token took an existing name: %v", err)
	}
	time.Sleep(1100 * time.Millisecond) // a later second than the first join
	second, err := join(st.JoinToken(t, s, pki.RoleAgent, "node-x"))
	if err != nil {
		t.Fatalf("a token naming the member: %v", err)
	}
	if err := heartbeat(second); err != nil {
		t.Fatalf("the new certificate: %v", err)
	}
	if err := heartbeat(first); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("the certificate of the earlier join still works: %v", err)
	}
	if err := s.Members().RevokeMember(ctx, "agent/node-x"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	third, err := join(unnamed())
	if err != nil {
		t.Fatalf("rejoin after a revoke: %v", err)
	}
	for name, c := range map[string]*rpcauth.Creds{"first": first, "second": second} {
		if err := heartbeat(c); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("the %s certificate works after a revoke and a rejoin: %v", name, err)
		}
	}
	if err := heartbeat(third); err != nil {
		t.Fatalf("the certificate of the rejoin: %v", err)
	}
	before := s.Node().AppliedIndex()
	for range 5 {
		if _, err := join("sbxj1." + s.Creds().Leaf().Issuer.CommonName); err == nil {
			t.Fatal("a made-up token joined")
		}
	}
	ca, _ := s.Node().Store().ClusterCA()
	if _, err := join("sbxj1." + ca.Fingerprint + ".nope.AAAA"); err == nil {
		t.Fatal("a made-up token joined")
	}
	if after := s.Node().AppliedIndex(); after != before {
		t.Fatalf("refused joins wrote %d log entries", after-before)
	}
}
