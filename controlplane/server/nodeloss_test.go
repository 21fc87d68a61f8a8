package server_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/pki"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
	edgev1 "github.com/sandboxd/sandboxd/protocol/edge/v1"
	"github.com/sandboxd/sandboxd/protocol/edge/v1/edgev1connect"
)

// TestSitesOfADownNodeAreUnavailable: a node that stops heartbeating
// takes its ready sites to "unavailable" in the API and in the edges'
// routes (so the edge shows a clear page), operations that need the
// site running are refused with the reason, and everything is ready
// again when the node heartbeats again.
func TestSitesOfADownNodeAreUnavailable(t *testing.T) {
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.HeartbeatInterval = 50 * time.Millisecond }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := startFakeAgent(t)
	registry := agentv1connect.NewRegistryServiceClient(st.Member(t, s, pki.RoleAgent, "node-a").Client("", pki.RoleServer), s.ClusterURL())
	if _, err := registry.Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: "node-a", Address: f.url,
		PhpVersions: []string{"8.2"}, Capacity: &agentv1.Resources{MemoryMb: 64 << 10, Sites: 100}})); err != nil {
		t.Fatal(err)
	}
	// Heartbeat until told to stop.
	beat := make(chan bool)
	go func() {
		on := true
		for {
			select {
			case <-ctx.Done():
				return
			case on = <-beat:
			case <-time.After(20 * time.Millisecond):
			}
			if !on {
				continue
			}
			if _, err := registry.Heartbeat(ctx, connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: "node-a"})); err != nil && ctx.Err() == nil {
				t.Log("heartbeat:", err)
			}
		}
	}()

	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	r := alice.Do("POST", "/api/app/sites", map[string]any{"name": "Shop"}).Must(t, 202)
	waitJob(t, alice, r.Str("jobId"), "succeeded")
	id := r.Str("site.id")
	status := func() string { return alice.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200).Str("site.status") }
	if got := status(); got != "ready" {
		t.Fatalf("site: %s", got)
	}

	routes := edgev1connect.NewRouteServiceClient(st.Member(t, s, pki.RoleEdge, "edge-test").Client("", pki.RoleServer), s.ClusterURL())
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	stream, err := routes.WatchRoutes(watchCtx, connect.NewRequest(&edgev1.WatchRoutesRequest{EdgeId: "edge-test"}))
	if err != nil {
		t.Fatal(err)
	}
	statuses := make(chan edgev1.RouteStatus, 16)
	go func() {
		for stream.Receive() {
			for _, rt := range stream.Msg().Upserts {
				if rt.SiteId == id {
					statuses <- rt.Status
				}
			}
		}
		close(statuses)
	}()
	waitRoute := func(want edgev1.RouteStatus) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case got, ok := <-statuses:
				if !ok {
					t.Fatalf("route stream ended waiting for %v", want)
				}
				if got == want {
					return
				}
			case <-deadline:
				t.Fatalf("no route with status %v", want)
			}
		}
	}
	waitRoute(edgev1.RouteStatus_ROUTE_STATUS_READY)

	beat <- false
	st.WaitFor(t, 20*time.Second, "the site of the silent node to be unavailable", func() bool { return status() == "unavailable" })
	waitRoute(edgev1.RouteStatus_ROUTE_STATUS_UNAVAILABLE)
	reset := alice.Do("POST", "/api/app/sites/"+id+"/reset", nil)
	if reset.Status != 400 || reset.Details()["status"] != "unavailable" {
		t.Fatalf("reset of an unavailable site: %d %s", reset.Status, reset.Raw)
	}
	if list := alice.Do("GET", "/api/app/sites", nil).Must(t, 200).List("sites"); len(list) != 1 || list[0]["status"] != "unavailable" {
		t.Fatalf("list: %v", list)
	}

	beat <- true
	st.WaitFor(t, 20*time.Second, "the site to be ready again", func() bool { return status() == "ready" })
	waitRoute(edgev1.RouteStatus_ROUTE_STATUS_READY)
}
