package nodes_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// TestRegistryMetrics: heartbeats are counted by result, nodes by status,
// and each node's heartbeat age is labelled by its id, never its address.
func TestRegistryMetrics(t *testing.T) {
	s := st.Single(t, st.Options{})
	ctx := context.Background()
	client := agentv1connect.NewRegistryServiceClient(st.Member(t, s, pki.RoleAgent, "n1").Client("", pki.RoleServer), s.ClusterURL())
	ghost := agentv1connect.NewRegistryServiceClient(st.Member(t, s, pki.RoleAgent, "ghost").Client("", pki.RoleServer), s.ClusterURL())
	if _, err := client.Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: "n1", Address: "http://10.77.0.5:8090",
		BackendHost: "10.77.0.5"})); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n1", "ghost"} {
		c := client
		if id == "ghost" {
			c = ghost
		}
		if _, err := c.Heartbeat(ctx, connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: id})); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"sandboxd_node_heartbeats_total", map[string]string{"result": "ok"}, 2},
		{"sandboxd_node_heartbeats_total", map[string]string{"result": "unknown_node"}, 1},
		{"sandboxd_node_heartbeats_total", map[string]string{"result": "error"}, 0},
		{"sandboxd_node_registrations_total", nil, 1},
		{"sandboxd_nodes", map[string]string{"status": "ready"}, 1},
		{"sandboxd_nodes", map[string]string{"status": "down"}, 0},
	}
	for _, tt := range tests {
		if got, ok := promtest.Value(t, tt.metric, tt.labels, s.Registry()); !ok || got != tt.want {
			t.Errorf("%s%v = %v (present %v), want %v", tt.metric, tt.labels, got, ok, tt.want)
		}
	}
	age, ok := promtest.Value(t, "sandboxd_node_heartbeat_age_seconds", map[string]string{"node": "n1"}, s.Registry())
	if !ok || age < 0 {
		t.Fatalf("heartbeat age of n1: %v %v", age, ok)
	}
	if _, ok := promtest.Value(t, "sandboxd_node_heartbeat_age_seconds", map[string]string{"node": "ghost"}, s.Registry()); ok {
		t.Fatal("an unregistered node has a heartbeat age")
	}
}
