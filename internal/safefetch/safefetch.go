// Package safefetch downloads customer-given URLs without letting them
// reach inside the operator's network: every connection, including each
// redirect hop, is checked at dial time against the address actually
// dialed, so DNS tricks cannot swap in a private address after a check.
package safefetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrBlocked marks a refusal of the destination address.
var ErrBlocked = errors.New("destination not allowed")

// ErrTooLarge marks a body over the limit.
var ErrTooLarge = errors.New("download too large")

// blocked are ranges no customer URL may reach, beyond what netip's
// predicates cover: shared address space, benchmarking, IETF protocol
// assignments, reserved space and NAT64.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
}

// Allowed reports whether a fetch may connect to addr: public unicast
// only, unless allow (the operator's list) covers it.
func Allowed(addr netip.Addr, allow []netip.Prefix) bool {
	addr = addr.Unmap()
	for _, p := range allow {
		if p.Contains(addr) {
			return true
		}
	}
	if !addr.IsValid() || addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() ||
		addr.IsLinkLocalMulticast() || addr.IsInterfaceLocalMulticast() || addr.IsMulticast() || addr.IsUnspecified() {
		return false
	}
	for _, p := range blocked {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

// Client fetches URLs through the guarded dialer.
type Client struct {
	http  *http.Client
	allow []netip.Prefix
}

// MaxRedirects bounds the hops of one fetch.
const MaxRedirects = 5

// New returns a client that may also reach the ranges in allow.
func New(allow []netip.Prefix, timeout time.Duration) *Client {
	c := &Client{allow: allow}
	d := &net.Dialer{Timeout: 10 * time.Second, Control: c.control}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, unchecked
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		MaxIdleConns:          10,
		IdleConnTimeout:       30 * time.Second,
	}
	c.http = &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= MaxRedirects {
			return fmt.Errorf("more than %d redirects", MaxRedirects)
		}
		if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
			return fmt.Errorf("redirect to a %s URL", req.URL.Scheme)
		}
		return nil
	}}
	return c
}

func (c *Client) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrBlocked, address)
	}
	if !Allowed(ap.Addr(), c.allow) {
		return fmt.Errorf("%w: %s is a private, loopback, link-local or reserved address", ErrBlocked, ap.Addr())
	}
	return nil
}

// CheckURL refuses what is not an absolute http(s) URL.
func CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("not an http(s) URL: %q", raw)
	}
	if u.User != nil {
		return nil, errors.New("URLs with credentials are not accepted")
	}
	return u, nil
}

// CheckURL is the package's CheckURL plus an early refusal of a host
// written as an address this client may not reach, so a request can be
// refused at once when no DNS is involved. It is only a courtesy: the
// dial-time check in Get is what holds.
func (c *Client) CheckURL(raw string) (*url.URL, error) {
	u, err := CheckURL(raw)
	if err != nil {
		return nil, err
	}
	if addr, err := netip.ParseAddr(u.Hostname()); err == nil && !Allowed(addr, c.allow) {
		return nil, fmt.Errorf("%w: %s is a private, loopback, link-local or reserved address", ErrBlocked, addr)
	}
	return u, nil
}

// Get downloads raw, up to max bytes. header adds request headers.
func (c *Client) Get(ctx context.Context, raw string, max int64, header http.Header) ([]byte, error) {
	if _, err := CheckURL(raw); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", "sandboxd")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", resp.Request.URL.Host, resp.Status)
	}
	if resp.ContentLength > max {
		return nil, fmt.Errorf("%w: %d bytes; the limit is %d", ErrTooLarge, resp.ContentLength, max)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > max {
		return nil, fmt.Errorf("%w: the limit is %d bytes", ErrTooLarge, max)
	}
	return body, nil
}

// ParseAllow reads a comma-separated list of CIDRs or addresses.
func ParseAllow(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("allow-list entry %q is not an address or CIDR", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Pin resolves the host of raw and checks every address it has, for a
// client that connects by itself (git): it returns the URL's host, port
// and the address to pin the connection to (curl's --resolve form
// "host:port:addr"), so a second lookup cannot lead elsewhere.
func (c *Client) Pin(ctx context.Context, raw string) (string, error) {
	u, err := c.CheckURL(raw)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	host := u.Hostname()
	addr, err := c.PinHost(ctx, host)
	if err != nil {
		return "", err
	}
	a := addr.String()
	if addr.Is6() {
		a = "[" + a + "]"
	}
	return host + ":" + port + ":" + a, nil
}

// PinHost resolves a host name (or takes an address as written), checks
// every address it has and returns the one a client that connects by
// itself (git over ssh) must be pinned to.
func (c *Client) PinHost(ctx context.Context, host string) (netip.Addr, error) {
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %s: %w", host, err)
	}
	for _, a := range addrs {
		if !Allowed(a.Unmap(), c.allow) {
			return netip.Addr{}, fmt.Errorf("%w: %s resolves to %s, a private, loopback, link-local or reserved address", ErrBlocked, host, a)
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("resolve %s: no address", host)
	}
	return addrs[0].Unmap(), nil
}
