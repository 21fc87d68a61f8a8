package rest

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP is the address a request is attributed to (rate limits, the
// access log), as set by SetClientIP; the zero Addr when none was.
func ClientIP(ctx context.Context) netip.Addr {
	if i := infoFrom(ctx); i != nil {
		return i.clientIP
	}
	return netip.Addr{}
}

// SetClientIP records the address a request comes from, for ClientIP.
func SetClientIP(ctx context.Context, ip netip.Addr) {
	if i := infoFrom(ctx); i != nil {
		i.clientIP = ip
	}
}

// PeerIP is the TCP peer of a request.
func PeerIP(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	a, _ := netip.ParseAddr(r.RemoteAddr)
	return a.Unmap()
}

// ForwardedClient is where a request comes from when it may have passed
// proxies: the TCP peer, unless the peer is one of trusted; then the
// X-Forwarded-For entries are read from the right, each trusted hop
// vouching for the one before it, and the first address no trusted
// proxy covers is the client. An entry that is not an address ends the
// walk at the last proxy that could be believed. With no trusted
// proxies (the default) X-Forwarded-For is never read: anyone can write
// it.
func ForwardedClient(r *http.Request, trusted []netip.Prefix) netip.Addr {
	addr := PeerIP(r)
	if !covered(trusted, addr) {
		return addr
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := parseHop(strings.TrimSpace(hops[i]))
		if err != nil {
			return addr
		}
		addr = hop
		if !covered(trusted, addr) {
			return addr
		}
	}
	return addr
}

// parseHop reads one X-Forwarded-For entry: an address, possibly with a
// port, IPv6 possibly bracketed.
func parseHop(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		host = strings.Trim(s, "[]")
	}
	a, err := netip.ParseAddr(host)
	return a.Unmap(), err
}

func covered(prefixes []netip.Prefix, a netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
