// Package edge is the host-based reverse proxy in front of every sandbox.
// It keeps its own copy of the route table, fed by the control plane's
// route stream, so a request never waits on Raft: it looks the Host up in
// memory and proxies to the node and port that serve it, preserving Host
// and adding X-Forwarded-For/Proto.
package edge

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/internal/deadline"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/rpclimit"
	"github.com/sandboxd/sandboxd/internal/siteingress"
	edgev1 "github.com/sandboxd/sandboxd/protocol/edge/v1"
	"github.com/sandboxd/sandboxd/protocol/edge/v1/edgev1connect"
)

// Config configures an edge.
type Config struct {
	// ID names this edge in the control plane's logs.
	ID string
	// ControlPlane lists the control plane's cluster URLs; calls go to
	// whichever answers.
	ControlPlane []string
	// Creds is the edge's cluster certificate (internal/enroll).
	Creds *rpcauth.Creds
	// Addr is the HTTP listen address.
	Addr string
	// TLSAddr also serves HTTPS: sandbox hosts with the certificate in
	// TLSCertFile and TLSKeyFile (a wildcard for the sandbox domain), when
	// given, and active custom domains with certificates from ACME, when
	// its CA is set. One of the two is needed.
	TLSAddr     string
	TLSCertFile string
	TLSKeyFile  string
	// ACME gets custom domains their certificates (see ACMEConfig).
	ACME ACMEConfig
	// HTTPSPort is the port plain-HTTP requests for custom domains are
	// redirected to; zero means TLSAddr's port (left out when 443).
	HTTPSPort int
	// MetricsAddr is the operator's listener for /metrics and /healthz;
	// empty serves none. The public listeners never serve either: bind
	// it to loopback or a private address.
	MetricsAddr string
	Logger      *slog.Logger

	// ReadHeaderTimeout bounds how long a visitor may take to send a
	// request's line and headers; zero means 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection after this long without
	// a request; zero means 2m.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers (WordPress
	// cookies included); zero means 64 KiB.
	MaxHeaderBytes int
	// StallTimeout cuts a visitor that sends no request-body bytes, or
	// takes none of the response, for this long; zero means 2m. It is
	// measured per read and write, never over the whole request: a slow
	// WordPress page, a long upload or a long download that keeps moving
	// is not cut, which a server-wide ReadTimeout or WriteTimeout would do.
	StallTimeout time.Duration
}

// withDefaults fills in the bounds left zero.
func (c Config) withDefaults() Config {
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = 2 * time.Minute
	}
	return c
}

type table map[string]*edgev1.Route

// Edge is a running edge proxy.
type Edge struct {
	cfg       Config
	log       *slog.Logger
	routes    atomic.Pointer[table]
	bySite    atomic.Pointer[table]  // routes by site id, for the ingress dialer
	sessions  tls.ClientSessionCache // to nodes' ingresses
	transport *http.Transport
	servers   []*http.Server
	addr      string
	tlsAddr   string
	httpsPort int
	acme      *acme
	// fixedCert is set when TLSCertFile serves the sandbox hosts.
	fixedCert bool
	ready     chan struct{}
	readyOnce sync.Once
	metrics   *edgeMetrics
	// metricsAddr is the operator's listener as bound, or "".
	metricsAddr string
	cancel      context.CancelFunc
	done        chan struct{}
}

// New binds the listeners and serves them at once (a host with no route
// yet is answered as unknown); Start follows the route stream.
func New(cfg Config) (*Edge, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ID == "" {
		cfg.ID = "edge"
	}
	if len(cfg.ControlPlane) > 0 && cfg.Creds == nil {
		return nil, errors.New("edge: a cluster certificate is required to follow the control plane")
	}
	cfg = cfg.withDefaults()
	e := &Edge{cfg: cfg, log: cfg.Logger.With("component", "edge"), ready: make(chan struct{}), done: make(chan struct{})}
	empty := table{}
	e.routes.Store(&empty)
	e.metrics = newEdgeMetrics(e)
	e.bySite.Store(&table{})
	e.sessions = tls.NewLRUClientSessionCache(4096)
	e.transport = &http.Transport{
		DialContext:  e.dialBackend,
		MaxIdleConns: 1024,
		// A site serves with a handful of prefork workers, and an idle
		// keep-alive connection holds one: keep no more idle than that.
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("edge listen %s: %w", cfg.Addr, err)
	}
	e.addr = ln.Addr().String()
	var tln net.Listener
	if cfg.TLSAddr != "" {
		if tln, err = e.listenTLS(cfg); err != nil {
			ln.Close()
			return nil, err
		}
	}
	if cfg.MetricsAddr != "" {
		msrv, mln, err := e.listenMetrics(cfg.MetricsAddr)
		if err != nil {
			ln.Close()
			if tln != nil {
				tln.Close()
			}
			if e.acme != nil {
				e.acme.stop()
			}
			return nil, err
		}
		e.servers = append(e.servers, msrv)
		go func() { _ = msrv.Serve(mln) }()
	}
	srv := e.server()
	e.servers = append(e.servers, srv)
	go func() { _ = srv.Serve(ln) }()
	if tln != nil {
		tsrv := e.server()
		e.servers = append(e.servers, tsrv)
		go func() { _ = tsrv.Serve(tln) }()
	}
	return e, nil
}

// listenTLS binds the HTTPS listener with the configured certificate
// and, when ACME is on, certmagic for custom domains.
func (e *Edge) listenTLS(cfg Config) (net.Listener, error) {
	if cfg.ACME.CA == "" && (cfg.TLSCertFile == "" || cfg.TLSKeyFile == "") {
		return nil, errors.New("edge: an HTTPS listener needs a certificate (--tls-cert, --tls-key) or an ACME CA (--acme-ca)")
	}
	var fixed *tls.Certificate
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("edge certificate: %w", err)
		}
		fixed, e.fixedCert = &cert, true
	}
	raw, err := net.Listen("tcp", cfg.TLSAddr)
	if err != nil {
		return nil, fmt.Errorf("edge TLS listen %s: %w", cfg.TLSAddr, err)
	}
	e.tlsAddr = raw.Addr().String()
	tlsPort := raw.Addr().(*net.TCPAddr).Port
	e.httpsPort = cmp.Or(cfg.HTTPSPort, tlsPort)
	if cfg.ACME.CA != "" {
		if cfg.ACME.Storage == nil || cfg.ACME.Orders == nil {
			shared := NewCertStorage(cfg.Creds.FailoverClient(e.controlPlane, pki.RoleServer), rpcauth.ControlPlane, cfg.ID)
			if cfg.ACME.Storage == nil {
				cfg.ACME.Storage = shared
			}
			if cfg.ACME.Orders == nil {
				cfg.ACME.Orders = shared
			}
		}
		httpPort := int(netip.MustParseAddrPort(e.addr).Port())
		e.acme = newACME(cfg.ACME, cfg.ID, httpPort, tlsPort, e.log, e.allowCertificate, cfg.ACME.Orders, e.metrics.countOrder)
	}
	return tls.NewListener(raw, e.tlsConfig(fixed)), nil
}

// server is one listener's HTTP server with the configured bounds.
func (e *Edge) server() *http.Server {
	stall := e.cfg.StallTimeout
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadline.Body(w, r, stall, 0)
		e.ServeHTTP(deadline.Writer(w, r, stall), r)
	})
	return &http.Server{Handler: h, ReadHeaderTimeout: e.cfg.ReadHeaderTimeout, IdleTimeout: e.cfg.IdleTimeout,
		MaxHeaderBytes: e.cfg.MaxHeaderBytes, ErrorLog: slog.NewLogLogger(e.cfg.Logger.Handler(), slog.LevelWarn)}
}

// Addr is the HTTP listen address.
func (e *Edge) Addr() string { return e.addr }

// TLSAddr is the HTTPS listen address, or "".
func (e *Edge) TLSAddr() string { return e.tlsAddr }

// Ready is closed once the first route table arrived.
func (e *Edge) Ready() <-chan struct{} { return e.ready }

// Start follows the control plane's route stream until Close.
func (e *Edge) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		defer close(e.done)
		e.watch(ctx)
	}()
}

// Close stops serving and watching.
func (e *Edge) Close() error {
	if e.cancel != nil {
		e.cancel()
		<-e.done
	}
	for _, s := range e.servers {
		_ = s.Close()
	}
	if e.acme != nil {
		e.acme.stop()
	}
	e.transport.CloseIdleConnections()
	return nil
}

// watch keeps one stream open, reconnecting with backoff; the table being
// served stays in place while the stream is down.
func (e *Edge) watch(ctx context.Context) {
	client := edgev1connect.NewRouteServiceClient(e.cfg.Creds.FailoverClient(e.controlPlane, pki.RoleServer), rpcauth.ControlPlane,
		rpclimit.RoutesClient()...)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		stream, err := client.WatchRoutes(ctx, connect.NewRequest(&edgev1.WatchRoutesRequest{EdgeId: e.cfg.ID}))
		if err == nil {
			for stream.Receive() {
				e.apply(stream.Msg())
				e.metrics.connected.Store(true)
				backoff = 100 * time.Millisecond
			}
			e.metrics.connected.Store(false)
			err = stream.Err()
			stream.Close()
		}
		if ctx.Err() != nil {
			return
		}
		e.log.Info("route stream interrupted; reconnecting", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (e *Edge) apply(ev *edgev1.RouteEvent) {
	next := table{}
	if !ev.Snapshot {
		for h, r := range *e.routes.Load() {
			next[h] = r
		}
	}
	for _, r := range ev.Upserts {
		next[r.Host] = r
	}
	for _, h := range ev.RemovedHosts {
		delete(next, h)
	}
	e.routes.Store(&next)
	bySite := table{}
	for _, r := range next {
		if r.SiteId != "" && r.Ingress != "" {
			bySite[r.SiteId] = r
		}
	}
	e.bySite.Store(&bySite)
	e.readyOnce.Do(func() { close(e.ready) })
}

func (e *Edge) controlPlane() []string { return e.cfg.ControlPlane }

// Route returns the route for a host, or nil.
func (e *Edge) Route(host string) *edgev1.Route { return (*e.routes.Load())[host] }

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// ServeHTTP routes one request by its Host. Over plain HTTP it first
// answers ACME HTTP-01 challenges (whichever edge ordered the
// certificate) and sends active custom domains to https.
func (e *Edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start, sw, kind := time.Now(), &statusWriter{ResponseWriter: w}, kindSite
	// Deferred: a proxied response cut mid-body panics ErrAbortHandler.
	defer func() { e.metrics.observe(kind, sw.status, time.Since(start)) }()
	kind = e.serve(sw, r)
}

// serve answers one request and says what kind of route served it.
func (e *Edge) serve(w http.ResponseWriter, r *http.Request) (kind string) {
	if r.TLS == nil && e.acme != nil && e.acme.issuer.HandleHTTPChallenge(w, r) {
		return kindACME
	}
	route := e.Route(hostOnly(r.Host))
	switch {
	case route != nil && route.Custom && r.TLS == nil && e.acme != nil:
		target := "https://" + hostOnly(r.Host)
		if e.httpsPort != 443 {
			target += ":" + strconv.Itoa(e.httpsPort)
		}
		http.Redirect(w, r, target+r.URL.RequestURI(), http.StatusPermanentRedirect)
		return kindHTTPS
	case route != nil && route.Redirect != "":
		// Temporary: the site may leave its domain again, and browsers
		// keep permanent redirects.
		http.Redirect(w, r, route.Redirect+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		return kindRedirect
	case route == nil:
		page(w, http.StatusNotFound, "No sandbox here", "There is no sandbox at "+hostOnly(r.Host)+". It may have been deleted or never existed.", false)
		return kindUnknownHost
	case route.Status == edgev1.RouteStatus_ROUTE_STATUS_CREATING:
		w.Header().Set("Retry-After", "1")
		page(w, http.StatusServiceUnavailable, "Your sandbox is being created", "WordPress is being set up for you. This page reloads by itself; it usually takes a second or two.", true)
		return kindCreating
	case route.Status == edgev1.RouteStatus_ROUTE_STATUS_UNAVAILABLE:
		w.Header().Set("Retry-After", "30")
		page(w, http.StatusServiceUnavailable, "Sandbox temporarily unavailable", "The server this sandbox runs on is not answering. "+
			"The sandbox comes back by itself when the server does (or on another server); this page reloads by itself.", true)
		return kindNodeDown
	case route.Status != edgev1.RouteStatus_ROUTE_STATUS_READY || route.Backend == "":
		page(w, http.StatusServiceUnavailable, "Sandbox unavailable", "This sandbox is not running right now.", false)
		return kindUnavailable
	}
	e.proxy(route).ServeHTTP(w, r)
	return kindSite
}

func (e *Edge) proxy(route *edgev1.Route) *httputil.ReverseProxy {
	target := &url.URL{Scheme: "http", Host: route.Backend}
	if route.Ingress != "" && e.cfg.Creds != nil {
		// Through the node's ingress; the pool is per site and node, so
		// a site that moved is never reached at its old node.
		target.Host = route.SiteId + "." + route.NodeId + ingressSuffix
	}
	return &httputil.ReverseProxy{
		Transport: e.transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // WordPress must see the site's own host
			pr.SetXForwarded()
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.Header.Get(siteingress.WakeFailedHeader) != "" {
				return errWakeFailed
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			if errors.Is(err, errWakeFailed) {
				e.log.Warn("site did not wake", "site_id", route.SiteId, "node_id", route.NodeId)
				w.Header().Set("Retry-After", "10")
				page(w, http.StatusServiceUnavailable, "Sandbox is not starting", "This sandbox was asleep and could not be woken just now. "+
					"This page tries again by itself.", true)
				return
			}
			e.log.Warn("backend unreachable", "site_id", route.SiteId, "backend", route.Backend, "err", err)
			e.metrics.backend.Inc()
			// Its node may be gone: the control plane marks it down after
			// --node-down-after, and this page becomes "temporarily
			// unavailable"; until then browsers retry by themselves.
			w.Header().Set("Retry-After", "5")
			page(w, http.StatusBadGateway, "Sandbox not answering", "The sandbox did not answer. This page tries again by itself.", true)
		},
	}
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
{{if .Refresh}}<meta http-equiv="refresh" content="{{.Refresh}}">{{end}}<title>{{.Title}}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:15vh auto;padding:0 1rem;color:#1d2327}h1{font-size:1.5rem}</style>
</head><body><h1>{{.Title}}</h1><p>{{.Text}}</p></body></html>
`))

// page answers with a small HTML page; refresh reloads it after
// Retry-After seconds (1 when none is set).
func page(w http.ResponseWriter, status int, title, text string, refresh bool) {
	every := 0
	if refresh {
		every = 1
		if n, err := strconv.Atoi(w.Header().Get("Retry-After")); err == nil && n > 0 {
			every = n
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = pageTmpl.Execute(w, map[string]any{"Title": title, "Text": text, "Refresh": every})
}

// errWakeFailed is a node's answer for a site it could not wake.
var errWakeFailed = errors.New("the site could not be woken")

// ingressSuffix ends the pseudo host names of backends reached through a
// node's ingress: <site id>.<node id>.sandboxd-ingress.
const ingressSuffix = ".sandboxd-ingress"

var plainDialer = &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}

// dialBackend connects to a site: through its node's ingress (mutual
// TLS, the node proven to be the one the route names) for the pseudo
// hosts proxy makes, else directly.
func (e *Edge) dialBackend(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || !strings.HasSuffix(host, ingressSuffix) {
		return plainDialer.DialContext(ctx, network, addr)
	}
	siteID, nodeID, _ := strings.Cut(strings.TrimSuffix(host, ingressSuffix), ".")
	r := (*e.bySite.Load())[siteID]
	if r == nil || r.NodeId != nodeID {
		return nil, fmt.Errorf("edge: site %s is no longer on node %s", siteID, nodeID)
	}
	cfg := e.cfg.Creds.ClientTLS(nodeID, pki.RoleAgent)
	cfg.ClientSessionCache = e.sessions
	return siteingress.Dial(ctx, r.Ingress, cfg, siteID)
}
