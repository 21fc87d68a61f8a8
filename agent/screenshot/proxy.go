package screenshot

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxProxied bounds what one shot's page may pull from its site.
const maxProxied = 256 << 20

// ShotURL is where a shot's tab goes: the login link when signed in (it
// lands on the path), else the path on the site's URL.
func ShotURL(r Request) (string, error) {
	if !strings.HasPrefix(r.Path, "/") || strings.HasPrefix(r.Path, "//") || strings.ContainsAny(r.Path, "\\\x00\r\n") {
		return "", fmt.Errorf("screenshot: path %q must be a path on the site (/…)", r.Path)
	}
	u, err := url.Parse(r.SiteURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("screenshot: site URL %q", r.SiteURL)
	}
	if r.LoginURL != "" {
		return r.LoginURL, nil
	}
	return strings.TrimSuffix(r.SiteURL, "/") + r.Path, nil
}

// proxy forwards one site's host to its backend and refuses everything
// else: the only way out of a shot's browser context.
type proxy struct {
	ln      net.Listener
	srv     *http.Server
	site    *url.URL
	host    string // the site's host:port
	backend string
	rp      *httputil.ReverseProxy
	cert    tls.Certificate
	budget  atomic.Int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	inner   []*http.Server // the HTTPS tunnels' servers
	shut    bool
}

// hostPort is u's host with its scheme's port when it names none.
func hostPort(host, scheme string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return strings.ToLower(host)
	}
	port := "80"
	if scheme == "https" {
		port = "443"
	}
	return strings.ToLower(net.JoinHostPort(host, port))
}

func newProxy(siteURL, backend string) (*proxy, error) {
	u, err := url.Parse(siteURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("screenshot: site URL %q", siteURL)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("screenshot: proxy: %w", err)
	}
	p := &proxy{ln: ln, site: u, host: hostPort(u.Host, u.Scheme), backend: backend}
	p.budget.Store(maxProxied)
	if u.Scheme == "https" {
		if p.cert, err = selfSigned(u.Hostname()); err != nil {
			ln.Close()
			return nil, err
		}
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", backend
			pr.Out.Host = u.Host
			pr.Out.Header.Set("X-Forwarded-Proto", u.Scheme)
			pr.Out.Header.Set("X-Forwarded-For", "127.0.0.1")
		},
		Transport: &http.Transport{
			// Whatever the request names, it goes to the site's backend.
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, "tcp", backend)
			},
			ResponseHeaderTimeout: LoadWait + 5*time.Second,
			MaxIdleConnsPerHost:   4,
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Body = &budgetBody{ReadCloser: resp.Body, left: &p.budget}
			return nil
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); _ = p.srv.Serve(ln) }()
	return p, nil
}

// Addr is where the browser context's proxy is.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and every connection through it.
func (p *proxy) Close() {
	_ = p.srv.Close()
	p.mu.Lock()
	p.shut = true
	for _, s := range p.inner {
		_ = s.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.rp.Transport.(*http.Transport).CloseIdleConnections()
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		if p.site.Scheme != "https" || hostPort(r.Host, "https") != p.host {
			http.Error(w, "not this site", http.StatusForbidden)
			return
		}
		p.tunnel(w)
	case r.URL.IsAbs() && r.URL.Scheme == "http" && p.site.Scheme == "http" && hostPort(r.URL.Host, "http") == p.host:
		p.rp.ServeHTTP(w, r)
	default:
		http.Error(w, "not this site", http.StatusForbidden)
	}
}

// tunnel answers a CONNECT to an HTTPS site's host with TLS of its own
// (the browser takes any certificate, and only this one can reach it)
// and serves the requests inside from the site's backend.
func (p *proxy) tunnel(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil || buf.Reader.Buffered() > 0 {
		conn.Close()
		return
	}
	tconn := tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{p.cert}, MinVersion: tls.VersionTLS12})
	inner := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hostPort(r.Host, "https") != p.host {
			http.Error(w, "not this site", http.StatusForbidden)
			return
		}
		p.rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	one := &oneConn{conn: tconn, done: make(chan struct{})}
	p.mu.Lock()
	if p.shut {
		p.mu.Unlock()
		tconn.Close()
		return
	}
	p.inner = append(p.inner, inner)
	p.mu.Unlock()
	p.wg.Add(1)
	go func() { defer p.wg.Done(); _ = inner.Serve(one) }()
}

// oneConn is a listener of one connection, done once it is closed.
type oneConn struct {
	conn net.Conn
	mu   sync.Mutex
	used bool
	done chan struct{}
	once sync.Once
}

func (o *oneConn) Accept() (net.Conn, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.used {
		<-o.done
		return nil, net.ErrClosed
	}
	o.used = true
	return &closeNotify{Conn: o.conn, o: o}, nil
}

func (o *oneConn) Close() error   { o.once.Do(func() { close(o.done) }); return nil }
func (o *oneConn) Addr() net.Addr { return o.conn.LocalAddr() }

type closeNotify struct {
	net.Conn
	o *oneConn
}

func (c *closeNotify) Close() error { err := c.Conn.Close(); _ = c.o.Close(); return err }

// budgetBody ends a response once the shot has pulled its bound.
type budgetBody struct {
	io.ReadCloser
	left *atomic.Int64
}

func (b *budgetBody) Read(p []byte) (int, error) {
	if b.left.Load() <= 0 {
		return 0, errors.New("screenshot: the page pulled more than a shot may")
	}
	n, err := b.ReadCloser.Read(p)
	b.left.Add(-int64(n))
	return n, err
}

// selfSigned is a throwaway certificate for host.
func selfSigned(host string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.DNSNames, tmpl.IPAddresses = nil, []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
