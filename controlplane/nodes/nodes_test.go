package nodes_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/pki"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// TestRegistrationHeartbeatsAndDownDetection drives the RegistryService
// over real h2c Connect calls, the way an agent does.
func TestRegistrationHeartbeatsAndDownDetection(t *testing.T) {
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.HeartbeatInterval = 50 * time.Millisecond }})
	ctx := context.Background()
	client := agentv1connect.NewRegistryServiceClient(st.Member(t, s, pki.RoleAgent, "n1").Client("", pki.RoleServer), s.ClusterURL())

	// No certificate; another node's certificate; an edge's certificate.
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for name, c := range map[string]*http.Client{"none": anon, "node n2": st.Member(t, s, pki.RoleAgent, "n2").Client("", pki.RoleServer),
		"an edge": st.Member(t, s, pki.RoleEdge, "n1").Client("", pki.RoleServer)} {
		bad := agentv1connect.NewRegistryServiceClient(c, s.ClusterURL())
		_, err := bad.Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: "n1", Address: "http://x"}))
		if code := connect.CodeOf(err); code != connect.CodeUnauthenticated && code != connect.CodePermissionDenied {
			t.Fatalf("registering n1 with %s's certificate: %v", name, err)
		}
	}
	// The API port does not serve the registry at all.
	if _, err := agentv1connect.NewRegistryServiceClient(http.DefaultClient, s.URL()).Heartbeat(ctx,
		connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: "n1"})); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("registry on the API port: %v", err)
	}
	if _, err := client.Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: "n1"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("no address: %v", err)
	}
	hb, err := client.Heartbeat(ctx, connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: "n1"}))
	if err != nil || !hb.Msg.Unknown {
		t.Fatalf("unknown node: %v %v", hb, err)
	}

	resp, err := client.Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: "n1", Address: "http://127.0.0.1:1",
		PhpVersions: []string{"8.2", "7.4"}, Capacity: &agentv1.Resources{MemoryMb: 4096, Sites: 20}}))
	if err != nil || resp.Msg.HeartbeatIntervalMs != 50 {
		t.Fatalf("register: %v %v", resp, err)
	}
	status := func() string {
		n, _ := s.Node().Store().Node("n1")
		if n == nil {
			return ""
		}
		return n.Status
	}
	if status() != state.NodeReady {
		t.Fatal(status())
	}
	// Heartbeats keep it ready for longer than the down timeout.
	for i := 0; i < 12; i++ {
		if _, err := client.Heartbeat(ctx, connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: "n1"})); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status() != state.NodeReady {
		t.Fatal("marked down while heartbeating")
	}
	st.WaitFor(t, 10*time.Second, "the silent node to be marked down", func() bool { return status() == state.NodeDown })
	cands, _ := s.Registry().Candidates()
	if len(cands) != 1 || cands[0].Ready {
		t.Fatalf("a down node is offered to the scheduler: %+v", cands)
	}
	if _, err := client.Heartbeat(ctx, connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: "n1"})); err != nil {
		t.Fatal(err)
	}
	if status() != state.NodeReady {
		t.Fatal("a node that heartbeats again stays down")
	}
}

// TestHeartbeatCarriesRevocations: the register and heartbeat answers
// carry the members agents must refuse, under a version; an agent that
// holds the current version is not sent the list again, an old agent
// (that sends none) gets it each time and ignores it.
func TestHeartbeatCarriesRevocations(t *testing.T) {
	s := st.Single(t, st.Options{})
	ctx := context.Background()
	client := agentv1connect.NewRegistryServiceClient(st.Member(t, s, pki.RoleAgent, "n1").Client("", pki.RoleServer), s.ClusterURL())
	st.Member(t, s, pki.RoleEdge, "e1")
	st.Member(t, s, pki.RoleEdge, "e2")
	op := st.Operator(t, s)
	op.Do("DELETE", "/api/admin/members/edge/e1", nil).Must(t, 200)

	revoked := func(r *agentv1.Revocations) map[string]bool {
		out := map[string]bool{}
		for _, m := range r.GetMembers() {
			out[m.Id] = m.Revoked
		}
		return out
	}
	reg, err := client.Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: "n1", Address: "https://127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	list := reg.Msg.Revocations
	if list.GetVersion() == "" || !revoked(list)["edge/e1"] || revoked(list)["edge/e2"] {
		t.Fatalf("register answer: %v", list)
	}
	hb := func(version string) *agentv1.Revocations {
		resp, err := client.Heartbeat(ctx, connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: "n1", RevocationsVersion: version}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.Revocations
	}
	if got := hb(list.Version); got != nil {
		t.Fatalf("the current list sent again: %v", got)
	}
	if got := hb(""); got.GetVersion() != list.Version {
		t.Fatalf("an agent without a version: %v", got)
	}
	op.Do("DELETE", "/api/admin/members/edge/e2", nil).Must(t, 200)
	if got := hb(list.Version); got.GetVersion() == list.Version || !revoked(got)["edge/e2"] || !revoked(got)["edge/e1"] {
		t.Fatalf("after a second revocation: %v", got)
	}
}
