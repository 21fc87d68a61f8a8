package agent

import (
	"context"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// loop registers, then heartbeats; it re-registers when the control plane
// has forgotten the node and retries with backoff while it is away. Calls
// go to whichever server answers (rpcauth.Failover).
func (a *Agent) loop(ctx context.Context) {
	client := a.registry
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
			a.learn(resp.Msg.Servers)
			a.applyRevocations(resp.Msg.Revocations)
			a.log.Info("registered with control plane", "servers", a.Servers())
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
		a.learn(resp.Msg.Servers)
		a.applyRevocations(resp.Msg.Revocations)
		a.removeOrphans(ctx, resp.Msg.RemoveSiteIds)
		if resp.Msg.Unknown {
			registered = false
		}
	}
}

// learn keeps the servers the control plane names, with the configured
// ones (a server that left the cluster and came back is still tried).
func (a *Agent) learn(servers []string) {
	if len(servers) == 0 {
		return
	}
	all := slices.Clone(servers)
	for _, s := range a.cfg.ControlPlane {
		if !slices.Contains(all, s) {
			all = append(all, s)
		}
	}
	if !slices.Equal(all, a.Servers()) {
		a.servers.Store(&all)
	}
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
	if a.ingress != nil {
		r.IngressAddr = a.ingressPublicAddr()
	}
	return r
}

func (a *Agent) heartbeat(ctx context.Context) *agentv1.HeartbeatRequest {
	hb := &agentv1.HeartbeatRequest{NodeId: a.cfg.NodeID, PhpVersions: a.catalog.PHPVersions(),
		RevocationsVersion: a.revoked.Version()}
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
	hb.Templates = a.templates.List()
	a.metrics.Sites(siteStates(hb.Sites))
	return hb
}

// removeOrphans deletes sites the control plane says are no longer this
// node's (deleted while it was away, or restored elsewhere), one at a
// time in the background; a removal under way is not started twice.
func (a *Agent) removeOrphans(ctx context.Context, ids []string) {
	for _, id := range ids {
		if strings.HasPrefix(id, "site_stock") {
			continue
		}
		if _, busy := a.removing.LoadOrStore(id, true); busy {
			continue
		}
		go func() {
			defer a.removing.Delete(id)
			a.removeMu.Lock()
			defer a.removeMu.Unlock()
			if _, err := a.sites.Delete(ctx, id); err != nil {
				a.log.Warn("removing a site that is no longer this node's", "site_id", id, "err", err)
				return
			}
			a.log.Info("removed a site that is no longer this node's", "site_id", id)
		}()
	}
}
