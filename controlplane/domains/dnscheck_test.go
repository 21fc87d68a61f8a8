package domains

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/dnstest"
)

func TestChecks(t *testing.T) {
	dns := dnstest.Start(t)
	r := &Resolver{Server: dns.Addr}
	ctx := context.Background()
	edges := []netip.Addr{netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8::10")}
	dns.Set(t, "chain.example.com", "CNAME hop.cdn.example.net.")
	dns.Set(t, "hop.cdn.example.net", "CNAME site-ab12.sandbox.example.org.")
	dns.Set(t, "site-ab12.sandbox.example.org", "A 203.0.113.10")
	dns.Set(t, "loop.example.com", "CNAME loop2.example.com.")
	dns.Set(t, "loop2.example.com", "CNAME loop.example.com.")
	dns.Set(t, "apex.example", "A 203.0.113.10", "AAAA 2001:db8::10")
	dns.Set(t, "_sandboxd.apex.example", `TXT "sandboxd-" "verify=tok"`)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"a CNAME chain reaching the site", r.checkCNAME(ctx, "chain.example.com", "site-ab12.sandbox.example.org"), ""},
		{"a chain elsewhere", r.checkCNAME(ctx, "chain.example.com", "other.sandbox.example.org"), "hop.cdn.example.net → site-ab12.sandbox.example.org, not to other"},
		{"a CNAME loop ends", r.checkCNAME(ctx, "loop.example.com", "site-ab12.sandbox.example.org"), "not to site-ab12"},
		{"apex with both families and a split TXT", r.checkApex(ctx, "apex.example", edges, "_sandboxd.apex.example", "sandboxd-verify=tok"), ""},
		{"apex with another token", r.checkApex(ctx, "apex.example", edges, "_sandboxd.apex.example", "sandboxd-verify=other"), "TXT record"},
		{"apex with an address of ours missing", r.checkApex(ctx, "apex.example", edges[:1], "_sandboxd.apex.example", "sandboxd-verify=tok"), "2001:db8::10"},
		{"apex that does not exist", r.checkApex(ctx, "none.example", edges, "_sandboxd.none.example", "x"), "does not exist"},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("%s: %v", c.name, c.err)
		case c.want != "" && (c.err == nil || !strings.Contains(c.err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, c.err, c.want)
		}
	}

	// A resolver that never answers is said so, within the timeout.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	silent := &Resolver{Server: pc.LocalAddr().String(), Timeout: 200 * time.Millisecond}
	if err := silent.checkCNAME(ctx, "shop.example.com", "x.example.org"); err == nil || !strings.Contains(err.Error(), "did not answer (timed out)") {
		t.Errorf("silent resolver: %v", err)
	}
}
