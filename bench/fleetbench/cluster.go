package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/apiclient"
	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/memberspec"
	"github.com/sandboxd/sandboxd/controlplane/server"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/pki"
)

// cluster is three servers on loopback TCP: real Raft between them over
// mutual TLS, fsync on, the default Raft timeouts.
type cluster struct {
	name    string
	servers []*server.Server
	cfgs    []server.Config
}

// freeAddr returns a loopback address with a free TCP port, never one
// returned before (the kernel may hand a just-closed port out again).
func freeAddr() (string, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("free port: %w", err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		if _, dup := handedOut.LoadOrStore(addr, true); !dup {
			return addr, nil
		}
	}
}

var handedOut sync.Map

// logs sends the servers' warnings to stderr (-log).
var logs bool

// startCluster starts three servers in dir: the first bootstraps, the
// others join it with a join token each. Addresses are fixed, so a
// killed server restarts where agents and clients expect it.
func startCluster(ctx context.Context, name, dir string, heartbeat time.Duration) (*cluster, error) {
	c := &cluster{name: name}
	key := server.NewSealingKey()
	for i := 0; i < 3; i++ {
		var addrs [3]string
		for j := range addrs {
			a, err := freeAddr()
			if err != nil {
				return c, err
			}
			addrs[j] = a
		}
		cfg := server.DefaultConfig()
		cfg.DataDir = filepath.Join(dir, fmt.Sprintf("server-%d", i+1))
		cfg.NodeID = fmt.Sprintf("server-%d", i+1)
		cfg.APIAddr, cfg.RaftAddr, cfg.ClusterAddr = addrs[0], addrs[1], addrs[2]
		cfg.SealingKey = key
		cfg.Logger = slog.New(slog.DiscardHandler)
		if logs {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("cluster", name)
		}
		cfg.HeartbeatInterval = heartbeat
		// The load is a few clients on one address writing as fast as
		// they can, on purpose.
		cfg.RateLimits = api.RateLimits{}
		// Paid accounts without a site limit or lifetime: the benchmark
		// creates tens of thousands of sites with a few accounts.
		cfg.Plans.Paid.Sites, cfg.Plans.Paid.SiteLifetimeMinutes = 0, 0
		cfg.Bootstrap = i == 0
		if i > 0 {
			lead := c.servers[0]
			cfg.Join = []string{lead.ClusterURL()}
			tok, _, err := lead.Members().CreateJoinToken(ctx, memberspec.JoinTokenOptions{Role: pki.RoleServer, Name: cfg.NodeID})
			if err != nil {
				return c, fmt.Errorf("%s: join token for %s: %w", name, cfg.NodeID, err)
			}
			cfg.JoinToken = tok
			// The bootstrap operator token works on every server.
			if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
				return c, err
			}
			if err := os.WriteFile(filepath.Join(cfg.DataDir, "operator-token"), []byte(lead.OperatorToken()), 0o600); err != nil {
				return c, fmt.Errorf("%s: operator token: %w", name, err)
			}
		}
		s, err := startServer(name, cfg)
		if err != nil {
			return c, fmt.Errorf("%s: %s: %w", name, cfg.NodeID, err)
		}
		c.servers, c.cfgs = append(c.servers, s), append(c.cfgs, cfg)
		if i == 0 {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := s.WaitLeader(wctx)
			cancel()
			if err != nil {
				return c, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return c, c.waitFor(ctx, 60*time.Second, "all three servers to be voters", func() bool {
		for _, s := range c.servers {
			if sv, _ := s.Node().Store().Servers(); len(sv) != 3 {
				return false
			}
		}
		return true
	})
}

// startServer starts one server with its goroutines labelled with its
// cluster and id (every goroutine it starts inherits the label), so a
// CPU profile tells the leader's share from the followers' (go tool
// pprof -tags).
func startServer(clusterName string, cfg server.Config) (s *server.Server, err error) {
	pprof.Do(context.Background(), pprof.Labels("server", clusterName+"/"+cfg.NodeID), func(context.Context) {
		if s, err = server.New(cfg); err != nil {
			return
		}
		if err = s.Start(); err != nil {
			_ = s.Close()
		}
	})
	return s, err
}

// close stops every running server, at once; one that has not stopped
// after 30 s is left to the process's exit.
func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, s := range c.servers {
		if s != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = s.Close()
			}()
		}
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		fmt.Fprintf(os.Stderr, "fleetbench: %s: a server did not stop within 30s\n", c.name)
	}
}

// leader waits for a server to lead and returns it.
func (c *cluster) leader(ctx context.Context) (*server.Server, error) {
	var l *server.Server
	err := c.waitFor(ctx, 30*time.Second, "a leader", func() bool {
		for _, s := range c.servers {
			if s != nil && s.Node().IsLeader() {
				l = s
				return true
			}
		}
		return false
	})
	return l, err
}

// kill stops server i as a crash would.
func (c *cluster) kill(i int) {
	c.servers[i].Kill()
	c.servers[i] = nil
}

// restart starts server i again from its data dir and waits until it
// has caught up with the leader.
func (c *cluster) restart(ctx context.Context, i int) error {
	cfg := c.cfgs[i]
	cfg.JoinToken = "" // spent: the certificate is in the data dir
	s, err := startServer(c.name, cfg)
	if err != nil {
		return fmt.Errorf("%s: restart %s: %w", c.name, cfg.NodeID, err)
	}
	c.servers[i] = s
	return c.waitFor(ctx, 60*time.Second, cfg.NodeID+" to catch up", func() bool {
		l, _ := c.leader(ctx)
		return l != nil && s.Node().AppliedIndex()+100 >= l.Node().AppliedIndex() && s.Node().LeaderID() != ""
	})
}

func (c *cluster) index(s *server.Server) int {
	for i, x := range c.servers {
		if x == s {
			return i
		}
	}
	return -1
}

func (c *cluster) clusterURLs() []string {
	var out []string
	for _, cfg := range c.cfgs {
		out = append(out, "https://"+cfg.ClusterAddr)
	}
	return out
}

// apiURLs are the servers' API base URLs (fixed across restarts).
func (c *cluster) apiURLs() []string {
	var out []string
	for _, cfg := range c.cfgs {
		out = append(out, "http://"+cfg.APIAddr)
	}
	return out
}

func (c *cluster) waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: timed out after %s waiting for %s", c.name, d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// store is the leader's replica.
func (c *cluster) store(ctx context.Context) (*state.Store, error) {
	l, err := c.leader(ctx)
	if err != nil {
		return nil, err
	}
	return l.Node().Store(), nil
}

// joinTokens makes one join token per agent name, bound to that name,
// with bounded parallelism (each is a Raft entry).
func (c *cluster) joinTokens(ctx context.Context, names []string) ([]string, error) {
	l, err := c.leader(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], _, errs[i] = l.Members().CreateJoinToken(ctx, memberspec.JoinTokenOptions{Role: pki.RoleAgent, Name: n})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("%s: join token for %s: %w", c.name, names[i], err)
		}
	}
	return out, nil
}

// accounts makes n paid accounts and returns an API token for each.
func (c *cluster) accounts(ctx context.Context, n int) ([]string, error) {
	l, err := c.leader(ctx)
	if err != nil {
		return nil, err
	}
	op := apiclient.New(l.URL(), c.servers[0].OperatorToken())
	var out []string
	for i := 0; i < n; i++ {
		email := fmt.Sprintf("load%d@fleet.example", i)
		if _, err := op.Call(ctx, "POST", "/api/admin/accounts", map[string]string{"email": email, "plan": "paid"}); err != nil {
			return nil, fmt.Errorf("%s: account %s: %w", c.name, email, err)
		}
		tok, err := op.Call(ctx, "POST", "/api/admin/tokens", map[string]string{"email": email})
		if err != nil {
			return nil, fmt.Errorf("%s: token for %s: %w", c.name, email, err)
		}
		secret, _ := tok.Body["secret"].(string)
		out = append(out, secret)
	}
	return out, nil
}

// readyNodes counts the registered nodes the leader sees ready.
func (c *cluster) readyNodes(ctx context.Context) (ready, all int, err error) {
	st, err := c.store(ctx)
	if err != nil {
		return 0, 0, err
	}
	nodes, err := st.Nodes()
	if err != nil {
		return 0, 0, err
	}
	for _, n := range nodes {
		if n.Status == state.NodeReady {
			ready++
		}
	}
	return ready, len(nodes), nil
}

// backlog counts the leader's unfinished jobs.
func (c *cluster) backlog(ctx context.Context) (int, error) {
	st, err := c.store(ctx)
	if err != nil {
		return 0, err
	}
	jobs, _, err := st.UnfinishedJobs()
	return len(jobs), err
}

// drain waits until no job is unfinished (or d has passed).
func (c *cluster) drain(ctx context.Context, d time.Duration) (time.Duration, int, error) {
	start := time.Now()
	for {
		n, err := c.backlog(ctx)
		if err != nil || n == 0 || time.Since(start) > d {
			return time.Since(start), n, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newHTTP is one load client's connection: keep-alive to one server.
func newHTTP() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}}
}
