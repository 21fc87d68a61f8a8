package domains

import "testing"

func TestNormalize(t *testing.T) {
	for _, c := range []struct {
		in, host string
		apex     bool
		bad      bool
	}{
		{in: "shop.example.com", host: "shop.example.com"},
		{in: "  Shop.Example.COM. ", host: "shop.example.com"},
		{in: "example.com", host: "example.com", apex: true},
		{in: "example.co.uk", host: "example.co.uk", apex: true},
		{in: "www.example.co.uk", host: "www.example.co.uk"},
		{in: "bücher.example.com", host: "xn--bcher-kva.example.com"},
		{in: "xn--bcher-kva.example.com", host: "xn--bcher-kva.example.com"},
		{in: "ÉCOLE.fr", host: "xn--cole-9oa.fr", apex: true},
		{in: "me.github.io", host: "me.github.io", apex: true},
		{in: "a.b.c.d.example.org", host: "a.b.c.d.example.org"},
		{in: "", bad: true},
		{in: "https://shop.example.com", bad: true},
		{in: "shop.example.com/x", bad: true},
		{in: "shop.example.com?x", bad: true},
		{in: "shop.example.com:443", bad: true},
		{in: "*.example.com", bad: true},
		{in: "192.0.2.1", bad: true},
		{in: "2001:db8::1", bad: true},
		{in: "[2001:db8::1]", bad: true},
		{in: "localhost", bad: true},
		{in: "shop.localhost", bad: true},
		{in: "shop.test", bad: true},
		{in: "com", bad: true},
		{in: "co.uk", bad: true},
		{in: "github.io", bad: true},
		{in: "shop.notarealtld", bad: true},
		{in: "-shop.example.com", bad: true},
		{in: "shop-.example.com", bad: true},
		{in: "sh_op.example.com", bad: true},
		{in: "a..example.com", bad: true},
		{in: "user@example.com", bad: true},
		{in: "shop example.com", bad: true},
		{in: "shop.example.com\x00", bad: true},
		{in: "\u202eshop.example.com", bad: true},
	} {
		host, apex, err := Normalize(c.in)
		switch {
		case c.bad && err == nil:
			t.Errorf("%q: accepted as %q", c.in, host)
		case !c.bad && err != nil:
			t.Errorf("%q: %v", c.in, err)
		case !c.bad && (host != c.host || apex != c.apex):
			t.Errorf("%q: %q apex %v, want %q apex %v", c.in, host, apex, c.host, c.apex)
		}
	}
	long := ""
	for range 30 {
		long += "abcdefghi."
	}
	if _, _, err := Normalize(long + "example.com"); err == nil {
		t.Error("a name over 253 bytes was accepted")
	}
}
