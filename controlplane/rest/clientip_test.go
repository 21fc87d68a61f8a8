package rest

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestForwardedClient: X-Forwarded-For is read only when a trusted proxy
// is the peer, from the right, up to the first address no trusted proxy
// covers.
func TestForwardedClient(t *testing.T) {
	lb := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		name    string
		peer    string
		xff     []string
		trusted []netip.Prefix
		want    string
	}{
		{"no proxies trusted: the peer, whatever the header says", "203.0.113.9:5000", []string{"198.51.100.1"}, nil, "203.0.113.9"},
		{"an untrusted peer's header is ignored", "203.0.113.9:5000", []string{"198.51.100.1"}, lb, "203.0.113.9"},
		{"a trusted peer names the client", "10.1.1.1:5000", []string{"198.51.100.1"}, lb, "198.51.100.1"},
		{"a spoofed left part is skipped", "10.1.1.1:5000", []string{"6.6.6.6, 198.51.100.1"}, lb, "198.51.100.1"},
		{"chains of trusted proxies", "10.1.1.1:5000", []string{"198.51.100.1, 10.2.2.2", "10.3.3.3"}, lb, "198.51.100.1"},
		{"only proxies: the leftmost", "10.1.1.1:5000", []string{"10.2.2.2"}, lb, "10.2.2.2"},
		{"no header: the proxy", "10.1.1.1:5000", nil, lb, "10.1.1.1"},
		{"garbage stops at the last believable hop", "10.1.1.1:5000", []string{"198.51.100.1, bogus, 10.2.2.2"}, lb, "10.2.2.2"},
		{"ports and brackets", "10.1.1.1:5000", []string{"[2001:db8::7]:443"}, lb, "2001:db8::7"},
		{"IPv4 in IPv6 is IPv4", "[::ffff:203.0.113.9]:5000", nil, nil, "203.0.113.9"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.peer
		for _, v := range tt.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := ForwardedClient(r, tt.trusted); got.String() != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
