// Package nodes is the control plane's view of its node agents: the
// RegistryService agents register and heartbeat through, the leader-only
// monitor that marks silent nodes down, and clients for calling agents.
package nodes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/members"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/revocation"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/rpclimit"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
	"github.com/sandboxd/sandboxd/scheduler"
)

// Config wires the registry.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	// Creds is the server's cluster certificate, which agents check
	// (and which checks each agent is the node it is called as).
	Creds *rpcauth.Creds
	// HeartbeatInterval is what agents are told; zero means 2s.
	HeartbeatInterval time.Duration
	// DownAfter marks a node down after this long without a heartbeat;
	// zero means 5 heartbeat intervals.
	DownAfter time.Duration
	// OrphanGrace is how long a node reports a site that is no longer its
	// own before it is told to remove it; zero means DefaultOrphanGrace.
	OrphanGrace time.Duration
	// CertTTL is the lifetime of member certificates: how long a
	// revocation is sent to agents; zero means members.DefaultCertTTL.
	CertTTL time.Duration
	Now     func() time.Time
	Logger  *slog.Logger
}

// Registry serves agents and tracks their liveness on the leader.
type Registry struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	orphans  map[string]time.Time // node/site → first reported as not the node's
	lastSeen map[string]time.Time
	load     map[string]*agentv1.HeartbeatRequest
	clients  map[string]agentv1connect.AgentServiceClient
	addrs    map[string]string

	metrics registryMetrics

	cands candidateCache
}

var _ agentv1connect.RegistryServiceHandler = (*Registry)(nil)

// New returns a registry.
func New(cfg Config) *Registry {
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 2 * time.Second
	}
	if cfg.DownAfter == 0 {
		cfg.DownAfter = 5 * cfg.HeartbeatInterval
	}
	if cfg.OrphanGrace == 0 {
		cfg.OrphanGrace = DefaultOrphanGrace
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Registry{cfg: cfg, log: cfg.Logger.With("component", "nodes"), lastSeen: map[string]time.Time{}, orphans: map[string]time.Time{},
		load: map[string]*agentv1.HeartbeatRequest{}, clients: map[string]agentv1connect.AgentServiceClient{}, addrs: map[string]string{},
		metrics: newRegistryMetrics()}
}

func (r *Registry) now() time.Time { return r.cfg.Now().UTC().Truncate(time.Millisecond) }

// Register records a node agent.
func (r *Registry) Register(ctx context.Context, req *connect.Request[agentv1.RegisterRequest]) (*connect.Response[agentv1.RegisterResponse], error) {
	m := req.Msg
	if m.NodeId == "" || m.Address == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("node_id and address are required"))
	}
	if err := itself(ctx, m.NodeId); err != nil {
		return nil, err
	}
	if old, err := r.cfg.Store.Node(m.NodeId); err == nil && old != nil && old.IngressAddr != "" && m.IngressAddr == "" {
		// Edges would dial its sites' addresses in the clear: a node that
		// had an ingress keeps one.
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("node %s had an ingress; an agent without one cannot register as it", m.NodeId))
	}
	now := r.now()
	n := state.Node{ID: m.NodeId, Address: m.Address, BackendHost: m.BackendHost, PHPVersions: m.PhpVersions,
		Labels: m.Labels, Version: m.AgentVersion, SSHAddr: m.SshAddr, SSHHostKey: m.SshHostKey, IngressAddr: m.IngressAddr,
		RegisteredAt: now, UpdatedAt: now}
	if m.Capacity != nil {
		n.MemoryMB, n.CPUMilli, n.MaxSites = m.Capacity.MemoryMb, m.Capacity.CpuMilli, int(m.Capacity.Sites)
	}
	if n.BackendHost == "" {
		n.BackendHost = "127.0.0.1"
	}
	if _, err := r.cfg.Raft.Apply(ctx, fsm.UpsertNode{Node: n}); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("record node: %w", err))
	}
	r.mu.Lock()
	r.lastSeen[n.ID] = now
	r.mu.Unlock()
	r.metrics.registrations.Inc()
	sites, err := r.cfg.Store.SitesOnNode(n.ID)
	if err != nil {
		return nil, err
	}
	resp := &agentv1.RegisterResponse{HeartbeatIntervalMs: r.cfg.HeartbeatInterval.Milliseconds(), Servers: r.servers(),
		Revocations: r.revocations("")}
	for _, s := range sites {
		resp.SiteIds = append(resp.SiteIds, s.ID)
	}
	r.log.Info("node registered", "node_id", n.ID, "address", n.Address, "php", n.PHPVersions)
	return connect.NewResponse(resp), nil
}

// Heartbeat records liveness and load; a node that was down is ready again.
func (r *Registry) Heartbeat(ctx context.Context, req *connect.Request[agentv1.HeartbeatRequest]) (*connect.Response[agentv1.HeartbeatResponse], error) {
	id := req.Msg.NodeId
	if err := itself(ctx, id); err != nil {
		return nil, err
	}
	node, err := r.cfg.Store.Node(id)
	if err != nil {
		r.metrics.heartbeats.WithLabelValues(heartbeatError).Inc()
		return nil, err
	}
	resp := &agentv1.HeartbeatResponse{HeartbeatIntervalMs: r.cfg.HeartbeatInterval.Milliseconds(), Servers: r.servers(),
		Revocations: r.revocations(req.Msg.RevocationsVersion)}
	if node == nil {
		r.metrics.heartbeats.WithLabelValues(heartbeatUnknown).Inc()
		resp.Unknown = true
		return connect.NewResponse(resp), nil
	}
	r.metrics.heartbeats.WithLabelValues(heartbeatOK).Inc()
	r.mu.Lock()
	r.lastSeen[id] = r.now()
	r.load[id] = req.Msg
	r.mu.Unlock()
	if !req.Msg.Partial {
		resp.RemoveSiteIds = r.orphansOf(id, req.Msg.Sites)
	}
	var counts *state.SleepCounts
	if c := req.Msg.Sleep; c != nil {
		sc := state.SleepCounts{Awake: int(c.Awake), Dozing: int(c.Dozing), Asleep: int(c.Asleep),
			AwakeMemoryBytes: c.AwakeMemoryBytes, DozingMemoryBytes: c.DozingMemoryBytes}
		if req.Msg.Partial { // the memory figures come with the whole list
			sc.AwakeMemoryBytes, sc.DozingMemoryBytes = node.Sleep.AwakeMemoryBytes, node.Sleep.DozingMemoryBytes
		}
		if sc.Differs(node.Sleep) {
			counts = &sc
		}
	}
	ps := r.presence(id, req.Msg.Presence)
	if len(ps) > 0 || counts != nil {
		// Unanswered, the agent tells the same again next time.
		if _, err := r.cfg.Raft.Apply(ctx, fsm.SetSitePresence{NodeID: id, Presence: ps, Counts: counts}); err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("record sites' sleep: %w", err))
		}
	}
	if node.Status != state.NodeReady {
		if _, err := r.cfg.Raft.Apply(ctx, fsm.SetNodeStatus{ID: id, Status: state.NodeReady, At: r.now()}); err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		r.log.Info("node is back", "node_id", id)
	}
	return connect.NewResponse(resp), nil
}

// DefaultOrphanGrace is how long a node must report a site that is not
// its own before it is told to remove it: past any write in flight.
const DefaultOrphanGrace = 30 * time.Second

// orphansOf lists the sites a node reports that are no longer its own
// (deleted, or moved while it was away) and have been so for
// Config.OrphanGrace. Only the leader answers heartbeats (followers forward
// them), and it has applied every committed entry: a site it does not
// know was never placed on the node, or is gone.
func (r *Registry) orphansOf(nodeID string, reported []*agentv1.SiteStatus) []string {
	now := r.now()
	var out []string
	r.mu.Lock()
	defer r.mu.Unlock()
	mine := map[string]bool{}
	for _, rep := range reported {
		id := rep.SiteId
		if !strings.HasPrefix(id, "site_") || strings.HasPrefix(id, "site_stock") {
			continue // the node's own scratch sites
		}
		key := nodeID + "/" + id
		mine[key] = true
		site, err := r.cfg.Store.Site(id)
		if err != nil {
			continue
		}
		// Only what the state knows is elsewhere (moved) or was deleted
		// from this node: a site the state does not know at all is left
		// alone (a control plane rebuilt from scratch deletes nothing).
		moved := site != nil && site.NodeID != nodeID && (site.Move == nil || site.Move.To != nodeID)
		deleted := false
		if site == nil {
			tb, err := r.cfg.Store.Tombstone(id)
			deleted = err == nil && tb != nil && tb.NodeID == nodeID
		}
		if !moved && !deleted {
			delete(r.orphans, key)
			continue
		}
		since, ok := r.orphans[key]
		if !ok {
			r.orphans[key] = now
			continue
		}
		if now.Sub(since) >= r.cfg.OrphanGrace {
			out = append(out, id)
		}
	}
	for key := range r.orphans {
		if strings.HasPrefix(key, nodeID+"/") && !mine[key] {
			delete(r.orphans, key)
		}
	}
	if len(out) > 0 {
		r.log.Info("telling a node to remove sites that are not its own", "node_id", nodeID, "sites", out)
	}
	return out
}

// servers are the control plane's cluster URLs, for agents to fail over.
func (r *Registry) servers() []string {
	svs, err := r.cfg.Store.Servers()
	if err != nil {
		return nil
	}
	var out []string
	for _, sv := range svs {
		if sv.ClusterAddr != "" {
			out = append(out, sv.ClusterAddr)
		}
	}
	sort.Strings(out)
	return out
}

// revocations is the cluster's list of certificates agents must refuse
// (members.Revocations), or nil when the agent holds version have of it
// already (or the list cannot be read now: the agent keeps its own, and
// asks again at its next heartbeat).
func (r *Registry) revocations(have string) *agentv1.Revocations {
	ms, err := r.cfg.Store.ClusterMembers()
	if err != nil {
		r.log.Warn("reading members for the agents' revocations", "err", err)
		return nil
	}
	list := members.Revocations(ms, r.cfg.Now(), r.cfg.CertTTL)
	version := revocation.Version(list)
	if version == have {
		return nil
	}
	out := &agentv1.Revocations{Version: version, Members: make([]*agentv1.RevokedMember, 0, len(list))}
	for _, e := range list {
		out.Members = append(out.Members, &agentv1.RevokedMember{Id: e.ID, Revoked: e.Revoked,
			ValidFromUnixNano: revocation.UnixNano(e.ValidFrom), UntilUnixNano: revocation.UnixNano(e.Until)})
	}
	return out
}

// itself refuses an agent speaking for another node: its certificate
// names the one node it may register and heartbeat as.
func itself(ctx context.Context, nodeID string) error {
	peer, ok := rpcauth.Peer(ctx)
	if !ok || peer.Role != pki.RoleAgent || peer.ID != nodeID {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("this certificate may not speak for node %q", nodeID))
	}
	return nil
}

// Monitor marks nodes down when their heartbeats stop. It is a leader
// hook: a new leader first gives every node a full DownAfter of grace, so
// a failover does not mark the fleet down.
func (r *Registry) Monitor(ctx context.Context) {
	start := r.now()
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	defer r.forgetHeartbeats()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		nodes, err := r.cfg.Store.Nodes()
		if err != nil {
			continue
		}
		now := r.now()
		for _, n := range nodes {
			if n.Status != state.NodeReady {
				continue
			}
			r.mu.Lock()
			seen, ok := r.lastSeen[n.ID]
			r.mu.Unlock()
			if !ok || seen.Before(start) {
				seen = start
			}
			if now.Sub(seen) > r.cfg.DownAfter {
				if _, err := r.cfg.Raft.Apply(ctx, fsm.SetNodeStatus{ID: n.ID, Status: state.NodeDown, At: now}); err == nil {
					r.log.Warn("node is down: no heartbeat", "node_id", n.ID, "last_seen", seen)
				}
			}
		}
	}
}

// Agent returns a client for a node's AgentService.
func (r *Registry) Agent(nodeID string) (agentv1connect.AgentServiceClient, error) {
	n, err := r.cfg.Store.Node(nodeID)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fmt.Errorf("node %s is not registered", nodeID)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[nodeID]; ok && r.addrs[nodeID] == n.Address {
		return c, nil
	}
	c := agentv1connect.NewAgentServiceClient(r.cfg.Creds.Client(nodeID, pki.RoleAgent), n.Address, rpclimit.AgentClient()...)
	r.clients[nodeID], r.addrs[nodeID] = c, n.Address
	return c, nil
}

// HeldTemplates lists the templates a node reported in its last
// heartbeat to this leader.
func (r *Registry) HeldTemplates(nodeID string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hb := r.load[nodeID]; hb != nil {
		return hb.Templates
	}
	return nil
}

// Candidates is the scheduler's view of the ready nodes: capacity from
// registration, use from the sites placed on each. The view is kept
// between calls and updated when the store says what it was read from
// changed (see candidateCache), so a placement over a large fleet
// recounts only the nodes whose sites changed since the last one; each
// caller gets its own copy.
func (r *Registry) Candidates() ([]scheduler.Node, error) {
	c := &r.cands
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refresh(r.cfg.Store); err != nil {
		return nil, err
	}
	return slices.Clone(c.view), nil
}

// candidateCache is what Candidates last read: the nodes (by id) and the
// number of sites on each, every part with the store's watch on it, and
// the scheduler's view of them.
type candidateCache struct {
	mu     sync.Mutex
	nodes  []*state.Node
	nodesW state.Watch
	counts []siteCount
	view   []scheduler.Node
}

// siteCount is the number of sites on one node while w has not fired.
type siteCount struct {
	n int
	w state.Watch
}

// refresh rereads the node list if it changed, and the site counts of
// the nodes whose sites changed.
func (c *candidateCache) refresh(store *state.Store) error {
	if c.nodesW.Changed() {
		nodes, w, err := store.NodesWatch()
		if err != nil {
			return err
		}
		// Counts of nodes still listed stay good until their own watch fires.
		kept := make(map[string]siteCount, len(c.nodes))
		for i, n := range c.nodes {
			kept[n.ID] = c.counts[i]
		}
		c.counts, c.view = make([]siteCount, len(nodes)), make([]scheduler.Node, len(nodes))
		for i, n := range nodes {
			c.counts[i] = kept[n.ID]
			c.view[i] = scheduler.Node{ID: n.ID, Ready: n.Status == state.NodeReady && n.Drain == nil, Images: n.PHPVersions, Labels: n.Labels,
				Capacity: scheduler.Resources{MemoryMB: n.MemoryMB, CPUMilli: n.CPUMilli, Sites: n.MaxSites}}
			c.view[i].Used = used(c.counts[i].n, n.Sleep)
		}
		c.nodes, c.nodesW = nodes, w
	}
	var stale []int
	var ids []string
	for i := range c.counts {
		if c.counts[i].w.Changed() {
			stale, ids = append(stale, i), append(ids, c.nodes[i].ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	counts, watches, err := store.CountSitesOnNodes(ids)
	if err != nil {
		return err
	}
	for j, i := range stale {
		c.counts[i] = siteCount{n: counts[j], w: watches[j]}
		c.view[i].Used = used(counts[j], c.nodes[i].Sleep)
	}
	return nil
}

// used is what sites placed on a node claim: an awake site (or one its
// node has not reported yet) SiteMemoryMB, a dozing one what the node's
// dozing sites hold on average, an asleep one AsleepMemoryMB.
func used(sites int, sleep state.SleepCounts) scheduler.Resources {
	dozing, asleep := min(sleep.Dozing, sites), min(sleep.Asleep, sites-min(sleep.Dozing, sites))
	perDozing := int64(DozingMemoryMB)
	if sleep.Dozing > 0 && sleep.DozingMemoryBytes > 0 {
		perDozing = max(1, (sleep.DozingMemoryBytes/int64(sleep.Dozing)+1<<20-1)>>20)
	}
	mem := int64(sites-dozing-asleep)*SiteMemoryMB + int64(dozing)*perDozing + int64(asleep)*AsleepMemoryMB
	return scheduler.Resources{MemoryMB: mem, Sites: sites}
}

// What the scheduler reserves for one site: awake, dozing (until its
// node reports what its dozing sites hold) and asleep.
const (
	SiteMemoryMB   = 256
	DozingMemoryMB = 16
	AsleepMemoryMB = 1
)

// AvailablePHP lists the PHP versions some ready node can run.
func (r *Registry) AvailablePHP() []string {
	nodes, _ := r.cfg.Store.Nodes()
	seen := map[string]bool{}
	for _, n := range nodes {
		if n.Status == state.NodeReady {
			for _, v := range n.PHPVersions {
				seen[v] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// presence is a heartbeat's sleep report as the state keeps it: only
// the node's own sites whose report changes something (the log keeps no
// more than that), at most maxPresence of them, no time past now.
func (r *Registry) presence(nodeID string, ps []*agentv1.SitePresence) []state.SitePresence {
	now := r.now()
	var out []state.SitePresence
	for _, p := range ps[:min(len(ps), maxPresence)] {
		s, err := r.cfg.Store.Site(p.SiteId)
		if err != nil || s == nil || s.NodeID != nodeID {
			continue
		}
		sp := state.SitePresence{SiteID: p.SiteId, Sleeping: p.Sleeping}
		if p.LastRequestUnix > 0 {
			t := time.Unix(p.LastRequestUnix, 0).UTC()
			if t.After(now) {
				t = now.Truncate(time.Minute)
			}
			sp.LastRequestAt = &t
		}
		if s.Sleeping == sp.Sleeping && (sp.LastRequestAt == nil || s.LastRequestAt != nil && s.LastRequestAt.Equal(*sp.LastRequestAt)) {
			continue
		}
		out = append(out, sp)
	}
	return out
}

// maxPresence bounds the sites one heartbeat's sleep report changes (an
// agent sends at most 2,000).
const maxPresence = 10000
