package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"go.uber.org/zap"

	edgev1 "github.com/sandboxd/sandboxd/protocol/edge/v1"
	"go.uber.org/zap/zapcore"
)

// ACMEConfig gets certificates for verified custom domains on demand:
// the first TLS handshake for an active domain orders one from the CA
// (its DNS already points at the edges, so HTTP-01 and TLS-ALPN-01 are
// answered by whichever edge the CA reaches), and every edge keeps it in
// the storage they share, so a name is ordered once.
type ACMEConfig struct {
	// CA is the ACME directory URL (Let's Encrypt's, or Pebble's in
	// tests); empty turns ACME off.
	CA string
	// Email is the ACME account's contact; optional.
	Email string
	// Roots, when set, is what the CA's own HTTPS endpoint is trusted by
	// (a private CA such as Pebble); nil means the system's roots.
	Roots *x509.CertPool
	// DisableHTTPChallenge and DisableTLSALPNChallenge leave a challenge
	// type out (behind a load balancer that does not pass port 80 or
	// TLS through, say).
	DisableHTTPChallenge    bool
	DisableTLSALPNChallenge bool
	// Storage holds certificates, keys, accounts, challenge answers and
	// locks; nil means the control plane's (CertStorage), shared by
	// every edge.
	Storage certmagic.Storage
	// SandboxHosts also gets certificates for the sandbox hosts
	// (<slug>.<sandbox domain>) of ready sites, one per site on its first
	// HTTPS visit, when the edge has no certificate of its own for them
	// (TLSCertFile): the sandbox wildcard without a wildcard certificate.
	// Each counts against the order budgets: a wildcard certificate is
	// the better way.
	SandboxHosts bool
	// Orders is asked before every order placed with the CA; nil means
	// the control plane's budgets (CertStorage.OrderCert), shared by
	// every edge.
	Orders OrderGate
}

// OrderGate decides whether a certificate order may be placed now.
type OrderGate interface {
	// OrderCert answers nil when the order for name may go (and counts
	// it), an *OrderRefused when a budget is spent, or another error when
	// it could not ask. Safe for concurrent use.
	OrderCert(ctx context.Context, name string, renewal bool) error
}

// OrderRefused is an order a budget refused until RetryAt.
type OrderRefused struct {
	Name    string
	Budget  string
	Reason  string
	RetryAt time.Time
}

// Error says which budget refused the order and why.
func (e *OrderRefused) Error() string {
	return fmt.Sprintf("certificate order for %s refused (%s budget): %s", e.Name, e.Budget, e.Reason)
}

// refusalMemory bounds how long an edge answers a refused name's
// handshakes by itself before it asks the control plane again.
const refusalMemory = time.Minute

// acme is the edge's certmagic: one config over one cache.
type acme struct {
	cache  *certmagic.Cache
	magic  *certmagic.Config
	issuer *certmagic.ACMEIssuer
	// stopClean ends the storage cleaning (keepCertsClean).
	stopClean context.CancelFunc
	// refused remembers names whose order was refused, until when, so
	// a refused name's handshakes neither lock nor ask; bounded by the
	// names the route table allows.
	mu      sync.Mutex
	refused map[string]time.Time
}

// newACME sets certmagic up; allow decides whether a name may get a
// certificate (the route table says whether it is an active domain),
// orders whether an order may be placed now, and count is told each
// order's outcome (obtained, failed, refused).
func newACME(cfg ACMEConfig, id string, httpPort, tlsPort int, log *slog.Logger, allow func(name string) error, orders OrderGate,
	count func(result string)) *acme {
	zl := zap.New(&slogCore{log: log.With("component", "certmagic")})
	a := &acme{refused: map[string]time.Time{}}
	a.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return a.magic, nil },
		Logger:           zl,
	})
	a.magic = certmagic.New(a.cache, certmagic.Config{
		Storage: cfg.Storage,
		Logger:  zl,
		OnDemand: &certmagic.OnDemandConfig{DecisionFunc: func(_ context.Context, name string) error {
			if err := a.stillRefused(name); err != nil {
				return err
			}
			return allow(name)
		}},
		OCSP: certmagic.OCSPConfig{DisableStapling: true},
		// Every order, renewals included, is asked for first: certmagic
		// emits cert_obtaining under the name's lock, once storage is
		// known not to hold the certificate, right before the CA is asked.
		OnEvent: func(ctx context.Context, event string, data map[string]any) error {
			name, _ := data["identifier"].(string)
			switch event {
			case "cert_obtaining":
				renewal, _ := data["renewal"].(bool)
				err := orders.OrderCert(ctx, name, renewal)
				var refused *OrderRefused
				if errors.As(err, &refused) {
					a.refuse(name, refused.RetryAt)
					count("refused")
					log.Warn("certificate order refused", "name", name, "budget", refused.Budget, "retry_at", refused.RetryAt, "reason", refused.Reason)
					// Retrying before the budget refills would only ask again.
					return certmagic.ErrNoRetry{Err: err}
				}
				return err
			case "cert_obtained":
				count("obtained")
			case "cert_failed":
				count("failed")
			}
			return nil
		},
	})
	a.issuer = certmagic.NewACMEIssuer(a.magic, certmagic.ACMEIssuer{
		CA: cfg.CA, TestCA: cfg.CA, Email: cfg.Email, Agreed: true, TrustedRoots: cfg.Roots, Logger: zl,
		DisableHTTPChallenge: cfg.DisableHTTPChallenge, DisableTLSALPNChallenge: cfg.DisableTLSALPNChallenge,
		// The edge's own listeners answer challenges: certmagic finds
		// these ports taken and leaves them to HandleHTTPChallenge and
		// GetCertificate.
		AltHTTPPort: httpPort, AltTLSALPNPort: tlsPort,
	})
	a.magic.Issuers = []certmagic.Issuer{a.issuer}
	ctx, cancel := context.WithCancel(context.Background())
	a.stopClean = cancel
	if cfg.Storage != nil {
		go keepCertsClean(ctx, cfg.Storage, id, zl) // ends with stop
	}
	return a
}

// isChallenge reports whether a handshake is a CA's TLS-ALPN-01 check.
func isChallenge(hello *tls.ClientHelloInfo) bool {
	return slices.Contains(hello.SupportedProtos, acmez.ACMETLS1Protocol)
}

func (a *acme) stop() {
	a.stopClean()
	a.cache.Stop()
}

// refuse remembers a refused name until retry, at most refusalMemory.
func (a *acme) refuse(name string, retry time.Time) {
	now := time.Now()
	until := now.Add(refusalMemory)
	if !retry.IsZero() && retry.Before(until) {
		until = retry
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for n, t := range a.refused {
		if !t.After(now) {
			delete(a.refused, n)
		}
	}
	a.refused[name] = until
}

// stillRefused is the decision for a name refused moments ago.
func (a *acme) stillRefused(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if until, ok := a.refused[name]; ok && time.Now().Before(until) {
		return fmt.Errorf("%s: the certificate order was refused moments ago; asking again after %s", name, until.UTC().Format(time.RFC3339))
	}
	return nil
}

// errNotServed is the decision for a name that is no active domain here.
var errNotServed = errors.New("not an active custom domain of this service")

// tlsConfig serves the configured certificate for sandbox hosts and
// certmagic's for custom domains and challenges.
func (e *Edge) tlsConfig(fixed *tls.Certificate) *tls.Config {
	protos := []string{"http/1.1"}
	if e.acme != nil {
		protos = append(protos, acmez.ACMETLS1Protocol)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: protos,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
			if e.acme != nil && (isChallenge(hello) || e.allowCertificate(name) == nil) {
				return e.acme.magic.GetCertificate(hello)
			}
			if fixed != nil {
				return fixed, nil
			}
			return nil, fmt.Errorf("edge: no certificate for %q", name)
		}}
}

// allowCertificate is certmagic's decision: active custom domains
// (routes marked custom) get certificates, and so do ready sites' sandbox
// hosts when the operator asks for them (ACMEConfig.SandboxHosts) and the
// edge has no certificate of its own for them; any other name a client
// sends orders nothing.
func (e *Edge) allowCertificate(name string) error {
	r := e.Route(strings.ToLower(strings.TrimSuffix(name, ".")))
	switch {
	case r == nil:
	case r.Custom:
		return nil
	case e.cfg.ACME.SandboxHosts && !e.fixedCert && r.Status == edgev1.RouteStatus_ROUTE_STATUS_READY && r.Redirect == "":
		return nil
	}
	return fmt.Errorf("%s: %w", name, errNotServed)
}

// slogCore writes certmagic's zap logs to the edge's slog logger, so the
// edge has one log stream.
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.log.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, fields: append(slices.Clone(c.fields), fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(slices.Clone(c.fields), fields...) {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields)+2)
	if e.LoggerName != "" {
		attrs = append(attrs, "logger", e.LoggerName)
	}
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	c.log.Log(context.Background(), slogLevel(e.Level), e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l >= zapcore.WarnLevel:
		return slog.LevelWarn
	case l >= zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
