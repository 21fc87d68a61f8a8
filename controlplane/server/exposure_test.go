package server_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"connectrpc.com/connect"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// TestPublicEndpointsRevealNoAddresses fetches /healthz and /metrics
// without credentials from every server of a TCP cluster that knows a
// node and a site: no URL, IP or host:port may show, neither the
// servers' API and Raft addresses nor the node's and its site's. The
// operator's authenticated route still has them.
func TestPublicEndpointsRevealNoAddresses(t *testing.T) {
	servers, cfgs := st.Cluster(t, 2, st.Options{})
	leader := st.Leader(t, servers)
	ctx := context.Background()
	reg := agentv1connect.NewRegistryServiceClient(st.Member(t, leader, pki.RoleAgent, "n1").Client("", pki.RoleServer), leader.ClusterURL())
	const nodeIP = "10.77.0.5"
	if _, err := reg.Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: "n1", Address: "http://" + nodeIP + ":8090",
		BackendHost: nodeIP, SshAddr: nodeIP + ":2222"})); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Heartbeat(ctx, connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: "n1",
		Sites: []*agentv1.SiteStatus{{SiteId: "site_x1", Address: "10.200.0.9", Port: 8080, State: agentv1.SiteState_SITE_STATE_READY}}})); err != nil {
		t.Fatal(err)
	}

	secrets := []string{nodeIP, "10.200.0.9"}
	for i, s := range servers {
		u, _ := url.Parse(s.URL())
		secrets = append(secrets, u.Host, cfgs[i].RaftAddr)
	}
	for _, s := range servers {
		anon := st.NewClient(t, s.URL(), "")
		for _, path := range []string{"/healthz", "/metrics"} {
			t.Run(s.Node().ID()+path, func(t *testing.T) {
				r := anon.Do("GET", path, nil).Must(t, 200)
				body := string(r.Raw)
				if found := promtest.Addresses(body); len(found) > 0 {
					t.Errorf("unauthenticated %s shows addresses %q", path, found)
				}
				for _, sec := range secrets {
					if strings.Contains(body, sec) {
						t.Errorf("unauthenticated %s shows %s", path, sec)
					}
				}
				if path == "/healthz" && r.Str("leaderId") != leader.Node().ID() {
					t.Errorf("health names leader %q, want %q", r.Str("leaderId"), leader.Node().ID())
				}
			})
		}
	}
	// Operators still see where the leader is.
	op := st.NewClient(t, leader.URL(), leader.OperatorToken()).Do("GET", "/api/admin/cluster", nil).Must(t, 200)
	if !strings.Contains(string(op.Raw), leader.URL()) {
		t.Fatalf("the operator's cluster view lacks the leader's URL: %s", op.Raw)
	}
	// And anyone else is refused it.
	st.NewClient(t, leader.URL(), "").Do("GET", "/api/admin/cluster", nil).Must(t, 401)
}
