package launch

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestCheckEmail(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"a@example.com", "a@example.com", true},
		{"  a.b+tag@sub.example.org ", "a.b+tag@sub.example.org", true},
		{"", "", false},
		{"not an email", "", false},
		{"a@localhost", "", false},
		{"Name <a@example.com>", "", false},
		{"a@example.com, b@example.com", "", false},
		{strings.Repeat("a", 250) + "@example.com", "", false},
		{"a@exa\nmple.com", "", false},
	} {
		got, err := checkEmail(c.in)
		var fe *FormError
		if c.ok && (err != nil || got != c.want) || !c.ok && (!errors.As(err, &fe) || fe.Field != "email") {
			t.Errorf("checkEmail(%q) = %q, %v", c.in, got, err)
		}
	}
}

// TestIPHash: keyed, stable, never the address, and the same for an
// IPv4 address written as IPv4-mapped IPv6.
func TestIPHash(t *testing.T) {
	a := New(Config{IPKey: []byte("key-a")})
	b := New(Config{IPKey: []byte("key-b")})
	ip := netip.MustParseAddr("203.0.113.7")
	h := a.IPHash(ip)
	if h == "" || strings.Contains(h, "203") || h != a.IPHash(netip.MustParseAddr("::ffff:203.0.113.7")) || h == b.IPHash(ip) {
		t.Fatalf("IPHash: %q", h)
	}
	if a.IPHash(netip.MustParseAddr("2001:db8:1:2::1")) != a.IPHash(netip.MustParseAddr("2001:db8:1:2:ffff::9")) ||
		a.IPHash(netip.MustParseAddr("2001:db8:1:2::1")) == a.IPHash(netip.MustParseAddr("2001:db8:1:3::1")) {
		t.Fatal("IPv6 is not hashed by its /64")
	}
	if a.IPHash(netip.Addr{}) != "" {
		t.Fatal("an unknown address hashed")
	}
}
