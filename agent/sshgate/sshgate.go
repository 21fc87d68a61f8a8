// Package sshgate is the node agent's SSH server: a user runs
// `ssh site_abc123@node -p 2222` (the user name is the site id) and gets
// a shell, a command or an SFTP session inside that site. Who may open
// which site is the Authorizer's decision, asked again at every
// connection; running things in the site is the Backend's. The gateway
// only speaks SSH: sessions and nothing else (no forwarding of ports,
// agents or X11), within bounds on handshakes, connections and idleness.
package sshgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/internal/ratelimit"
)

// Config configures a Gateway; its field comments are the documentation
// of the agent's SSH flags. A zero limit means its DefaultConfig value.
type Config struct {
	// Addr is the TCP address to listen on, host:port.
	Addr string
	// HostKeyPath is where the gateway's ed25519 host key is kept: made
	// on the first start (0600, in a directory made 0700) and loaded on
	// later ones, so clients see the same key across restarts.
	HostKeyPath string
	// Auth decides who opens which site; required.
	Auth Authorizer
	// Backend runs shells, commands and SFTP in a site; required.
	Backend Backend
	// Logger receives connection events, or nil for none. Key material
	// and what sessions print are never logged.
	Logger *slog.Logger

	// HandshakeTimeout bounds the time from TCP accept to an
	// authenticated connection.
	HandshakeTimeout time.Duration
	// MaxAuthTries is how many keys a client may try per connection.
	MaxAuthTries int
	// MaxConns caps the connections open at once, all clients together;
	// more are closed on accept.
	MaxConns int
	// MaxConnsPerAddr caps the connections open at once from one client
	// address (an IPv6 client counts by its /64).
	MaxConnsPerAddr int
	// MaxSessionsPerConn caps the sessions (channels) open at once on one
	// connection.
	MaxSessionsPerConn int
	// IdleTimeout closes a connection over which nothing has passed, in
	// either direction, for this long.
	IdleTimeout time.Duration
	// AuthFailures bounds the refused keys of one client address (an
	// IPv6 client counts by its /64): once they are spent, every key
	// from that address is refused without asking the Authorizer, valid
	// or not (answering a valid one would tell a prober which keys open
	// which site), until one failure's worth has refilled.
	AuthFailures ratelimit.Rule
	// MaxFailureAddrs bounds how many addresses' failures are
	// remembered; past it the least recently failing are forgotten.
	MaxFailureAddrs int
}

// DefaultConfig returns the defaults: port 2222 on every address, 30 s to
// authenticate, 6 keys per connection, 256 connections (16 per client
// address), 10 sessions per connection, 30 minutes of idleness, 30
// refused keys a minute per client address (10,000 addresses
// remembered).
func DefaultConfig() Config {
	return Config{
		Addr:               ":2222",
		HandshakeTimeout:   30 * time.Second,
		MaxAuthTries:       6,
		MaxConns:           256,
		MaxConnsPerAddr:    16,
		MaxSessionsPerConn: 10,
		IdleTimeout:        30 * time.Minute,
		AuthFailures:       ratelimit.PerMinute(30),
		MaxFailureAddrs:    10_000,
	}
}

// withDefaults fills the zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Addr == "" {
		c.Addr = d.Addr
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = d.HandshakeTimeout
	}
	if c.MaxAuthTries == 0 {
		c.MaxAuthTries = d.MaxAuthTries
	}
	if c.MaxConns == 0 {
		c.MaxConns = d.MaxConns
	}
	if c.MaxConnsPerAddr == 0 {
		c.MaxConnsPerAddr = d.MaxConnsPerAddr
	}
	if c.MaxSessionsPerConn == 0 {
		c.MaxSessionsPerConn = d.MaxSessionsPerConn
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.AuthFailures == (ratelimit.Rule{}) {
		c.AuthFailures = d.AuthFailures
	}
	if c.MaxFailureAddrs == 0 {
		c.MaxFailureAddrs = d.MaxFailureAddrs
	}
	return c
}

// Validate reports the first missing or impossible setting.
func (c Config) Validate() error {
	switch {
	case c.HostKeyPath == "":
		return errors.New("sshgate: HostKeyPath is required")
	case c.Auth == nil:
		return errors.New("sshgate: Auth is required")
	case c.Backend == nil:
		return errors.New("sshgate: Backend is required")
	case c.HandshakeTimeout < 0 || c.IdleTimeout < 0:
		return errors.New("sshgate: timeouts must be positive")
	case c.MaxAuthTries < 0 || c.MaxConns < 0 || c.MaxConnsPerAddr < 0 || c.MaxSessionsPerConn < 0 || c.MaxFailureAddrs < 0:
		return errors.New("sshgate: limits must be positive")
	case c.AuthFailures.Off():
		return errors.New("sshgate: the failure budget must have a positive rate and burst")
	}
	return nil
}

// Gateway is a listening SSH server; Serve accepts, Close stops.
type Gateway struct {
	cfg    Config
	log    *slog.Logger
	signer ssh.Signer
	ssh    *ssh.ServerConfig
	ln     net.Listener
	limit  *limiter
	// failures counts refused keys per client address (bounded).
	failures *ratelimit.Limiter

	// ctx ends every connection's sessions when the gateway closes.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	// wg counts connection goroutines; Close waits for them.
	wg sync.WaitGroup
}

// New loads or makes the host key and binds cfg.Addr; call Serve next.
func New(cfg Config) (*Gateway, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	signer, err := loadHostKey(cfg.HostKeyPath)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{
		cfg: cfg, log: log.With("component", "sshgate"), signer: signer,
		limit:    newLimiter(cfg.MaxConns, cfg.MaxConnsPerAddr),
		failures: ratelimit.New(cfg.AuthFailures, cfg.MaxFailureAddrs, nil),
		ctx:      ctx, cancel: cancel, conns: map[net.Conn]struct{}{},
	}
	g.ssh = &ssh.ServerConfig{
		// No version number: it would only help an attacker.
		ServerVersion:     "SSH-2.0-sandboxd",
		MaxAuthTries:      cfg.MaxAuthTries,
		PublicKeyCallback: g.authorize,
	}
	g.ssh.AddHostKey(signer)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("sshgate: listen on %s: %w", cfg.Addr, err)
	}
	g.ln = ln
	return g, nil
}

// Addr is the address the gateway listens on (the port chosen when
// Config.Addr asked for port 0).
func (g *Gateway) Addr() net.Addr { return g.ln.Addr() }

// Serve accepts connections until Close, then returns nil; any other
// accept error is returned.
func (g *Gateway) Serve() error {
	var backoff time.Duration
	for {
		nc, err := g.ln.Accept()
		if err != nil {
			if g.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("sshgate: accept: %w", err)
		}
		backoff = 0
		release, ok := g.limit.acquire(nc.RemoteAddr())
		if !ok {
			g.log.Warn("ssh connection refused: too many connections", "remote", nc.RemoteAddr().String())
			nc.Close()
			continue
		}
		if !g.track(nc) {
			release()
			nc.Close()
			return nil
		}
		// Owned by the gateway; ends when the connection does, which
		// Close forces.
		go func() {
			defer g.wg.Done()
			defer release()
			defer g.untrack(nc)
			g.handleConn(nc)
		}()
	}
}

// Close stops accepting, ends every connection and its sessions, and
// waits for them. It is safe to call more than once.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	err := g.ln.Close()
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
	return err
}

func (g *Gateway) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// track registers a connection (and a goroutine on wg) unless the gateway
// is closed.
func (g *Gateway) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	g.wg.Add(1)
	return true
}

func (g *Gateway) untrack(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.conns, c)
}
