package server_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/pki"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

func newSSHKeyPair(t *testing.T) (ssh.PublicKey, string) {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// TestAuthorizeSSH: the registry lets a key open a site only for a
// member of the site's workspace with internals, on the node that holds
// the ready site; every refusal is a plain "no", with the reason for the
// node's log.
func TestAuthorizeSSH(t *testing.T) {
	s := st.Single(t, st.Options{})
	agent := &fakeAgent{}
	agent.url = serveAgent(t, agent)
	ctx := context.Background()
	n := state.Node{ID: "node-fake", Address: agent.url, BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}, Status: state.NodeReady,
		MemoryMB: 64 << 10, MaxSites: 100, SSHAddr: "127.0.0.1:2222", SSHHostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII1v/zhA6DnYhabld1Co4wy0M8q0vKBv8ZVZql+JBbRp"}
	if _, err := s.Node().Apply(ctx, fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	bob := st.NewAccount(t, s, "bob@example.com", "paid")
	carol := st.NewAccount(t, s, "carol@example.com", "paid")
	made := alice.Do("POST", "/api/app/sites", map[string]any{"name": "SSH"}).Must(t, 202)
	waitJob(t, alice, made.Str("jobId"), "succeeded")
	site := made.Str("site.id")

	aliceKey, aliceLine := newSSHKeyPair(t)
	bobKey, bobLine := newSSHKeyPair(t)
	carolKey, carolLine := newSSHKeyPair(t)
	strangerKey, _ := newSSHKeyPair(t)
	aliceKeyID := alice.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "a", "publicKey": aliceLine}).Must(t, 201).Str("sshKey.id")
	bob.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "b", "publicKey": bobLine}).Must(t, 201)
	carol.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "c", "publicKey": carolLine}).Must(t, 201)
	// Carol joins alice's workspace with a role without internals.
	ws := alice.Personal
	role := alice.Do("POST", "/api/app/workspaces/"+ws+"/roles", map[string]any{"name": "viewer", "capabilities": []string{"create"}}).Must(t, 201).Str("role.id")
	inv := alice.Do("POST", "/api/app/workspaces/"+ws+"/members", map[string]any{"email": "carol@example.com", "customRoleId": role}).Must(t, 201).Str("invitation.id")
	carol.Do("POST", "/api/account/invitations/"+inv+"/accept", nil).Must(t, 200)

	regs := map[string]agentv1connect.RegistryServiceClient{}
	for _, node := range []string{"node-fake", "node-other"} {
		regs[node] = agentv1connect.NewRegistryServiceClient(st.Member(t, s, pki.RoleAgent, node).Client("", pki.RoleServer), s.ClusterURL())
	}
	// A node asks for itself only.
	if _, err := regs["node-other"].AuthorizeSSH(ctx, connect.NewRequest(&agentv1.AuthorizeSSHRequest{NodeId: "node-fake", SiteId: site})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("a node asked for another: %v", err)
	}
	ask := func(node, siteID string, key ssh.PublicKey) *agentv1.AuthorizeSSHResponse {
		t.Helper()
		r, err := regs[node].AuthorizeSSH(ctx, connect.NewRequest(&agentv1.AuthorizeSSHRequest{NodeId: node, SiteId: siteID, PublicKey: key.Marshal(), RemoteAddr: "192.0.2.1:5555"}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg
	}
	if r := ask("node-fake", site, aliceKey); !r.Allowed || r.AccountId != alice.ID {
		t.Fatalf("the owner's key: %+v", r)
	}
	for _, c := range []struct {
		name, node, site string
		key              ssh.PublicKey
		reason           string
	}{
		{"a key on no account", "node-fake", site, strangerKey, "on no account"},
		{"another workspace's member", "node-fake", site, bobKey, "no member"},
		{"a member without internals", "node-fake", site, carolKey, "internals"},
		{"another node", "node-other", site, aliceKey, "not on node"},
		{"an unknown site", "node-fake", "site_nope", aliceKey, "no site"},
	} {
		if r := ask(c.node, c.site, c.key); r.Allowed || !strings.Contains(r.Reason, c.reason) {
			t.Errorf("%s: %+v", c.name, r)
		}
	}
	// The key's use is recorded; a deleted key is refused at once.
	keys := alice.Do("GET", "/api/account/ssh-keys", nil).Must(t, 200).List("sshKeys")
	if len(keys) != 1 || keys[0]["lastUsedAt"] == nil {
		t.Fatalf("lastUsedAt: %v", keys)
	}
	alice.Do("DELETE", "/api/account/ssh-keys/"+aliceKeyID, nil).Must(t, 200)
	if r := ask("node-fake", site, aliceKey); r.Allowed {
		t.Fatal("a deleted key was allowed")
	}
	// A site's SSH access names the gateway and its host key.
	info := alice.Do("GET", "/api/app/sites/"+site+"/ssh", nil).Must(t, 200)
	if info.Str("ssh.host") != "127.0.0.1" || info.Get("ssh.port") != float64(2222) || info.Str("ssh.username") != site ||
		info.Str("ssh.command") != "ssh -p 2222 "+site+"@127.0.0.1" || !strings.HasPrefix(info.Str("ssh.hostKeyFingerprint"), "SHA256:") ||
		!strings.HasPrefix(info.Str("ssh.knownHosts"), "[127.0.0.1]:2222 ssh-ed25519 ") {
		t.Fatalf("ssh access: %s", info.Raw)
	}
	if r := carol.In(ws).Do("GET", "/api/app/sites/"+site+"/ssh", nil); r.Status != 403 || r.Code() != "capability_required" {
		t.Fatalf("a member without internals reads ssh access: %d %s", r.Status, r.Raw)
	}
	if r := bob.Do("GET", "/api/app/sites/"+site+"/ssh", nil); r.Status != 404 {
		t.Fatalf("another workspace reads ssh access: %d", r.Status)
	}
}
