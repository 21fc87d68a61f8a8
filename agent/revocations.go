package agent

import (
	"crypto/tls"
	"net/http"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/revocation"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// revocationsFile, in the data dir, keeps the last revocations the
// control plane sent, so a restarted agent refuses revoked callers
// before it has reached the control plane again.
const revocationsFile = "revocations.json"

// openRevocations loads the kept revocations and makes every handshake
// of the node's cluster certificate (its listeners' and its calls')
// check them; a file that cannot be read is logged and replaced by the
// next answer.
func (a *Agent) openRevocations() {
	path := filepath.Join(a.cfg.DataDir, revocationsFile)
	set, err := revocation.Open(path, nil)
	if err != nil {
		a.log.Warn("the kept revocations cannot be read; waiting for the control plane's", "err", err)
		set = revocation.New(path, nil)
	}
	a.useRevocations(set)
}

// useRevocations makes set the node's revocations.
func (a *Agent) useRevocations(set *revocation.Set) {
	a.revoked = set
	a.creds.SetChecker(set.Check)
}

// applyRevocations takes the control plane's list from a register or
// heartbeat answer (nil: the one held is current), cuts the ingress
// connections of edges it now refuses, and closes its own idle
// connections to servers so that a revoked one is not called again.
// (Calls from servers are checked request by request, so an open
// connection gets no further.)
func (a *Agent) applyRevocations(msg *agentv1.Revocations) {
	if msg == nil || msg.Version == a.revoked.Version() {
		return
	}
	entries := make([]revocation.Entry, 0, min(len(msg.Members), revocation.MaxEntries))
	for _, m := range msg.Members {
		entries = append(entries, revocation.Entry{ID: m.Id, Revoked: m.Revoked,
			ValidFrom: revocation.FromUnixNano(m.ValidFromUnixNano), Until: revocation.FromUnixNano(m.UntilUnixNano)})
	}
	if err := a.revoked.Replace(msg.Version, entries); err != nil {
		a.log.Warn("keeping the revocations on disk", "err", err)
	}
	// What a revoked edge has open is cut first, right after its new
	// handshakes are refused; then the agent's own connections to servers
	// (its heartbeats keep one open for ever) handshake again, and a
	// revoked server is left.
	cut := 0
	if a.ingress != nil {
		cut = a.ingress.Cut(a.revoked.Peer)
	}
	a.creds.Recheck()
	a.log.Info("revocations updated", "version", msg.Version, "entries", a.revoked.Len(), "ingress_connections_cut", cut)
}

// serviceHandler lets through to the AgentService only servers whose
// certificates the cluster still honours, checked at every request.
func (a *Agent) serviceHandler(h http.Handler) http.Handler {
	return rpcauth.Require(a.revoked.Check, pki.RoleServer)(h)
}

// ingressTLS takes edges only, whose certificates the cluster still
// honours (the creds' checker).
func ingressTLS(creds *rpcauth.Creds) *tls.Config {
	cfg := creds.ServerTLS(true)
	checked := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if _, err := pki.Verify(cs.PeerCertificates, creds.Roots(), time.Now(), pki.RoleEdge); err != nil {
			return err
		}
		return checked(cs)
	}
	return cfg
}
