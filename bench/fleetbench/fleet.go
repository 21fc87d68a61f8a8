package main

// The fleet: simulated node agents, run in a child process of the
// benchmark so that the servers' process measures only the servers. Each
// agent enrols with its own join token (its own certificate), serves a
// fake AgentService on its own mutual-TLS port (CreateSite answers at
// once: the control plane's create jobs finish without WordPress), and
// registers and heartbeats through rpcauth's failover client, as the
// real agent does. The parent drives the fleet with one JSON command per
// line on stdin and reads one JSON reply per line on stdout.

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/rpclimit"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// command is one instruction from the parent.
type command struct {
	Op string `json:"op"`
	// start: the servers' cluster URLs, one name and join token per agent.
	Servers  []string      `json:"servers,omitempty"`
	Names    []string      `json:"names,omitempty"`
	Tokens   []string      `json:"tokens,omitempty"`
	Interval time.Duration `json:"interval,omitempty"`
	Parallel int           `json:"parallel,omitempty"`
	// mark: heartbeats that start at or after this time (Unix ns) count
	// for recovery.
	At int64 `json:"at,omitempty"`
}

// reply answers one command.
type reply struct {
	Err string `json:"err,omitempty"`
	// start
	EnrolSeconds    float64 `json:"enrolSeconds,omitempty"`
	RegisterSeconds float64 `json:"registerSeconds,omitempty"`
	// stats: cumulative counters, the fleet process's CPU, and the
	// latencies of heartbeats answered since the previous stats.
	OK       int64   `json:"ok"`
	Failed   int64   `json:"failed"`
	CPUNanos int64   `json:"cpuNanos"`
	P50Ms    float64 `json:"p50Ms"`
	P99Ms    float64 `json:"p99Ms"`
	// recovery: after the mark, when the first heartbeat was accepted,
	// when 99% of agents (and all) had one accepted (Unix ns; 0: not yet).
	First int64 `json:"first,omitempty"`
	P99   int64 `json:"p99,omitempty"`
	All   int64 `json:"all,omitempty"`
}

// fleet is the child's state.
type fleet struct {
	dir    string
	agents []*simAgent

	paused   atomic.Bool
	mu       sync.Mutex
	resumed  chan struct{} // closed when a pause ends
	interval time.Duration

	ok, failed atomic.Int64
	mark       atomic.Int64

	latMu sync.Mutex
	lat   []time.Duration
}

// simAgent is one simulated node agent.
type simAgent struct {
	f      *fleet
	name   string
	creds  *rpcauth.Creds
	client agentv1connect.RegistryServiceClient
	url    string
	ln     net.Listener
	http   *http.Server

	mu    sync.Mutex
	sites []*agentv1.SiteStatus
	port  int32

	// recovered is when the first heartbeat started after the mark was
	// accepted (Unix ns).
	recovered atomic.Int64
}

// runFleet is the child's main: it serves commands until stdin ends or
// "quit" comes, then stops every agent and removes its files.
func runFleet() error {
	dir, err := os.MkdirTemp("", "fleetbench-agents-")
	if err != nil {
		return fmt.Errorf("fleet dir: %w", err)
	}
	f := &fleet{dir: dir, resumed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		f.stop()
		_ = os.RemoveAll(dir)
	}()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 256<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			return fmt.Errorf("fleet command: %w", err)
		}
		if c.Op == "quit" {
			return out.Encode(reply{})
		}
		r := f.do(ctx, c)
		if err := out.Encode(r); err != nil {
			return fmt.Errorf("fleet reply: %w", err)
		}
	}
	return in.Err()
}

func (f *fleet) do(ctx context.Context, c command) reply {
	switch c.Op {
	case "start":
		return f.start(ctx, c)
	case "pause":
		f.mu.Lock()
		if !f.paused.Load() {
			f.resumed = make(chan struct{})
			f.paused.Store(true)
		}
		f.mu.Unlock()
		return reply{}
	case "resume":
		f.mu.Lock()
		if f.paused.Load() {
			f.paused.Store(false)
			close(f.resumed)
		}
		f.mu.Unlock()
		return reply{}
	case "stats":
		return f.stats()
	case "mark":
		for _, a := range f.agents {
			a.recovered.Store(0)
		}
		f.mark.Store(c.At)
		return reply{}
	case "recovery":
		return f.recovery()
	}
	return reply{Err: "unknown op " + c.Op}
}

// start enrols every agent (with bounded parallelism), starts its
// AgentService, registers it and starts its heartbeats; it answers once
// every agent is registered.
func (f *fleet) start(ctx context.Context, c command) reply {
	if len(c.Names) != len(c.Tokens) || len(c.Servers) == 0 {
		return reply{Err: "start needs servers and one token per name"}
	}
	f.interval = c.Interval
	t0 := time.Now()
	f.agents = make([]*simAgent, len(c.Names))
	sem := make(chan struct{}, max(c.Parallel, 1))
	var wg sync.WaitGroup
	var firstErr error
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	for i, name := range c.Names {
		// Agent i tries server i mod 3 first: the fleet is spread over
		// the servers, each agent keeping to the one that answers.
		servers := append(append([]string(nil), c.Servers[i%len(c.Servers):]...), c.Servers[:i%len(c.Servers)]...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			a, err := f.newAgent(ctx, name, c.Tokens[i], servers)
			if err != nil {
				fail(err)
				return
			}
			f.agents[i] = a
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return reply{Err: firstErr.Error()}
	}
	enrolled := time.Now()
	regs := make(chan error, len(f.agents))
	for _, a := range f.agents {
		go a.run(ctx, sem, regs)
	}
	for range f.agents {
		if err := <-regs; err != nil {
			return reply{Err: err.Error()}
		}
	}
	return reply{EnrolSeconds: enrolled.Sub(t0).Seconds(), RegisterSeconds: time.Since(enrolled).Seconds()}
}

func (f *fleet) newAgent(ctx context.Context, name, token string, servers []string) (*simAgent, error) {
	ectx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	creds, err := enroll.Obtain(ectx, enroll.Config{Dir: filepath.Join(f.dir, name), Role: pki.RoleAgent, Name: name,
		Servers: servers, JoinToken: token})
	if err != nil {
		return nil, fmt.Errorf("enrol %s: %w", name, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("agent %s listen: %w", name, err)
	}
	a := &simAgent{f: f, name: name, creds: creds, ln: ln, url: "https://" + ln.Addr().String(), port: 20000}
	// A few sites each, as a node that has been running a while reports.
	for i := 0; i < 3; i++ {
		a.addSite(fmt.Sprintf("site_%s_%d", name, i))
	}
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(&fakeAgent{a: a}, rpclimit.AgentServer()...))
	a.http = &http.Server{Handler: rpcauth.Require(nil, pki.RoleServer)(mux), Protocols: rpcauth.Protocols(),
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = a.http.Serve(tls.NewListener(ln, creds.ServerTLS(true))) }()
	a.client = agentv1connect.NewRegistryServiceClient(creds.FailoverClient(func() []string { return servers }, pki.RoleServer),
		rpcauth.ControlPlane, rpclimit.RegistryClient()...)
	return a, nil
}

func (a *simAgent) addSite(id string) *agentv1.SiteStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.port++
	st := &agentv1.SiteStatus{SiteId: id, State: agentv1.SiteState_SITE_STATE_READY, Port: a.port, Address: "10.88.0.2",
		MemoryBytes: 13 << 20}
	a.sites = append(a.sites, st)
	return st
}

// registration is what the real agent sends: its address, PHP images
// and a capacity large enough for every site the benchmark places.
func (a *simAgent) registration() *agentv1.RegisterRequest {
	return &agentv1.RegisterRequest{NodeId: a.name, Address: a.url, BackendHost: "127.0.0.1", AgentVersion: "fleetbench",
		PhpVersions: []string{"7.4", "8.1", "8.2", "8.3", "8.4"},
		Capacity:    &agentv1.Resources{MemoryMb: 64 << 20, CpuMilli: 64000}}
}

func (a *simAgent) heartbeat() *agentv1.HeartbeatRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return &agentv1.HeartbeatRequest{NodeId: a.name, PhpVersions: []string{"7.4", "8.1", "8.2", "8.3", "8.4"}, Load1: 0.42,
		Used: &agentv1.Resources{Sites: int32(len(a.sites))}, Sites: append([]*agentv1.SiteStatus(nil), a.sites...)}
}

// run registers (reporting to regs once), then heartbeats every
// interval like the real agent's loop: sleep, heartbeat, re-register
// when the control plane has forgotten the node.
func (a *simAgent) run(ctx context.Context, sem chan struct{}, regs chan<- error) {
	interval := a.f.interval
	sem <- struct{}{}
	err := a.register(ctx)
	<-sem
	regs <- err
	if err != nil {
		return
	}
	// Agents start at random points of the interval, as a fleet started
	// over time does.
	sleep(ctx, rand.N(interval))
	for ctx.Err() == nil {
		a.f.gate(ctx)
		start := time.Now()
		resp, err := a.client.Heartbeat(ctx, connect.NewRequest(a.heartbeat()))
		end := time.Now()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			a.f.failed.Add(1)
		} else {
			a.f.ok.Add(1)
			a.f.record(end.Sub(start))
			if m := a.f.mark.Load(); m != 0 && start.UnixNano() >= m {
				a.recovered.CompareAndSwap(0, end.UnixNano())
			}
			if resp.Msg.Unknown {
				_ = a.register(ctx)
			}
		}
		sleep(ctx, interval)
	}
}

func (a *simAgent) register(ctx context.Context) error {
	var err error
	for try := 0; try < 20 && ctx.Err() == nil; try++ {
		if _, err = a.client.Register(ctx, connect.NewRequest(a.registration())); err == nil {
			return nil
		}
		sleep(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("register %s: %w", a.name, err)
}

// gate holds a heartbeat while the fleet is paused; after a pause each
// agent waits a random part of the interval, so the fleet resumes spread
// as before, without one burst.
func (f *fleet) gate(ctx context.Context) {
	if !f.paused.Load() {
		return
	}
	f.mu.Lock()
	ch := f.resumed
	paused := f.paused.Load()
	f.mu.Unlock()
	if !paused {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-ch:
	}
	sleep(ctx, rand.N(f.interval))
}

func (f *fleet) record(d time.Duration) {
	f.latMu.Lock()
	f.lat = append(f.lat, d)
	f.latMu.Unlock()
}

func (f *fleet) stats() reply {
	f.latMu.Lock()
	lat := f.lat
	f.lat = nil
	f.latMu.Unlock()
	r := reply{OK: f.ok.Load(), Failed: f.failed.Load(), CPUNanos: processCPU()}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		r.P50Ms = ms(lat[len(lat)/2])
		r.P99Ms = ms(lat[min(len(lat)-1, len(lat)*99/100)])
	}
	return r
}

// recovery reports when heartbeats started after the mark were first
// accepted, and when 99% and all of the agents had one accepted.
func (f *fleet) recovery() reply {
	var at []int64
	for _, a := range f.agents {
		if t := a.recovered.Load(); t != 0 {
			at = append(at, t)
		}
	}
	r := reply{OK: f.ok.Load(), Failed: f.failed.Load()}
	if len(at) == 0 {
		return r
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	r.First = at[0]
	if need := (len(f.agents)*99 + 99) / 100; len(at) >= need {
		r.P99 = at[need-1]
	}
	if len(at) == len(f.agents) {
		r.All = at[len(at)-1]
	}
	return r
}

func (f *fleet) stop() {
	for _, a := range f.agents {
		if a != nil {
			_ = a.http.Close()
		}
	}
}

// fakeAgent is a node's AgentService without containers: a site is made
// at once and reported in the next heartbeats.
type fakeAgent struct {
	agentv1connect.UnimplementedAgentServiceHandler
	a *simAgent
}

func (f *fakeAgent) CreateSite(_ context.Context, req *connect.Request[agentv1.CreateSiteRequest]) (*connect.Response[agentv1.CreateSiteResponse], error) {
	if req.Msg.SiteId == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("site_id is required"))
	}
	st := f.a.addSite(req.Msg.SiteId)
	return connect.NewResponse(&agentv1.CreateSiteResponse{Status: st, WordpressVersion: "6.8.1"}), nil
}

func (f *fakeAgent) DeleteSite(_ context.Context, req *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.DeleteSiteResponse], error) {
	f.a.mu.Lock()
	defer f.a.mu.Unlock()
	for i, s := range f.a.sites {
		if s.SiteId == req.Msg.SiteId {
			f.a.sites = append(f.a.sites[:i], f.a.sites[i+1:]...)
			return connect.NewResponse(&agentv1.DeleteSiteResponse{Existed: true}), nil
		}
	}
	return connect.NewResponse(&agentv1.DeleteSiteResponse{}), nil
}

// processCPU is this process's user and system CPU time so far.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
