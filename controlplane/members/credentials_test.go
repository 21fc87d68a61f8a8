package members_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/memberspec"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
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
