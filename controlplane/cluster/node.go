// Package cluster runs the control plane's Raft node: storage, transport,
// bootstrap and join, the one Apply path every write takes, leader-only
// work that starts and stops with leadership, and consistent-read checks.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
)

// ErrNotLeader is returned by Apply when the command was not written: this
// node does not lead (the caller may retry on the leader), or leadership is
// being handed over. ErrOutcomeUnknown means the command went out and its
// fate is unknown. Both are package writes' errors, which the API answers
// without knowing of Raft.
var (
	ErrNotLeader      = writes.ErrNotLeader
	ErrOutcomeUnknown = writes.ErrOutcomeUnknown
)

// Raft timeouts. A follower notices a dead leader after 1 to 2 heartbeat
// timeouts; the other follower, which has not noticed yet, refuses its
// vote (it still knows a leader), so the usual election takes a second
// round one election timeout later. A heartbeat timeout half the
// election timeout brings a write back in about two election timeouts
// (docs/benchmarks.md) while a leader still has 50 heartbeats in which
// to reach each follower.
const (
	DefaultHeartbeatTimeout = 500 * time.Millisecond
	DefaultElectionTimeout  = time.Second
)

// Config says where a node keeps its data and how it reaches its peers.
type Config struct {
	// NodeID is this server's stable id in the Raft configuration.
	NodeID string
	// DataDir holds raft.db (log and stable store) and snapshots/.
	DataDir string
	// RaftAddr is the TCP address Raft listens on (host:port).
	RaftAddr string
	// AdvertiseRaftAddr is the address peers dial; defaults to RaftAddr.
	AdvertiseRaftAddr string
	// APIAddr is this node's advertised API base URL.
	APIAddr string
	// ClusterAddr is this node's mutual-TLS URL, which followers forward
	// requests to when it leads.
	ClusterAddr string
	// Bootstrap makes a brand-new node form a single-voter cluster. A node
	// with existing state ignores it.
	Bootstrap bool
	// Logger receives raft's and the node's logs.
	Logger *slog.Logger
	// ApplyTimeout bounds one Apply; zero means 10s.
	ApplyTimeout time.Duration
	// FastTimeoutsForTests shortens election and heartbeat timeouts.
	FastTimeoutsForTests bool
	// HeartbeatTimeout is how long a follower goes without hearing from
	// the leader before it calls an election; zero means
	// DefaultHeartbeatTimeout.
	HeartbeatTimeout time.Duration
	// ElectionTimeout is how long a candidate waits for votes before it
	// tries again; zero means DefaultElectionTimeout.
	ElectionTimeout time.Duration
	// SnapshotThreshold is the number of log entries between snapshots;
	// zero keeps raft's default (8192).
	SnapshotThreshold uint64
	// NoSyncForTests skips fsync in the log store. Never in production.
	NoSyncForTests bool
	// TrailingLogs is how many entries a snapshot leaves in the log; zero
	// keeps raft's default (10240). Tests lower it to force snapshot installs.
	TrailingLogs uint64
	// InmemTransport replaces TCP with an in-process transport: for a
	// single-node cluster (sandboxd dev) that needs no port of its own.
	InmemTransport bool
	// ServerTLS and ClientTLS secure the TCP transport (mutual TLS under
	// the cluster CA, servers only); both are required with TCP.
	ServerTLS, ClientTLS *tls.Config
}

// Node is one running Raft member with its state store.
type Node struct {
	cfg       Config
	log       *slog.Logger
	raft      *raft.Raft
	store     *state.Store
	logStore  *raftboltdb.BoltStore
	transport raft.Transport
	notify    chan bool

	ready    atomic.Bool // leader and caught up (barrier passed)
	mu       sync.Mutex
	hooks    []LeaderHook
	termCtx  context.Context    // lives as long as this node's current leader term
	cancel   context.CancelFunc // ends termCtx
	leaderWG sync.WaitGroup
	done     chan struct{}
	loopDone chan struct{}
	shutdown sync.Once
	shutErr  error
}

// LeaderHook is leader-only work. It runs in its own goroutine when this
// node becomes leader and has caught up, and must return once ctx is
// cancelled (leadership lost or shutdown).
type LeaderHook func(ctx context.Context)

// New opens (or creates) a node's storage and starts Raft.
func New(cfg Config, store *state.Store) (*Node, error) {
	if cfg.InmemTransport && cfg.RaftAddr == "" {
		cfg.RaftAddr = "inmem:" + cfg.NodeID
	}
	if cfg.NodeID == "" || cfg.DataDir == "" || cfg.RaftAddr == "" {
		return nil, fmt.Errorf("cluster: NodeID, DataDir and RaftAddr are required")
	}
	if cfg.AdvertiseRaftAddr == "" {
		cfg.AdvertiseRaftAddr = cfg.RaftAddr
	}
	if cfg.ApplyTimeout == 0 {
		cfg.ApplyTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With("component", "raft", "node_id", cfg.NodeID)
	installRaftSink()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: create data dir: %w", err)
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = newHCLogger(log)
	rc.NoLegacyTelemetry = true // per-peer metric names duplicate the labelled ones
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	rc.HeartbeatTimeout, rc.ElectionTimeout = DefaultHeartbeatTimeout, DefaultElectionTimeout
	if cfg.HeartbeatTimeout > 0 {
		rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	}
	if cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = cfg.ElectionTimeout
	}
	// The leader steps down when it has not reached a quorum for this
	// long; it may not exceed the heartbeat timeout.
	rc.LeaderLeaseTimeout = min(rc.LeaderLeaseTimeout, rc.HeartbeatTimeout)
	// A single in-process node has no peers to wait for: short timeouts
	// only shorten its first election.
	if cfg.FastTimeoutsForTests || cfg.InmemTransport {
		rc.HeartbeatTimeout = 300 * time.Millisecond
		rc.ElectionTimeout = 300 * time.Millisecond
		rc.LeaderLeaseTimeout = 150 * time.Millisecond
		rc.CommitTimeout = 5 * time.Millisecond
	}
	notify := make(chan bool, 16)
	rc.NotifyCh = notify

	logStore, err := raftboltdb.New(raftboltdb.Options{
		Path:   filepath.Join(cfg.DataDir, "raft.db"),
		NoSync: cfg.NoSyncForTests,
		// The freelist is rebuilt on open instead of written on every
		// commit: most of a log append's write cost otherwise.
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft.db: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, rc.Logger)
	if err != nil {
		logStore.Close()
		return nil, fmt.Errorf("cluster: open snapshots: %w", err)
	}
	transport, err := newTransport(cfg, rc)
	if err != nil {
		logStore.Close()
		return nil, err
	}

	n := &Node{cfg: cfg, log: log, store: store, logStore: logStore, transport: transport,
		notify: notify, done: make(chan struct{}), loopDone: make(chan struct{})}
	f := fsm.New(store, cfg.Logger)

	if cfg.Bootstrap {
		has, err := raft.HasExistingState(logStore, logStore, snaps)
		if err != nil {
			n.closeStorage()
			return nil, fmt.Errorf("cluster: check existing state: %w", err)
		}
		if !has {
			conf := raft.Configuration{Servers: []raft.Server{{
				Suffrage: raft.Voter, ID: rc.LocalID, Address: transport.LocalAddr(),
			}}}
			if err := raft.BootstrapCluster(rc, logStore, logStore, snaps, transport, conf); err != nil {
				n.closeStorage()
				return nil, fmt.Errorf("cluster: bootstrap: %w", err)
			}
		}
	}
	// Recent entries are served from memory: replication and the FSM read
	// back what was just written instead of going to bolt for it.
	cached, err := raft.NewLogCache(1024, logStore)
	if err != nil {
		n.closeStorage()
		return nil, fmt.Errorf("cluster: log cache: %w", err)
	}
	r, err := raft.NewRaft(rc, f, cached, logStore, snaps, transport)
	if err != nil {
		n.closeStorage()
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	n.raft = r
	go n.leadershipLoop()
	return n, nil
}

func newTransport(cfg Config, rc *raft.Config) (raft.Transport, error) {
	if cfg.InmemTransport {
		_, t := raft.NewInmemTransport(raft.ServerAddress(cfg.RaftAddr))
		return t, nil
	}
	if cfg.ServerTLS == nil || cfg.ClientTLS == nil {
		return nil, errors.New("cluster: a TCP transport needs TLS")
	}
	adv, err := net.ResolveTCPAddr("tcp", cfg.AdvertiseRaftAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: advertise address: %w", err)
	}
	stream, err := newTLSStream(cfg.RaftAddr, adv, cfg.ServerTLS, cfg.ClientTLS)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen %s: %w", cfg.RaftAddr, err)
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: stream, MaxPool: 8, Timeout: 10 * time.Second,
		Logger: rc.Logger}), nil
}

func closeTransport(t raft.Transport) {
	if c, ok := t.(io.Closer); ok {
		c.Close()
	}
}

func (n *Node) closeStorage() {
	closeTransport(n.transport)
	n.logStore.Close()
}

// OnLeader registers work that runs while this node leads. Register before
// the node can become leader (right after New) to not miss a term.
func (n *Node) OnLeader(h LeaderHook) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hooks = append(n.hooks, h)
	if n.cancel != nil && n.ready.Load() {
		n.startHook(h)
	}
}

// leadershipLoop follows raft's leadership notifications. It is owned by
// the Node and ends when Shutdown closes n.done.
func (n *Node) leadershipLoop() {
	defer close(n.loopDone)
	for {
		select {
		case <-n.done:
			n.stopLeading()
			return
		case leader := <-n.notify:
			if leader {
				n.startLeading()
			} else {
				n.stopLeading()
			}
		}
	}
}

func (n *Node) startLeading() {
	n.stopLeading()
	ctx, cancel := context.WithCancel(context.Background())
	// A new leader's FSM may trail the commit index; the barrier makes
	// every read on this leader current before it serves or dispatches.
	// Then it records its own addresses so followers can forward to it.
	// Both are retried for as long as this node leads.
	for attempt := 0; ; attempt++ {
		err := n.raft.Barrier(n.cfg.ApplyTimeout).Error()
		if err == nil {
			_, err = n.Apply(ctx, fsm.UpsertServer{Server: state.Server{
				ID: n.cfg.NodeID, RaftAddr: n.cfg.AdvertiseRaftAddr, APIAddr: n.cfg.APIAddr, ClusterAddr: n.cfg.ClusterAddr,
			}})
		}
		if err == nil {
			break
		}
		n.log.Warn("establishing leadership failed", "attempt", attempt, "err", err)
		select {
		case <-n.done:
			cancel()
			return
		case <-time.After(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second)):
		}
		if n.raft.State() != raft.Leader {
			cancel()
			return
		}
	}
	n.mu.Lock()
	n.termCtx, n.cancel = ctx, cancel
	n.ready.Store(true)
	for _, h := range n.hooks {
		n.startHook(h)
	}
	n.mu.Unlock()
	n.log.Info("leading")
}

// startHook runs with n.mu held and a current term.
func (n *Node) startHook(h LeaderHook) {
	ctx := n.termCtx
	n.leaderWG.Add(1)
	go func() {
		defer n.leaderWG.Done()
		h(ctx)
	}()
}

func (n *Node) stopLeading() {
	n.mu.Lock()
	n.ready.Store(false)
	cancel := n.cancel
	n.cancel = nil
	n.mu.Unlock()
	if cancel != nil {
		cancel()
		n.leaderWG.Wait()
		n.log.Info("stopped leading")
	}
}

var _ fsm.Applier = (*Node)(nil)

// Apply commits one command and returns the FSM's result. On a follower it
// returns ErrNotLeader without touching the log.
func (n *Node) Apply(ctx context.Context, c fsm.Command) (any, error) {
	// A raft apply cannot be called back once submitted; a caller whose
	// context has ended must not start one.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("raft apply: %w", err)
	}
	data, err := fsm.Encode(c)
	if err != nil {
		return nil, err
	}
	timeout := n.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	start := time.Now()
	f := n.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		switch {
		// Refused before the log took it: nothing was written.
		case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
			return nil, ErrNotLeader
		case errors.Is(err, raft.ErrEnqueueTimeout):
			return nil, fmt.Errorf("raft apply: %w: %w", ErrNotLeader, err)
		}
		// Lost leadership, shut down or restored mid-way: the entry may
		// already be on a majority and be committed by the next leader.
		return nil, fmt.Errorf("raft apply: %w: %w", ErrOutcomeUnknown, err)
	}
	applyDuration.Observe(time.Since(start).Seconds())
	if err, ok := f.Response().(error); ok {
		return nil, err
	}
	return f.Response(), nil
}

// IsLeader reports whether this node leads and has caught up.
func (n *Node) IsLeader() bool { return n.ready.Load() && n.raft.State() == raft.Leader }

// LeaderAPI returns the leader's API base URL, or "" when there is no
// known leader (an election is under way).
func (n *Node) LeaderAPI() string {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return ""
	}
	sv, err := n.store.Server(string(id))
	if err != nil || sv == nil {
		return ""
	}
	return sv.APIAddr
}

// LeaderCluster returns the leader's mutual-TLS URL, or "" when there is
// no known leader.
func (n *Node) LeaderCluster() string {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return ""
	}
	sv, err := n.store.Server(string(id))
	if err != nil || sv == nil {
		return ""
	}
	return sv.ClusterAddr
}

// LeaderID returns the leader's server id, or "" when there is no known
// leader: what health may tell anyone, unlike the leader's addresses.
func (n *Node) LeaderID() string {
	_, id := n.raft.LeaderWithID()
	return string(id)
}

// CaughtUp reports whether this node's state is the cluster's as of a
// moment ago: it leads, or it has heard from a leader since it started
// and applied every entry the leader said was committed. A server that
// just restarted serves only its snapshot until then.
func (n *Node) CaughtUp() bool {
	if n.IsLeader() {
		return true
	}
	if _, id := n.raft.LeaderWithID(); id == "" || n.raft.LastContact().IsZero() {
		return false
	}
	commit, err := strconv.ParseUint(n.raft.Stats()["commit_index"], 10, 64)
	return err == nil && commit > 0 && n.raft.AppliedIndex() >= commit
}

// VerifyLeader confirms with a quorum that this node still leads, so a read
// it serves is not from a deposed leader.
func (n *Node) VerifyLeader() error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return fmt.Errorf("verify leader: %w", ErrNotLeader)
	}
	return nil
}

// Barrier waits until every entry committed so far is applied locally.
func (n *Node) Barrier(timeout time.Duration) error {
	if err := n.raft.Barrier(timeout).Error(); err != nil {
		return fmt.Errorf("raft barrier: %w", err)
	}
	return nil
}

// AddVoter adds (or re-adds at a new address) a voting server and records
// its API address. Only the leader can do it.
func (n *Node) AddVoter(ctx context.Context, sv state.Server) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if err := n.raft.AddVoter(raft.ServerID(sv.ID), raft.ServerAddress(sv.RaftAddr), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("add voter %s: %w", sv.ID, err)
	}
	if _, err := n.Apply(ctx, fsm.UpsertServer{Server: sv}); err != nil {
		return fmt.Errorf("record server %s: %w", sv.ID, err)
	}
	return nil
}

// RemoveServer takes a server out of the configuration.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("remove server %s: %w", id, err)
	}
	_, err := n.Apply(ctx, fsm.RemoveServer{ID: id})
	return err
}

// Snapshot asks raft to take a snapshot now.
func (n *Node) Snapshot() error {
	if err := n.raft.Snapshot().Error(); err != nil {
		return fmt.Errorf("raft snapshot: %w", err)
	}
	return nil
}

// Stats exposes raft's counters for metrics and health.
func (n *Node) Stats() map[string]string { return n.raft.Stats() }

// State is raft's view of this node: Leader, Follower, Candidate or Shutdown.
func (n *Node) State() raft.RaftState { return n.raft.State() }

// RaftAddr is the address peers dial to reach this node's Raft.
func (n *Node) RaftAddr() string { return n.cfg.AdvertiseRaftAddr }

// ID is this node's server id.
func (n *Node) ID() string { return n.cfg.NodeID }

// AppliedIndex is the last log index applied to the local state.
func (n *Node) AppliedIndex() uint64 { return n.raft.AppliedIndex() }

// Term is the Raft term this node is in.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// Store is the node's state store (read-only use outside the FSM).
func (n *Node) Store() *state.Store { return n.store }

// Shutdown stops leader work, raft and the storage. Later calls return
// the first call's result.
func (n *Node) Shutdown() error {
	n.shutdown.Do(func() {
		close(n.done)
		<-n.loopDone
		err := n.raft.Shutdown().Error()
		closeTransport(n.transport)
		if cerr := n.logStore.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			n.shutErr = fmt.Errorf("cluster shutdown: %w", err)
		}
	})
	return n.shutErr
}
