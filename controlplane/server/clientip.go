package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/netip"

	"github.com/sandboxd/sandboxd/controlplane/rest"
)

// Headers a follower adds when it forwards a request to the leader: the
// client's address as the follower established it, and an HMAC of that
// address under the cluster token, so the leader believes the address
// from a peer server only. (Someone who could read the traffic between
// servers could replay a signature, but only to claim the address it was
// made for, and that traffic already carries the cluster token.)
const (
	clientIPHeader    = "X-Sandboxd-Client-Ip"
	clientIPSigHeader = "X-Sandboxd-Client-Ip-Sig"
)

func (s *Server) signClientIP(ip netip.Addr) string {
	m := hmac.New(sha256.New, []byte(s.cfg.ClusterToken))
	m.Write([]byte("sandboxd client-ip v1\x00" + ip.String()))
	return hex.EncodeToString(m.Sum(nil))
}

// clientIP attributes every request to an address (rest.ClientIP), which
// rate limits key on and the access log records: the one a peer server
// vouches for, else the TCP peer, or the client a trusted proxy names
// (Config.TrustedProxies). The peer headers are removed either way, so
// nothing after this sees a client's forgery.
func (s *Server) clientIP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip := rest.ForwardedClient(r, s.cfg.TrustedProxies)
		if v := r.Header.Get(clientIPHeader); v != "" {
			sig := r.Header.Get(clientIPSigHeader)
			if a, err := netip.ParseAddr(v); err == nil && hmac.Equal([]byte(sig), []byte(s.signClientIP(a))) {
				ip = a.Unmap()
			}
		}
		r.Header.Del(clientIPHeader)
		r.Header.Del(clientIPSigHeader)
		rest.SetClientIP(r.Context(), ip)
		next.ServeHTTP(w, r)
	})
}

// vouch adds the peer headers for the request's client to a request
// forwarded to the leader.
func (s *Server) vouch(in *http.Request, out http.Header) {
	out.Del(clientIPHeader)
	out.Del(clientIPSigHeader)
	if ip := rest.ClientIP(in.Context()); ip.IsValid() {
		out.Set(clientIPHeader, ip.String())
		out.Set(clientIPSigHeader, s.signClientIP(ip))
	}
}
