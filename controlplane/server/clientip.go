package server

import (
	"net/http"
	"net/netip"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
)

// clientIPHeader is what a follower adds when it forwards a request to
// the leader: the client's address as the follower established it. The
// leader believes it only from a server of the cluster (a request that
// came over mutual TLS with a server's certificate).
const clientIPHeader = "X-Sandboxd-Client-Ip"

// clientIP attributes every request to an address (rest.ClientIP), which
// rate limits key on and the access log records: the one a peer server
// vouches for, else the TCP peer, or the client a trusted proxy names
// (Config.TrustedProxies). The peer header is removed either way, so
// nothing after this sees a client's forgery.
func (s *Server) clientIP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip := rest.ForwardedClient(r, s.cfg.TrustedProxies)
		if v := r.Header.Get(clientIPHeader); v != "" {
			if peer, ok := rpcauth.Peer(r.Context()); ok && peer.Role == pki.RoleServer {
				if a, err := netip.ParseAddr(v); err == nil {
					ip = a.Unmap()
				}
			}
		}
		r.Header.Del(clientIPHeader)
		rest.SetClientIP(r.Context(), ip)
		next.ServeHTTP(w, r)
	})
}

// vouch adds, to a request forwarded to the leader, who its client is
// and, for a member's call, which member made it.
func (s *Server) vouch(in *http.Request, out http.Header) {
	out.Del(clientIPHeader)
	out.Del(rpcauth.VouchHeader)
	if ip := rest.ClientIP(in.Context()); ip.IsValid() {
		out.Set(clientIPHeader, ip.String())
	}
	if peer, ok := rpcauth.Peer(in.Context()); ok && peer != s.creds.Identity() {
		out.Set(rpcauth.VouchHeader, peer.String())
	}
}
