package agent

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/rpclimit"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// loop registers, then heartbeats; it re-registers when the control plane
// has forgotten the node, and retries with backoff while it is away.
func (a *Agent) loop(ctx context.Context) {
	client := a.registryClient()
	interval := 2 * time.Second
	registered := false
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		if !registered {
			resp, err := client.Register(ctx, connect.NewRequest(a.registration()))
			a.metrics.Registered(err)
			if err != nil {
				a.log.Info("register with control plane failed; retrying", "err", err)
				sleep(ctx, backoff)
				backoff = min(backoff*2, 5*time.Second)
				continue
			}
			registered, backoff = true, 200*time.Millisecond
			a.registeredOnce.Do(func() { close(a.registered) })
			if ms := resp.Msg.HeartbeatIntervalMs; ms > 0 {
				interval = time.Duration(ms) * time.Millisecond
			}
			a.log.Info("registered with control plane", "control_plane", a.cfg.ControlPlane)
		}
		sleep(ctx, interval)
		resp, err := client.Heartbeat(ctx, connect.NewRequest(a.heartbeat(ctx)))
		if ctx.Err() == nil {
			a.metrics.Heartbeat(time.Now(), err)
		}
		if err != nil {
			if ctx.Err() == nil {
				a.log.Debug("heartbeat failed", "err", err)
			}
			continue
		}
		if resp.Msg.Unknown {
			registered = false
		}
	}
}

// registryClient calls the control plane's RegistryService.
func (a *Agent) registryClient() agentv1connect.RegistryServiceClient {
	return agentv1connect.NewRegistryServiceClient(rpcauth.Client(), a.cfg.ControlPlane,
		append(rpclimit.RegistryClient(), connect.WithInterceptors(rpcauth.New(a.cfg.ClusterToken)))...)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (a *Agent) registration() *agentv1.RegisterRequest {
	r := &agentv1.RegisterRequest{NodeId: a.cfg.NodeID, Address: a.url, BackendHost: a.cfg.BackendHost,
		PhpVersions: a.catalog.PHPVersions(), Labels: a.cfg.Labels, AgentVersion: Version,
		Capacity: &agentv1.Resources{MemoryMb: a.cfg.MemoryMB, CpuMilli: a.cfg.CPUMilli, Sites: int32(a.cfg.MaxSites)}}
	if a.ssh != nil {
		r.SshAddr, r.SshHostKey = a.sshPublicAddr(), a.ssh.AuthorizedKey()
	}
	return r
}

func (a *Agent) heartbeat(ctx context.Context) *agentv1.HeartbeatRequest {
	hb := &agentv1.HeartbeatRequest{NodeId: a.cfg.NodeID, PhpVersions: a.catalog.PHPVersions()}
	list := a.sites.List()
	hb.Used = &agentv1.Resources{Sites: int32(len(list))}
	for _, s := range list {
		st := &agentv1.SiteStatus{SiteId: s.ID, Port: int32(s.Port), Address: s.IP, State: agentv1.SiteState_SITE_STATE_READY}
		if s.Stopped {
			st.State = agentv1.SiteState_SITE_STATE_STOPPED
		} else if running, err := a.sites.Running(ctx, s.ID); err == nil && !running {
			st.State = agentv1.SiteState_SITE_STATE_FAILED
		}
		hb.Sites = append(hb.Sites, st)
	}
	hb.Templates = a.sites.Templates()
	a.metrics.Sites(siteStates(hb.Sites))
	return hb
}
