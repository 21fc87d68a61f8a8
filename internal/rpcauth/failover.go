package rpcauth

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/internal/pki"
)

// Failover is a RoundTripper that sends each request to one of several
// control-plane servers: the last one that answered, else the next one
// that accepts a connection. Only requests that never left (the server
// could not be dialled) are tried again elsewhere, so a call is never
// applied twice. The request's own scheme and host are replaced.
type Failover struct {
	// Servers lists base URLs (https://host:port); it may change.
	Servers func() []string
	Base    http.RoundTripper
	last    atomic.Int64
}

// RoundTrip implements http.RoundTripper.
func (f *Failover) RoundTrip(req *http.Request) (*http.Response, error) {
	servers := f.Servers()
	if len(servers) == 0 {
		return nil, errors.New("rpcauth: no control-plane server known")
	}
	start := int(f.last.Load())
	var lastErr error
	for i := range servers {
		idx := (start + i) % len(servers)
		u, err := url.Parse(servers[idx])
		if err != nil {
			lastErr = err
			continue
		}
		out := req.Clone(req.Context())
		out.URL.Scheme, out.URL.Host, out.Host = u.Scheme, u.Host, ""
		if i > 0 {
			if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
				return nil, lastErr
			}
			if req.GetBody != nil {
				if out.Body, err = req.GetBody(); err != nil {
					return nil, err
				}
			}
		}
		resp, err := f.Base.RoundTrip(out)
		if err == nil {
			f.last.Store(int64(idx))
			return resp, nil
		}
		lastErr = err
		if errors.Is(err, errAnswerRefused) {
			// Sent, so not sent again; the next call goes elsewhere.
			f.last.Store(int64((idx + 1) % len(servers)))
			return nil, err
		}
		if !notSent(err) || req.Context().Err() != nil {
			return nil, err
		}
		// The next call (or the retry below) starts at the next server.
		f.last.Store(int64((idx + 1) % len(servers)))
	}
	return nil, lastErr
}

// notSent reports an error from dialling, or a server refused at the
// handshake (ErrPeerRefused: a revoked one): nothing reached the server.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, ErrPeerRefused)
}

// CloseIdleConnections closes the idle connections of Base.
func (f *Failover) CloseIdleConnections() {
	if c, ok := f.Base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// FailoverClient is Client with requests spread over servers (see
// Failover); calls name any base URL, e.g. https://control-plane.
func (c *Creds) FailoverClient(servers func() []string, roles ...pki.Role) *http.Client {
	base := c.Client("", roles...)
	return &http.Client{Transport: &Failover{Servers: servers, Base: base.Transport}}
}

// ControlPlane is the placeholder base URL for FailoverClient calls.
const ControlPlane = "https://control-plane"
