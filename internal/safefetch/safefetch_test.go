package safefetch

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestAllowed(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"93.184.216.34", true},
		{"2606:2800:220:1:248:1893:25c8:1946", true},
		{"127.0.0.1", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"fe80::1", false},
		{"fd00::1", false},
		{"100.64.0.1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"224.0.0.1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"64:ff9b::a00:1", false},
	}
	for _, tt := range tests {
		if got := Allowed(netip.MustParseAddr(tt.addr), nil); got != tt.want {
			t.Errorf("Allowed(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	allow, err := ParseAllow("127.0.0.1, 10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	if !Allowed(netip.MustParseAddr("127.0.0.1"), allow) || !Allowed(netip.MustParseAddr("10.9.9.9"), allow) ||
		Allowed(netip.MustParseAddr("127.0.0.2"), allow) {
		t.Fatal("allow-list not applied exactly")
	}
	if _, err := ParseAllow("not-an-ip"); err == nil {
		t.Fatal("bad allow-list accepted")
	}
}

func TestGetRefusesLoopbackAndRedirectsToIt(t *testing.T) {
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("secret inside"))
	}))
	defer inner.Close()
	ctx := context.Background()

	// Without an allow-list, the loopback server is refused at dial time.
	c := New(nil, 5*time.Second)
	if _, err := c.Get(ctx, inner.URL, 1<<20, nil); !errors.Is(err, ErrBlocked) {
		t.Fatalf("loopback fetch: %v", err)
	}
	// Through a hostname that resolves to loopback: the same.
	if _, err := c.Get(ctx, strings.Replace(inner.URL, "127.0.0.1", "localhost", 1), 1<<20, nil); !errors.Is(err, ErrBlocked) {
		t.Fatalf("localhost fetch: %v", err)
	}

	// A redirect hop is checked too: allow only the redirector's port is
	// impossible by CIDR, so allow loopback for the first server and check
	// that a hop to a blocked address fails.
	allowed := New([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, 5*time.Second)
	if body, err := allowed.Get(ctx, inner.URL, 1<<20, nil); err != nil || string(body) != "secret inside" {
		t.Fatalf("allow-listed fetch: %q, %v", body, err)
	}
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	}))
	defer redirector.Close()
	if _, err := allowed.Get(ctx, redirector.URL, 1<<20, nil); !errors.Is(err, ErrBlocked) {
		t.Fatalf("redirect to metadata: %v", err)
	}
	if _, err := allowed.Get(ctx, inner.URL, 4, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("size limit: %v", err)
	}
	for _, bad := range []string{"file:///etc/passwd", "gopher://x", "http://user:pw@example.com/", "/relative"} {
		if _, err := c.Get(ctx, bad, 10, nil); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
}

// TestClientCheckURL: a URL whose host is a blocked address is refused
// before any fetch; a hostname waits for the dial-time check.
func TestClientCheckURL(t *testing.T) {
	c := New([]netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, time.Second)
	tests := []struct {
		url     string
		blocked bool
		invalid bool
	}{
		{"https://example.com/p.zip", false, false},
		{"http://localhost:8080/p.zip", false, false},
		{"http://93.184.216.34/p.zip", false, false},
		{"http://10.1.2.3/p.zip", false, false}, // allow-listed
		{"http://127.0.0.1:9/p.zip", true, false},
		{"http://[::1]/p.zip", true, false},
		{"http://169.254.169.254/latest/", true, false},
		{"ftp://example.com/p.zip", false, true},
	}
	for _, tt := range tests {
		_, err := c.CheckURL(tt.url)
		if errors.Is(err, ErrBlocked) != tt.blocked || (err != nil) != (tt.blocked || tt.invalid) {
			t.Errorf("CheckURL(%s) = %v", tt.url, err)
		}
	}
}

// TestPin: a host is pinned only when every address it resolves to may
// be reached; the pin names the address git must connect to.
func TestPin(t *testing.T) {
	ctx := context.Background()
	guarded := New(nil, time.Second)
	for _, raw := range []string{"http://localhost/repo.git", "http://127.0.0.1:8080/r.git", "https://[::1]/r.git", "ftp://example.com/x",
		"http://user:pw@example.com/x"} {
		if pin, err := guarded.Pin(ctx, raw); err == nil {
			t.Errorf("%s pinned to %s", raw, pin)
		}
	}
	if _, err := guarded.Pin(ctx, "http://localhost/repo.git"); !errors.Is(err, ErrBlocked) {
		t.Errorf("localhost: %v", err)
	}
	open := New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}, time.Second)
	for raw, want := range map[string]string{"http://127.0.0.1:8080/r.git": "127.0.0.1:8080:127.0.0.1", "https://127.0.0.1/r.git": "127.0.0.1:443:127.0.0.1"} {
		if pin, err := open.Pin(ctx, raw); err != nil || pin != want {
			t.Errorf("%s: %q %v, want %q", raw, pin, err, want)
		}
	}
}
