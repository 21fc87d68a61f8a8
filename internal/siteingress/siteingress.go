// Package siteingress carries edges' connections to sites on other
// hosts: a node's ingress takes mutual-TLS connections from edges only,
// reads which site each is for, and splices it to that site's web server
// on the node (sites are reachable from their own node only). The edge
// side dials it, checking it reached the node the route names.
package siteingress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// preamble starts every connection: the site it is for, on one line.
const preamble = "sandboxd-site "

// Limits of the ingress.
const (
	// maxLine bounds the preamble line.
	maxLine = 128
	// handshakeTimeout bounds the TLS handshake and the preamble.
	handshakeTimeout = 10 * time.Second
	// DefaultMaxConns bounds open connections per node.
	DefaultMaxConns = 8192
)

// Sites finds a site's web server on this node.
type Sites interface {
	Backend(siteID string) (string, bool)
	// Hold wakes a site if it sleeps and keeps it awake until release:
	// a connection is never frozen under a request (the site's web server
	// closes an idle one within seconds). An error says it could not be
	// woken.
	Hold(ctx context.Context, siteID string) (release func(), err error)
}

// wakeTimeout bounds how long a connection waits for its site to wake.
const wakeTimeout = 30 * time.Second

// WakeFailedHeader marks the answer the ingress gives for a site that
// could not be woken, for the edge to show its own page.
const WakeFailedHeader = "X-Sandboxd-Wake"

// wakeFailed is that answer: a 503 the edge turns into its page.
const wakeFailed = "HTTP/1.1 503 Service Unavailable\r\n" + WakeFailedHeader + ": failed\r\nRetry-After: 10\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 34\r\nConnection: close\r\n\r\n" +
	"The sandbox could not be started.\n"

// Server is a node's ingress.
type Server struct {
	ln    net.Listener
	sites Sites
	log   *slog.Logger
	slots chan struct{}
	dial  func(ctx context.Context, network, addr string) (net.Conn, error)

	mu sync.Mutex
	// conns are the open connections, each with its edge's certificate
	// once the handshake is done (nil before).
	conns map[net.Conn]*x509.Certificate
	// refuse is Cut's last check, applied to handshakes that end after
	// it ran too.
	refuse func(peer *x509.Certificate) error
	closed bool
	wg     sync.WaitGroup
}

// Listen binds the ingress at addr; tlsCfg must require and check edges'
// client certificates.
func Listen(addr string, tlsCfg *tls.Config, sites Sites, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ingress listen %s: %w", addr, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{ln: tls.NewListener(ln, tlsCfg), sites: sites, log: log.With("component", "ingress"),
		slots: make(chan struct{}, DefaultMaxConns), conns: map[net.Conn]*x509.Certificate{},
		dial: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext}, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve takes connections until Close.
func (s *Server) Serve() error {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		select {
		case s.slots <- struct{}{}:
		default:
			c.Close() // full: the edge tries again or answers 502
			continue
		}
		if !s.track(c) {
			<-s.slots
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			defer s.untrack(c)
			s.handle(c)
		}()
	}
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = nil
	return true
}

// shook records the edge certificate of a connection whose handshake is
// done; false when Cut's check, which the handshake may have raced,
// refuses it.
func (s *Server) shook(c net.Conn, peer *x509.Certificate) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse != nil && s.refuse(peer) != nil {
		return false
	}
	if _, ok := s.conns[c]; ok {
		s.conns[c] = peer
	}
	return true
}

// Cut closes the open connections whose edge's certificate refuse turns
// away (a revoked edge's): the listener's check refuses its new
// handshakes, this ends what it had open. A handshake ending meanwhile
// is checked with refuse as well. It returns how many it cut.
func (s *Server) Cut(refuse func(peer *x509.Certificate) error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = refuse
	n := 0
	for c, peer := range s.conns {
		if peer != nil && refuse(peer) != nil {
			c.Close()
			n++
		}
	}
	return n
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// Close stops taking connections and cuts the open ones.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) handle(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if tc, ok := c.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			s.log.Debug("ingress handshake refused", "err", err)
			return
		}
		if cs := tc.ConnectionState(); len(cs.PeerCertificates) > 0 && !s.shook(c, cs.PeerCertificates[0]) {
			s.log.Debug("ingress: the edge's certificate was refused meanwhile")
			return
		}
	}
	r := bufio.NewReaderSize(c, maxLine)
	line, err := r.ReadSlice('\n')
	if err != nil {
		return
	}
	id, ok := strings.CutPrefix(strings.TrimSuffix(string(line), "\n"), preamble)
	if !ok || id == "" {
		return
	}
	backend, ok := s.sites.Backend(id)
	if !ok {
		s.log.Debug("ingress: no such site here", "site_id", id)
		return
	}
	// A sleeping site is woken before anything is sent to it; requests
	// that arrive meanwhile wait for the same wake.
	_ = c.SetDeadline(time.Now().Add(wakeTimeout))
	wctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	release, err := s.sites.Hold(wctx, id)
	cancel()
	if err != nil {
		s.log.Warn("ingress: site did not wake", "site_id", id, "err", err)
		_, _ = io.WriteString(c, wakeFailed)
		return
	}
	defer release()
	_ = c.SetDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	site, err := s.dial(ctx, "tcp", backend)
	cancel()
	if err != nil {
		s.log.Warn("ingress: site not answering", "site_id", id, "err", err)
		return
	}
	defer site.Close()
	// Bytes the edge sent after the preamble (the request) go first.
	if n := r.Buffered(); n > 0 {
		buf, _ := r.Peek(n)
		if _, err := site.Write(buf); err != nil {
			return
		}
	}
	splice(c, site)
}

// splice copies both ways until both directions ended, passing each
// direction's end on as a half-close.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		closeWrite(dst)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	switch c := c.(type) {
	case *tls.Conn:
		_ = c.CloseWrite()
	case interface{ CloseWrite() error }:
		_ = c.CloseWrite()
	default:
		_ = c.Close()
	}
}

// Dial opens a connection to a site through its node's ingress at addr;
// tlsCfg presents the edge's certificate and checks the node.
func Dial(ctx context.Context, addr string, tlsCfg *tls.Config, siteID string) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}, Config: tlsCfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, preamble+siteID+"\n"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
