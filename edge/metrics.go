package edge

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sandboxd/sandboxd/internal/promreg"
)

// What served a request, as the route label of the edge's metrics: a
// handful of kinds, never the host (one series per site would grow
// without bound).
const (
	kindSite        = "site"           // proxied to the site
	kindRedirect    = "redirect"       // a site's domain redirect
	kindHTTPS       = "https_redirect" // a custom domain sent to https
	kindACME        = "acme_challenge" // an HTTP-01 challenge answered
	kindUnknownHost = "unknown_host"   // no route for the host
	kindCreating    = "creating"       // the site is being created
	kindUnavailable = "unavailable"    // the site is stopped or failed
	kindNodeDown    = "node_down"      // the site's node is down
)

// edgeMetrics are an edge's Prometheus metrics, served only on the
// operator's listener (Config.MetricsAddr).
type edgeMetrics struct {
	reg       *promreg.Registry
	latency   *prometheus.HistogramVec
	backend   prometheus.Counter
	orders    *prometheus.CounterVec
	connected atomic.Bool
}

func newEdgeMetrics(e *Edge) *edgeMetrics {
	m := &edgeMetrics{reg: promreg.New()}
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "sandboxd", Subsystem: "edge", Name: "request_duration_seconds",
		Help:    "Requests the edge answered, by status class (2xx…5xx; none when the visitor left first) and route kind; the whole response, body included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"code_class", "route"})
	m.backend = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sandboxd", Subsystem: "edge", Name: "backend_errors_total",
		Help: "Proxied requests whose site did not answer (502).",
	})
	m.orders = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sandboxd", Subsystem: "edge", Name: "certificate_orders_total",
		Help: "Certificate orders this edge meant to place with the ACME CA, by result: obtained, failed (the CA refused or validation failed), " +
			"refused (an order budget is spent; see sandboxd_acme_orders_total).",
	}, []string{"result"})
	for _, r := range []string{"obtained", "failed", "refused"} {
		m.orders.WithLabelValues(r)
	}
	routes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sandboxd", Subsystem: "edge", Name: "routes",
		Help: "Hosts in the edge's route table.",
	}, func() float64 { return float64(len(*e.routes.Load())) })
	stream := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sandboxd", Subsystem: "edge", Name: "route_stream_connected",
		Help: "1 while the control plane's route stream is open, 0 while the edge serves its last table and reconnects.",
	}, func() float64 {
		if m.connected.Load() {
			return 1
		}
		return 0
	})
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.latency, m.backend, m.orders, routes, stream)
	return m
}

// countOrder counts a certificate order's result.
func (m *edgeMetrics) countOrder(result string) { m.orders.WithLabelValues(result).Inc() }

// codeClass is a status code's class label.
func codeClass(code int) string {
	if code < 100 || code > 599 {
		return "none"
	}
	return strconv.Itoa(code/100) + "xx"
}

func (m *edgeMetrics) observe(kind string, code int, took time.Duration) {
	m.latency.WithLabelValues(codeClass(code), kind).Observe(took.Seconds())
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx answers but 101 (an upgrade's final answer) come before the
	// real one.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController (the reverse proxy's flushes and
// WebSocket hijacks) reach the writer underneath.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// MetricNames lists the metrics the operator's listener serves.
func (e *Edge) MetricNames() []string { return e.metrics.reg.Names() }

// MetricsAddr is the operator's listener address, or "" when none.
func (e *Edge) MetricsAddr() string { return e.metricsAddr }

// listenMetrics binds the operator's listener: /metrics, and /healthz
// (whether the route table arrived and the stream is open). Neither says
// anything about backends or the control plane's addresses.
func (e *Edge) listenMetrics(addr string) (*http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("edge metrics listen %s: %w", addr, err)
	}
	e.metricsAddr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", e.metrics.reg.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		status, code := "ok", http.StatusOK
		select {
		case <-e.ready:
		default:
			status, code = "waiting_for_routes", http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "routes": len(*e.routes.Load()),
			"routeStreamConnected": e.metrics.connected.Load()})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(e.cfg.Logger.Handler(), slog.LevelWarn)}
	return srv, ln, nil
}
