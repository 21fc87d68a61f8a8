// Package rpcauth authenticates the traffic between the control plane,
// agents and edges with mutual TLS under the cluster CA: each member
// holds a certificate naming its role and id (internal/pki), dials peers
// checking the role (and, for an agent, the node) it meant to reach, and
// lets through only the roles a handler names.
package rpcauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/pki"
)

// Creds is a member's cluster credential: its current certificate and
// key (swapped in place when renewed, so open listeners and clients pick
// up the new one at their next handshake) and the CA it trusts.
type Creds struct {
	id    pki.Identity
	roots *x509.CertPool
	ca    []byte
	caDER []byte
	cert  atomic.Pointer[tls.Certificate]
	check atomic.Pointer[Checker]
	// transports are those of the clients made (Client), whose idle
	// connections Recheck closes; a client gone is dropped.
	mu         sync.Mutex
	transports []weak.Pointer[http.Transport]
	// Now is the clock certificates are checked against; nil is time.Now.
	Now func() time.Time
}

// NewCreds loads a member's certificate, key and CA (all PEM).
func NewCreds(certPEM, keyPEM, caPEM []byte) (*Creds, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("rpcauth: no CA certificate")
	}
	ca, err := pki.ParseCert(caPEM)
	if err != nil {
		return nil, fmt.Errorf("rpcauth: CA: %w", err)
	}
	c := &Creds{roots: roots, ca: caPEM, caDER: ca.Raw}
	if err := c.Update(certPEM, keyPEM); err != nil {
		return nil, err
	}
	return c, nil
}

// Update swaps in a renewed certificate; it must name the same identity.
func (c *Creds) Update(certPEM, keyPEM []byte) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("rpcauth: certificate: %w", err)
	}
	id, err := pki.Verify([]*x509.Certificate{pair.Leaf}, c.roots, pair.Leaf.NotBefore.Add(time.Second))
	if err != nil {
		return fmt.Errorf("rpcauth: certificate: %w", err)
	}
	if old := c.cert.Load(); old != nil && id != c.id {
		return fmt.Errorf("rpcauth: renewed certificate names %s, not %s", id, c.id)
	}
	// The chain carries the CA too, so a member joining with a token
	// can find the CA it pins.
	pair.Certificate = append(pair.Certificate[:1:1], c.caDER)
	c.id = id
	c.cert.Store(&pair)
	return nil
}

// Identity is who these credentials speak for.
func (c *Creds) Identity() pki.Identity { return c.id }

// Leaf is the current certificate (its NotAfter drives renewal).
func (c *Creds) Leaf() *x509.Certificate { return c.cert.Load().Leaf }

// CAPEM is the trusted CA certificate.
func (c *Creds) CAPEM() []byte { return c.ca }

// Roots is the pool holding the CA.
func (c *Creds) Roots() *x509.CertPool { return c.roots }

func (c *Creds) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Creds) current() *tls.Certificate { return c.cert.Load() }

// SetChecker makes every handshake of these credentials' ClientTLS and
// ServerTLS configs, those made before included, refuse a peer whose
// certificate check refuses: a node agent's copy of the cluster's
// revocations, so a revoked member is turned away at the handshake.
func (c *Creds) SetChecker(check Checker) {
	c.check.Store(&check)
	c.Recheck()
}

// Recheck makes the Checker judge anew the peers these credentials'
// clients (Client, FailoverClient) hold connections to: their idle
// connections close, so their next calls handshake again (a peer now
// refused is refused there, and FailoverClient goes on to the next
// server); a connection busy with a call has its answer checked (see
// checked). Call it whenever what the Checker refuses changed (a node
// agent's revocations): a connection kept open by regular calls would
// otherwise outlive a revocation for ever.
func (c *Creds) Recheck() {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := c.transports[:0]
	for _, w := range c.transports {
		if t := w.Value(); t != nil {
			t.CloseIdleConnections()
			live = append(live, w)
		}
	}
	clear(c.transports[len(live):])
	c.transports = live
}

// ErrPeerRefused marks a connection the Checker refused at its
// handshake: nothing was sent to the peer.
var ErrPeerRefused = errors.New("the peer's certificate is refused")

// errAnswerRefused marks an answer from a peer the Checker refuses (it
// was refused after the connection was made): the call was sent.
var errAnswerRefused = errors.New("the answer came from a peer whose certificate is refused")

// checkPeer runs the Checker over a verified peer's leaf certificate.
func (c *Creds) checkPeer(id pki.Identity, leaf *x509.Certificate) error {
	p := c.check.Load()
	if p == nil || *p == nil {
		return nil
	}
	return (*p)(id, leaf)
}

// ClientTLS dials a peer holding one of roles; with id set, exactly that
// member (a server calling a node's agent checks it is that node).
func (c *Creds) ClientTLS(id string, roles ...pki.Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return c.current(), nil
		},
		// The peer is checked below against the cluster CA and by the
		// identity in its certificate, not by host name: members are
		// reached at addresses their certificates do not list.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			got, err := pki.Verify(cs.PeerCertificates, c.roots, c.now(), roles...)
			if err != nil {
				return err
			}
			if id != "" && got.ID != id {
				return fmt.Errorf("rpcauth: reached %s, wanted %s", got, id)
			}
			if err := c.checkPeer(got, cs.PeerCertificates[0]); err != nil {
				return fmt.Errorf("rpcauth: %w: %w", ErrPeerRefused, err)
			}
			return nil
		},
		NextProtos: []string{"h2", "http/1.1"},
	}
}

// ServerTLS serves members: a client certificate, when sent, must chain
// to the CA (Require then checks its role) and pass the Checker set with
// SetChecker; required says whether one must be sent at all.
func (c *Creds) ServerTLS(required bool) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if required {
		auth = tls.RequireAndVerifyClientCert
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.current(), nil },
		ClientAuth:     auth,
		ClientCAs:      c.roots,
		NextProtos:     []string{"h2", "http/1.1"},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.VerifiedChains) == 0 || c.check.Load() == nil {
				return nil // none sent (and none required), or nothing to check
			}
			leaf := cs.VerifiedChains[0][0]
			id, err := pki.IdentityOf(leaf)
			if err != nil {
				return fmt.Errorf("rpcauth: %w", err)
			}
			if err := c.checkPeer(id, leaf); err != nil {
				return fmt.Errorf("rpcauth: %w", err)
			}
			return nil
		},
	}
}

// Client is an HTTP/2 client over mutual TLS to members with one of
// roles (and the id, when set): Connect streams need HTTP/2, and one
// connection carries every call.
func (c *Creds) Client(id string, roles ...pki.Role) *http.Client {
	p := new(http.Protocols)
	p.SetHTTP2(true)
	p.SetHTTP1(true)
	t := &http.Transport{
		Protocols:         p,
		ForceAttemptHTTP2: true,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:   c.ClientTLS(id, roles...),
		IdleConnTimeout:   90 * time.Second,
	}
	c.mu.Lock()
	c.transports = append(c.transports, weak.Make(t))
	c.mu.Unlock()
	return &http.Client{Transport: &checked{creds: c, t: t}}
}

// checked refuses answers from a peer the Checker refuses, which a
// connection made before the Checker changed still reaches, and closes
// the idle connections so that the next call handshakes again.
type checked struct {
	creds *Creds
	t     *http.Transport
}

func (c *checked) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.t.RoundTrip(req)
	if err != nil || resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return resp, err
	}
	leaf := resp.TLS.PeerCertificates[0]
	id, err := pki.IdentityOf(leaf)
	if err == nil {
		err = c.creds.checkPeer(id, leaf)
	}
	if err != nil {
		resp.Body.Close()
		c.t.CloseIdleConnections()
		return nil, fmt.Errorf("rpcauth: %w: %w", errAnswerRefused, err)
	}
	return resp, nil
}

// CloseIdleConnections closes the transport's idle connections.
func (c *checked) CloseIdleConnections() { c.t.CloseIdleConnections() }

// Protocols lets a TLS http.Server take HTTP/1.1 and HTTP/2.
func Protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	return p
}

type peerKey struct{}

// Peer is the identity a request's client certificate proved (or that a
// server vouched for, see Vouched).
func Peer(ctx context.Context) (pki.Identity, bool) {
	id, ok := ctx.Value(peerKey{}).(pki.Identity)
	return id, ok
}

// WithPeer marks ctx as coming from id (tests and in-process calls).
func WithPeer(ctx context.Context, id pki.Identity) context.Context {
	return context.WithValue(ctx, peerKey{}, id)
}

// VouchHeader carries, on a request one server forwards to another, the
// identity of the member that sent it; it is believed only from a server.
const VouchHeader = "X-Sandboxd-Peer"

// Checker confirms that an identity's certificate is still honoured (its
// member not revoked, the certificate not from before a later join);
// cert is nil for a member a server vouches for (that server checked
// its certificate). nil accepts every certificate the CA issued.
type Checker func(id pki.Identity, cert *x509.Certificate) error

// article puts "a" or "an" before a role's name.
func article(role string) string {
	if role != "" && strings.ContainsRune("aeiou", rune(role[0])) {
		return "an " + role
	}
	return "a " + role
}

// Require lets through requests whose client certificate (verified
// against the CA by the listener) names one of roles and passes check.
// A request a server forwards carries the original member in
// VouchHeader, and is judged as that member.
func Require(check Checker, roles ...pki.Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, err := authenticate(r, check)
			if err == nil && !hasRole(roles, id.Role) {
				err = apierr.New(http.StatusForbidden, apierr.CodeInsufficientScope, "%s may not call this", article(string(id.Role)))
			}
			if err != nil {
				apierr.Write(w, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(WithPeer(r.Context(), id)))
		})
	}
}

// authenticate reads the member behind a request: its certificate's
// identity, or the one a forwarding server vouches for.
func authenticate(r *http.Request, check Checker) (pki.Identity, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return pki.Identity{}, apierr.New(http.StatusUnauthorized, apierr.CodeAuthRequired, "a cluster certificate is required")
	}
	leaf := r.TLS.VerifiedChains[0][0]
	id, err := pki.IdentityOf(leaf)
	if err != nil {
		return pki.Identity{}, apierr.New(http.StatusUnauthorized, apierr.CodeAuthRequired, "%v", err)
	}
	if check != nil {
		if err := check(id, leaf); err != nil {
			return pki.Identity{}, apierr.New(http.StatusUnauthorized, apierr.CodeAuthRequired, "%s: %v", id, err)
		}
	}
	if v := r.Header.Get(VouchHeader); v != "" {
		if id.Role != pki.RoleServer {
			return pki.Identity{}, apierr.New(http.StatusForbidden, apierr.CodeInsufficientScope, "only servers forward requests")
		}
		vouched, err := ParseIdentity(v)
		if err != nil {
			return pki.Identity{}, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "%v", err)
		}
		if check != nil {
			if err := check(vouched, nil); err != nil {
				return pki.Identity{}, apierr.New(http.StatusUnauthorized, apierr.CodeAuthRequired, "%s: %v", vouched, err)
			}
		}
		r.Header.Del(VouchHeader)
		return vouched, nil
	}
	return id, nil
}

// ParseIdentity reads "role/id".
func ParseIdentity(s string) (pki.Identity, error) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			id := pki.Identity{Role: pki.Role(s[:i]), ID: s[i+1:]}
			if id.Role.Valid() && pki.ValidID(id.ID) {
				return id, nil
			}
			break
		}
	}
	return pki.Identity{}, fmt.Errorf("rpcauth: malformed identity %q", s)
}

func hasRole(roles []pki.Role, r pki.Role) bool {
	for _, x := range roles {
		if x == r {
			return true
		}
	}
	return false
}
