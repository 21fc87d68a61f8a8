// Package servertest starts real control-plane servers for tests (one
// node, or a cluster on loopback TCP) and gives them a small HTTP client.
package servertest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/apiclient"
	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/memberspec"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/server"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
)

// LogBuffer collects every log line of the servers in a test, so tests
// can assert what never reaches a log.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything logged so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Options tune a test server.
type Options struct {
	// Logs receives the JSON logs at debug level; nil discards them.
	Logs *LogBuffer
	// Plans overrides the plan limits.
	Plans *plans.Config
	// RateLimits turns the rate limits on; nil leaves them off, because
	// every test client shares one loopback address and some tests fail
	// authentication on purpose many times a minute.
	RateLimits *api.RateLimits
	// Configure edits the config before the server starts.
	Configure func(*server.Config)
}

// limits applies o.RateLimits (off when nil) to cfg.
func (o Options) limits(cfg *server.Config) {
	cfg.RateLimits = api.RateLimits{}
	if o.RateLimits != nil {
		cfg.RateLimits = *o.RateLimits
	}
}

func logger(o Options) *slog.Logger {
	if o.Logs == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewJSONHandler(o.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Single starts a one-node server with its own data dir, waits for it to
// lead and stops it when the test ends.
func Single(t testing.TB, o Options) *server.Server {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.APIAddr = "127.0.0.1:0"
	cfg.Logger = logger(o)
	cfg.NoSyncForTests = true
	cfg.FastRaftForTests = true
	if o.Plans != nil {
		cfg.Plans = *o.Plans
	}
	o.limits(&cfg)
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	return start(t, cfg, true)
}

func start(t testing.TB, cfg server.Config, waitLeader bool) *server.Server {
	t.Helper()
	s, err := server.New(cfg)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if waitLeader {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.WaitLeader(ctx); err != nil {
			t.Fatalf("server never led: %v", err)
		}
	}
	return s
}

// FreeAddr returns a loopback address with a free TCP port, never one it
// returned before in this process (the kernel may hand a port just freed
// out again, and a config holds several).
func FreeAddr(t testing.TB) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if _, dup := handedOut.LoadOrStore(addr, true); !dup {
			return addr
		}
	}
}

var handedOut sync.Map

// NodeConfig is the config of cluster member i in dir, for starting or
// restarting it.
func NodeConfig(t testing.TB, dir, apiAddr, raftAddr, sealingKey string, bootstrap bool, join []string, o Options) server.Config {
	cfg := server.DefaultConfig()
	cfg.DataDir = dir
	cfg.APIAddr = apiAddr
	cfg.RaftAddr = raftAddr
	cfg.ClusterAddr = FreeAddr(t)
	cfg.Bootstrap = bootstrap
	cfg.Join = join
	cfg.SealingKey = sealingKey
	cfg.FastRaftForTests = true
	cfg.Logger = logger(o)
	o.limits(&cfg)
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	return cfg
}

// Start runs a server from cfg, stopped at test end. Use it to restart a
// cluster member from its data dir.
func Start(t testing.TB, cfg server.Config) *server.Server {
	t.Helper()
	return start(t, cfg, false)
}

// Cluster starts n servers on loopback TCP: the first bootstraps, the
// others join it. It returns when all n are voters and one leads.
func Cluster(t testing.TB, n int, o Options) ([]*server.Server, []server.Config) {
	t.Helper()
	sealingKey := server.NewSealingKey()
	var servers []*server.Server
	var cfgs []server.Config
	for i := 0; i < n; i++ {
		var join []string
		dir := t.TempDir()
		if i > 0 {
			join = []string{servers[0].ClusterURL()}
			// The test's operator token works on every server.
			if err := os.WriteFile(filepath.Join(dir, "operator-token"), []byte(servers[0].OperatorToken()), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cfg := NodeConfig(t, dir, FreeAddr(t), FreeAddr(t), sealingKey, i == 0, join, o)
		cfg.NodeID = fmt.Sprintf("server-%d", i+1)
		if i > 0 {
			cfg.JoinToken = JoinToken(t, servers[0], pki.RoleServer, cfg.NodeID)
		}
		s := start(t, cfg, i == 0)
		servers = append(servers, s)
		cfgs = append(cfgs, cfg)
	}
	WaitFor(t, 30*time.Second, "all servers to join", func() bool {
		for _, s := range servers {
			if sv, _ := s.Node().Store().Servers(); len(sv) != n {
				return false
			}
		}
		return true
	})
	return servers, cfgs
}

// Leader returns the server that leads, waiting for an election.
func Leader(t testing.TB, servers []*server.Server) *server.Server {
	t.Helper()
	var leader *server.Server
	WaitFor(t, 30*time.Second, "a leader", func() bool {
		for _, s := range servers {
			if s != nil && s.Node().IsLeader() {
				leader = s
				return true
			}
		}
		return false
	})
	return leader
}

// WaitFor polls cond every 10ms until it holds or the deadline passes.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Await receives from ch, failing the test if nothing comes within d:
// no wait in a test is unbounded.
func Await[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
	var zero T
	return zero
}

// Client is an apiclient.Client bound to a test: Do fails the test on a
// transport error.
type Client struct {
	*apiclient.Client
	t testing.TB
}

// NewClient returns a client for base authenticating with token.
func NewClient(t testing.TB, base, token string) *Client {
	return &Client{Client: apiclient.New(base, token), t: t}
}

// In returns a copy of the client that selects workspace ws.
func (c *Client) In(ws string) *Client { return &Client{Client: c.Client.In(ws), t: c.t} }

// As returns a copy of the client using another token.
func (c *Client) As(token string) *Client { return &Client{Client: c.Client.As(token), t: c.t} }

// Response is an API answer with test assertions.
type Response struct{ *apiclient.Response }

// Do sends a request (see apiclient.Client.Do) and fails the test on a
// transport error.
func (c *Client) Do(method, path string, body any, header ...string) *Response {
	c.t.Helper()
	r, err := c.DoErr(method, path, body, header...)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// DoSettled is Do for a test that has just changed the cluster's
// leadership: a 503 service_unavailable (nothing was written, "retry")
// is retried, as a client would, for up to 15 s. Any other answer,
// outcome_unknown included, is returned as it is.
func (c *Client) DoSettled(method, path string, body any, header ...string) *Response {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := c.Do(method, path, body, header...)
		if r.Status != http.StatusServiceUnavailable || r.Code() != apierr.CodeServiceUnavailable || time.Now().After(deadline) {
			return r
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// DoErr is Do that returns transport errors; safe in goroutines.
func (c *Client) DoErr(method, path string, body any, header ...string) (*Response, error) {
	r, err := c.Client.Do(context.Background(), method, path, body, header...)
	if err != nil {
		return nil, err
	}
	return &Response{r}, nil
}

// Must fails the test unless the response has the wanted status.
func (r *Response) Must(t testing.TB, status int) *Response {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Raw)
	}
	return r
}

// Account is a test account with a token and its personal workspace.
type Account struct {
	ID, Email, Token, Personal string
	*Client
}

// NewAccount creates an account through the operator API and a token for it.
func NewAccount(t testing.TB, s *server.Server, email, plan string) *Account {
	t.Helper()
	op := NewClient(t, s.URL(), s.OperatorToken())
	u := op.Do("POST", "/api/admin/accounts", map[string]string{"email": email, "plan": plan}).Must(t, 201)
	tok := op.Do("POST", "/api/admin/tokens", map[string]string{"email": email}).Must(t, 201)
	return &Account{ID: u.Str("user.id"), Email: email, Token: tok.Str("secret"), Personal: u.Str("user.personalWorkspaceId"),
		Client: NewClient(t, s.URL(), tok.Str("secret"))}
}

// Multipart builds a multipart/form-data body with text fields and, when
// fileField is set, one file part; it returns the body and its
// Content-Type for Do's header arguments.
func Multipart(fields map[string]string, fileField, filename string, data []byte) ([]byte, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	if fileField != "" {
		w, _ := mw.CreateFormFile(fileField, filename)
		_, _ = w.Write(data)
	}
	_ = mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}

// JoinToken makes a join token for a member with role and name through
// server s (which must lead).
func JoinToken(t testing.TB, s *server.Server, role pki.Role, name string) string {
	t.Helper()
	tok, _, err := s.Members().CreateJoinToken(context.Background(), memberspec.JoinTokenOptions{Role: role, Name: name})
	if err != nil {
		t.Fatalf("join token for %s/%s: %v", role, name, err)
	}
	return tok
}

// Member joins the cluster of leader s as role/name (through s's
// cluster port, with a join token) and returns its credentials.
func Member(t testing.TB, s *server.Server, role pki.Role, name string) *rpcauth.Creds {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	creds, err := enroll.Obtain(ctx, enroll.Config{Dir: t.TempDir(), Role: role, Name: name, Servers: []string{s.ClusterURL()},
		JoinToken: JoinToken(t, s, role, name)})
	if err != nil {
		t.Fatalf("join as %s/%s: %v", role, name, err)
	}
	return creds
}

// Operator is an operator client of s (the bootstrap operator token).
func Operator(t testing.TB, s *server.Server) *Client {
	t.Helper()
	return NewClient(t, s.URL(), s.OperatorToken())
}

// PeerClient calls s's cluster port with creds (a member's certificate),
// as servers, agents and edges do.
func PeerClient(t testing.TB, s *server.Server, creds *rpcauth.Creds) *Client {
	c := NewClient(t, s.ClusterURL(), "")
	c.HTTP = creds.Client("", pki.RoleServer)
	return c
}
