// Package gitsource holds the rules of a repository's address and
// branch that the control plane checks when a repository is connected and
// the node agent checks again before git runs: one parser, so the two
// never disagree about what a URL means.
package gitsource

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// ErrInvalid wraps every refusal; the text after it is for customers.
var ErrInvalid = errors.New("invalid git source")

// Remote is a repository URL taken apart: what git is given and what
// the transport and the address guard need.
type Remote struct {
	// SSH is set for ssh:// and user@host:path URLs.
	SSH bool
	// URL is what git fetches (the pin in place of the host, for ssh).
	URL string
	// Host is the URL's host name, as written (no brackets).
	Host string
	// Port is explicit or the scheme's default; empty for ssh's default.
	Port string
}

var (
	hostRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)
	UserRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	scpRE  = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]{0,63})@([^:/\[\]]+|\[[0-9A-Fa-f:.]+\]):([^-].*)$`)
)

// Parse takes a repository URL apart; for ssh with a pin, the URL git is
// given names the pinned address instead of the host.
func Parse(raw string, pin net.IP) (*Remote, error) {
	bad := func(why string) error { return fmt.Errorf("%w: repository URL: %s", ErrInvalid, why) }
	if raw == "" || len(raw) > 2048 || strings.ContainsAny(raw, " \t\r\n\x00\\") || strings.HasPrefix(raw, "-") {
		return nil, bad("not a URL git may fetch")
	}
	if m := scpRE.FindStringSubmatch(raw); m != nil && !strings.Contains(raw, "://") {
		host := strings.Trim(m[2], "[]")
		if !validHost(host) {
			return nil, bad("host " + m[2])
		}
		r := &Remote{SSH: true, URL: raw, Host: host}
		if pin != nil {
			r.URL = m[1] + "@" + Bracket(pin) + ":" + m[3]
		}
		return r, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, bad("cannot be parsed")
	}
	host := u.Hostname()
	if !validHost(host) {
		return nil, bad(fmt.Sprintf("host %q", u.Host))
	}
	if u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.Path == "" || u.Path == "/" {
		return nil, bad("it should be scheme://host/owner/repository")
	}
	r := &Remote{URL: u.String(), Host: host, Port: u.Port()}
	switch u.Scheme {
	case "https", "http":
		if u.User != nil {
			return nil, bad("no user or password in the URL: the token has a field of its own")
		}
		if r.Port == "" {
			r.Port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
		}
	case "ssh":
		r.SSH = true
		if u.User == nil || !UserRE.MatchString(u.User.Username()) {
			return nil, bad("an ssh URL names its user: ssh://git@host/owner/repository")
		}
		if _, has := u.User.Password(); has {
			return nil, bad("no password in the URL: an ssh URL takes a deploy key")
		}
		if pin != nil {
			pinned := *u
			pinned.Host = Bracket(pin)
			if r.Port != "" {
				pinned.Host = net.JoinHostPort(pin.String(), r.Port)
			}
			r.URL = pinned.String()
		}
	default:
		return nil, bad(fmt.Sprintf("scheme %q (https, ssh or git@host:path)", u.Scheme))
	}
	return r, nil
}

// validHost is true for a DNS name or an IP address: nothing a shell or
// ssh's command line would take for more.
func validHost(h string) bool {
	return net.ParseIP(h) != nil || (hostRE.MatchString(h) && !strings.Contains(h, ".."))
}

// Bracket writes an address as a URL host: IPv6 in brackets.
func Bracket(ip net.IP) string {
	if ip.To4() == nil {
		return "[" + ip.String() + "]"
	}
	return ip.String()
}

// CheckBranch refuses what git's check-ref-format would, and anything a
// command line could take for an option.
func CheckBranch(b string) error {
	bad := func() error { return fmt.Errorf("%w: branch name %q", ErrInvalid, b) }
	if b == "" || len(b) > 255 || strings.HasPrefix(b, "-") || strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".") ||
		strings.HasSuffix(b, ".lock") || strings.Contains(b, "..") || strings.Contains(b, "@{") || strings.Contains(b, "//") || b == "@" {
		return bad()
	}
	for _, c := range b {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return bad()
		}
	}
	for _, part := range strings.Split(b, "/") {
		if strings.HasPrefix(part, ".") {
			return bad()
		}
	}
	return nil
}
