package rest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

type ctxKey int

const infoKey ctxKey = iota

// reqInfo is filled in as a request travels through the stack, for the
// access log and metrics written when it ends.
type reqInfo struct {
	id       string
	route    string
	err      error
	clientIP netip.Addr
}

func infoFrom(ctx context.Context) *reqInfo {
	i, _ := ctx.Value(infoKey).(*reqInfo)
	return i
}

// RequestID returns the request's id, or "".
func RequestID(ctx context.Context) string {
	if i := infoFrom(ctx); i != nil {
		return i.id
	}
	return ""
}

// SetRoute names what served a request that no route matched (a request
// forwarded to the leader), for the access log and metrics.
func SetRoute(ctx context.Context, name string) {
	if i := infoFrom(ctx); i != nil {
		i.route = name
	}
}

func routeOf(r *http.Request) string {
	if i := infoFrom(r.Context()); i != nil && i.route != "" {
		return i.route
	}
	return "unmatched"
}

// RequestIDHeader carries the request id both ways.
const RequestIDHeader = "X-Request-Id"

var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Metrics are the HTTP metrics, registered once per registry.
type Metrics struct {
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	rateLimited *prometheus.CounterVec
}

// RateLimited counts a request refused by a rate limit (one of the
// limit names of details.limit). A nil Metrics counts nothing.
func (m *Metrics) RateLimited(limit string) {
	if m != nil {
		m.rateLimited.WithLabelValues(limit).Inc()
	}
}

// NewMetrics registers request counters and latency histograms.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sandboxd", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route"}),
	}
	m.rateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sandboxd", Subsystem: "http", Name: "rate_limited_total",
		Help: "Requests answered 429 rate_limited, by limit.",
	}, []string{"limit"})
	reg.MustRegister(m.requests, m.latency, m.rateLimited)
	return m
}

type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Observe wraps a handler with request ids, panic recovery, one structured
// access-log line per request and the HTTP metrics. Nothing from headers
// or bodies is logged, so credentials never reach the log.
func Observe(next http.Handler, log *slog.Logger, m *Metrics) http.Handler {
	log = log.With("component", "http")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID.MatchString(id) {
			id = ids.New("req")
		}
		w.Header().Set(RequestIDHeader, id)
		info := &reqInfo{id: id}
		r = r.WithContext(context.WithValue(r.Context(), infoKey, info))
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Error("panic serving request", "request_id", id, "panic", p)
				if sw.status == 0 {
					apierr.Write(sw, errors.New("panic"))
				}
			}
			d := time.Since(start)
			route := routeOf(r)
			if m != nil {
				m.requests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
				m.latency.WithLabelValues(route).Observe(d.Seconds())
			}
			attrs := []any{"request_id", id, "method", r.Method, "route", route, "path", LogPath(r.URL.Path),
				"status", sw.status, "bytes", sw.bytes, "duration_ms", float64(d.Microseconds()) / 1000,
				"remote", r.RemoteAddr}
			if info.clientIP.IsValid() {
				attrs = append(attrs, "client_ip", info.clientIP.String())
			}
			var ae *apierr.Error
			if info.err != nil && errors.As(info.err, &ae) {
				attrs = append(attrs, "error_code", ae.Code)
			}
			log.Log(r.Context(), accessLevel(r, route, sw.status), "request", attrs...)
		}()
		next.ServeHTTP(sw, r)
	})
}

// ForwardedHeader marks a request a follower passed on to the leader.
const ForwardedHeader = "X-Sandboxd-Forwarded-By"

// accessLevel is the level of a request's access-log line: the cluster's
// own traffic (members' RPCs over mutual TLS: heartbeats, route watches)
// and health and metrics scrapes are debug, so that a terminal shows what
// people do; a person's request a follower forwarded stays at info on the
// leader; a server error is a warning.
func accessLevel(r *http.Request, route string, status int) slog.Level {
	switch {
	case status >= 500:
		return slog.LevelWarn
	case r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && r.Header.Get(ForwardedHeader) == "", route == "GET /healthz", route == "GET /metrics":
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// LogPath is a request path as logs may show it: a webhook URL's last
// segment is its secret (/hooks/git/{id}/{secret}) and is cut.
func LogPath(p string) string {
	if !strings.HasPrefix(p, "/hooks/") {
		return p
	}
	parts := strings.SplitN(p, "/", 5) // "", "hooks", kind, id, secret…
	if len(parts) < 5 {
		return p
	}
	return strings.Join(parts[:4], "/") + "/…"
}
