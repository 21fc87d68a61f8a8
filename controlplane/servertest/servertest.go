// Package servertest starts real control-plane servers for tests (one
// node, or a cluster on loopback TCP) and gives them a small HTTP client.
package servertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/server"
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

// FreeAddr returns a loopback address with a free TCP port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// NodeConfig is the config of cluster member i in dir, for starting or
// restarting it.
func NodeConfig(t testing.TB, dir, apiAddr, raftAddr, token string, bootstrap bool, join []string, o Options) server.Config {
	cfg := server.DefaultConfig()
	cfg.DataDir = dir
	cfg.APIAddr = apiAddr
	cfg.RaftAddr = raftAddr
	cfg.Bootstrap = bootstrap
	cfg.Join = join
	cfg.ClusterToken = token
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
	token := "sbxc_test-cluster-token"
	var servers []*server.Server
	var cfgs []server.Config
	for i := 0; i < n; i++ {
		var join []string
		if i > 0 {
			join = []string{servers[0].URL()}
		}
		cfg := NodeConfig(t, t.TempDir(), FreeAddr(t), FreeAddr(t), token, i == 0, join, o)
		cfg.NodeID = fmt.Sprintf("server-%d", i+1)
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

// Client calls the API as one caller.
type Client struct {
	t         testing.TB
	Base      string
	Token     string
	Workspace string
	HTTP      *http.Client
}

// NewClient returns a client for base authenticating with token.
func NewClient(t testing.TB, base, token string) *Client {
	return &Client{t: t, Base: base, Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// In returns a copy of the client that selects workspace ws.
func (c *Client) In(ws string) *Client {
	cp := *c
	cp.Workspace = ws
	return &cp
}

// As returns a copy of the client using another token.
func (c *Client) As(token string) *Client {
	cp := *c
	cp.Token = token
	return &cp
}

// Response is a decoded API answer.
type Response struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any
}

// Code is error.code of an error envelope, or "".
func (r *Response) Code() string {
	if e, ok := r.Body["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

// Details is error.details of an error envelope, or nil.
func (r *Response) Details() map[string]any {
	if e, ok := r.Body["error"].(map[string]any); ok {
		d, _ := e["details"].(map[string]any)
		return d
	}
	return nil
}

// Get returns the string at a dotted path of the body ("token.id").
func (r *Response) Get(path string) any {
	var cur any = r.Body
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// Str is Get as a string.
func (r *Response) Str(path string) string {
	s, _ := r.Get(path).(string)
	return s
}

// List is Get as a list of objects.
func (r *Response) List(path string) []map[string]any {
	raw, _ := r.Get(path).([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, v := range raw {
		m, _ := v.(map[string]any)
		out = append(out, m)
	}
	return out
}

// Do sends a request and fails the test when it cannot be sent. A body
// that is a string or []byte is sent as is with Content-Type
// application/json; anything else non-nil is encoded.
func (c *Client) Do(method, path string, body any, header ...string) *Response {
	c.t.Helper()
	r, err := c.DoErr(method, path, body, header...)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// DoErr is Do that returns transport errors; safe in goroutines.
func (c *Client) DoErr(method, path string, body any, header ...string) (*Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.Base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Workspace != "" {
		req.Header.Set("X-Service-Workspace", c.Workspace)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	r := &Response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.Body); err != nil {
			return nil, fmt.Errorf("decode %q: %w", raw, err)
		}
	}
	return r, nil
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
	op := NewClient(t, s.URL(), s.ClusterToken())
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
