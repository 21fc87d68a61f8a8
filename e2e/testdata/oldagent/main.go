// Command oldagent is a node agent speaking the previous release's agent
// protocol (its generated code, frozen in ./agentv1 from the release
// before the fleet's additions: no ingress, no snapshots, no server list,
// no orphan removal). TestOldAgentOnNewServer runs it against the current
// control plane: the protocol must stay compatible one release back.
// Its sites are one small HTTP server.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/e2e/testdata/oldagent/agentv1"
	"github.com/sandboxd/sandboxd/e2e/testdata/oldagent/agentv1/agentv1connect"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
)

type agent struct {
	agentv1connect.UnimplementedAgentServiceHandler
	sitePort int
}

func (a *agent) CreateSite(_ context.Context, req *connect.Request[agentv1.CreateSiteRequest]) (*connect.Response[agentv1.CreateSiteResponse], error) {
	return connect.NewResponse(&agentv1.CreateSiteResponse{WordpressVersion: "6.8.1", Status: &agentv1.SiteStatus{SiteId: req.Msg.SiteId,
		State: agentv1.SiteState_SITE_STATE_READY, Port: int32(a.sitePort), Address: "127.0.0.1"}}), nil
}

func (a *agent) DeleteSite(context.Context, *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.DeleteSiteResponse], error) {
	return connect.NewResponse(&agentv1.DeleteSiteResponse{Existed: true}), nil
}

func main() {
	controlPlane := flag.String("control-plane", "", "a server's cluster URL")
	nodeID := flag.String("node-id", "node-old", "node id")
	dataDir := flag.String("data-dir", "", "where the certificate is kept")
	flag.Parse()
	ctx := context.Background()
	creds, err := enroll.Obtain(ctx, enroll.Config{Dir: *dataDir, Role: pki.RoleAgent, Name: *nodeID, Servers: []string{*controlPlane},
		JoinToken: os.Getenv("SANDBOXD_JOIN_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	site, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go http.Serve(site, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "old agent's site at %s", r.Host)
	}))
	a := &agent{sitePort: site.Addr().(*net.TCPAddr).Port}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(a))
	srv := &http.Server{Handler: rpcauth.Require(nil, pki.RoleServer)(mux), Protocols: rpcauth.Protocols()}
	go srv.Serve(tls.NewListener(ln, creds.ServerTLS(true)))

	reg := agentv1connect.NewRegistryServiceClient(creds.Client("", pki.RoleServer), *controlPlane)
	r := &agentv1.RegisterRequest{NodeId: *nodeID, Address: "https://" + ln.Addr().String(), BackendHost: "127.0.0.1",
		PhpVersions: []string{"8.2"}, AgentVersion: "0.0.9-old", Capacity: &agentv1.Resources{MemoryMb: 4096, Sites: 10}}
	var interval time.Duration
	for {
		resp, err := reg.Register(ctx, connect.NewRequest(r))
		if err == nil {
			interval = time.Duration(resp.Msg.HeartbeatIntervalMs) * time.Millisecond
			break
		}
		log.Print("register: ", err)
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Println("old agent: registered")
	go func() {
		for {
			time.Sleep(interval)
			if _, err := reg.Heartbeat(ctx, connect.NewRequest(&agentv1.HeartbeatRequest{NodeId: *nodeID})); err != nil {
				log.Print("heartbeat: ", err)
			}
		}
	}()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	<-ch
	srv.Close()
}
