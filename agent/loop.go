package agent

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/agent/sites"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// loop registers, then heartbeats; it re-registers when the control plane
// has forgotten the node and retries with backoff while it is away. Calls
// go to whichever server answers (rpcauth.Failover).
func (a *Agent) loop(ctx context.Context) {
	client := a.registry
	interval := 2 * time.Second
	registered := false
	beats := 0 // since registering: the first carries the whole list
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
			registered, backoff, beats = true, 200*time.Millisecond, 0
			a.registeredOnce.Do(func() { close(a.registered) })
			if ms := resp.Msg.HeartbeatIntervalMs; ms > 0 {
				interval = time.Duration(ms) * time.Millisecond
			}
			a.learn(resp.Msg.Servers)
			a.applyRevocations(resp.Msg.Revocations)
			a.log.Info("registered with control plane", "servers", a.Servers())
		}
		sleep(ctx, interval)
		full := beats%fullEvery == 0
		beats++
		resp, err := client.Heartbeat(ctx, connect.NewRequest(a.heartbeat(ctx, full)))
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
			a.presence.forget()
		} else {
			a.presence.answered()
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

// fullEvery is how often a heartbeat carries the node's whole list of
// sites (and reads their states and memory): the ones between carry
// counts and what changed, whatever the number of sites.
const fullEvery = 10

func (a *Agent) heartbeat(ctx context.Context, full bool) *agentv1.HeartbeatRequest {
	hb := &agentv1.HeartbeatRequest{NodeId: a.cfg.NodeID, PhpVersions: a.catalog.PHPVersions(),
		RevocationsVersion: a.revoked.Version(), Partial: !full}
	list := a.sites.List()
	hb.Used = &agentv1.Resources{Sites: int32(len(list))}
	hb.Templates = a.templates.List()
	hb.Presence, hb.Sleep = a.presence.changes(a.sites.Presences()), a.sleepCounts(list, full)
	c := hb.Sleep
	a.metrics.Depths(int(c.Awake), int(c.Dozing), int(c.Asleep))
	if !full {
		return hb
	}
	a.metrics.DepthMemory(c.AwakeMemoryBytes, c.DozingMemoryBytes)
	for _, s := range list {
		st := &agentv1.SiteStatus{SiteId: s.ID, Port: int32(s.Port), Address: s.IP, State: agentv1.SiteState_SITE_STATE_READY}
		switch {
		case s.Stopped:
			st.State = agentv1.SiteState_SITE_STATE_STOPPED
		case s.Depth != sites.Awake:
			// Ready: asleep, its next request starts it; dozing, its task
			// is frozen (containerd says paused), and a wake thaws it, or
			// starts it if it is gone.
		default:
			if running, err := a.sites.Running(ctx, s.ID); err == nil && !running {
				st.State = agentv1.SiteState_SITE_STATE_FAILED
			}
		}
		hb.Sites = append(hb.Sites, st)
	}
	a.metrics.Sites(siteStates(hb.Sites))
	return hb
}

// presenceLog is what the control plane has been told of each site's
// sleep, so that a heartbeat carries only what changed.
type presenceLog struct {
	mu sync.Mutex
	// told is each site's presence as last answered; pending what the
	// heartbeat under way carries.
	told, pending map[string]*agentv1.SitePresence
}

// changes lists the sites whose sleep or minute of last request is not
// what the control plane was told.
func (l *presenceLog) changes(now []sites.Presence) []*agentv1.SitePresence {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.told == nil {
		l.told = map[string]*agentv1.SitePresence{}
	}
	l.pending = map[string]*agentv1.SitePresence{}
	here := make(map[string]bool, len(now))
	for _, p := range now {
		here[p.ID] = true
	}
	for id := range l.told {
		if !here[id] { // deleted
			delete(l.told, id)
		}
	}
	var out []*agentv1.SitePresence
	for _, p := range now {
		sp := &agentv1.SitePresence{SiteId: p.ID, Sleeping: p.Depth != sites.Awake}
		if !p.LastRequest.IsZero() {
			sp.LastRequestUnix = p.LastRequest.Truncate(time.Minute).Unix()
		}
		if old := l.told[p.ID]; old != nil && old.Sleeping == sp.Sleeping && old.LastRequestUnix == sp.LastRequestUnix {
			continue
		}
		if len(out) == maxPresence {
			break // the rest next time
		}
		l.pending[p.ID] = sp
		out = append(out, sp)
	}
	return out
}

// maxPresence bounds the changes one heartbeat carries.
const maxPresence = 2000

// answered records that the control plane took the last heartbeat.
func (l *presenceLog) answered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, p := range l.pending {
		l.told[id] = p
	}
	l.pending = nil
}

// forget makes the next heartbeat tell everything again (a control
// plane that lost the node).
func (l *presenceLog) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.told, l.pending = nil, nil
}

// sleepCounts counts the sites by depth and, with memory, what each
// group holds of the host's memory (RAM and swap, from their cgroups).
func (a *Agent) sleepCounts(list []sites.Site, memory bool) *agentv1.SleepCounts {
	c := &agentv1.SleepCounts{}
	for _, s := range list {
		if s.Stopped || s.Scratch {
			continue
		}
		switch s.Depth {
		case sites.Asleep:
			c.Asleep++
			continue
		case sites.Dozing:
			c.Dozing++
		default:
			c.Awake++
		}
		if !memory {
			continue
		}
		m, err := a.rt.Memory(sites.ContainerID(s.ID))
		if err != nil {
			continue
		}
		if s.Depth == sites.Dozing {
			c.DozingMemoryBytes += m.Usage + m.Swap
		} else {
			c.AwakeMemoryBytes += m.Usage + m.Swap
		}
	}
	return c
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
