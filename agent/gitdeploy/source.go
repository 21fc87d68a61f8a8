package gitdeploy

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// Source is one repository's branch to fetch, with the means to reach it.
type Source struct {
	// RepoID names the repository's cache under Fetcher.Dir (and its
	// known hosts): [A-Za-z0-9][A-Za-z0-9_-]{0,63}.
	RepoID string
	// URL is https://host[:port]/path (http:// for an operator's mirror
	// on a private network; never with a token), ssh://user@host[:port]/path
	// or user@host:path. No user or password in an http(s) URL: the
	// token goes in Token.
	URL string
	// Branch is the branch to fetch (a name under refs/heads/).
	Branch string
	// Token authenticates an https fetch (a GitHub, Gitea or GitLab
	// access token), sent as Basic auth TokenUser:Token; empty for a
	// public repository.
	Token string
	// TokenUser is the Basic auth user name sent with Token; empty is
	// "x-access-token", which GitHub, Gitea and GitLab personal, project
	// and group access tokens take. A GitLab deploy token needs its own
	// user name here.
	TokenUser string
	// SSHKey is the repository's deploy key (an OpenSSH or PEM private
	// key without passphrase) for an ssh URL.
	SSHKey []byte
	// Pin is the address (IPv4 or IPv6) the URL's host must be reached
	// at, as the control plane's address guard checked it; git and ssh
	// then never resolve the name. Empty: no pin (an operator's mirror).
	Pin string
}

// defaultTokenUser is the Basic auth user sent with a token.
const defaultTokenUser = "x-access-token"

// remote is a Source's URL taken apart: what git is given and what the
// transport needs.
type remote struct {
	ssh  bool
	url  string // what git fetches (the pin in place of the host, for ssh)
	host string // the URL's host name, as written (no brackets)
	port string // explicit or the scheme's default; empty for ssh's default
}

var (
	repoIDRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	hostRE     = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)
	userRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	scpRE      = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._-]{0,63})@([^:/\[\]]+|\[[0-9A-Fa-f:.]+\]):([^-].*)$`)
	tokenCharR = regexp.MustCompile(`^[\x21-\x7e]+$`)
)

// check refuses a Source that cannot be fetched safely, and parses its
// URL.
func (s Source) check() (*remote, error) {
	if !repoIDRE.MatchString(s.RepoID) {
		return nil, fmt.Errorf("%w: repository id %q", ErrInvalid, s.RepoID)
	}
	if err := checkBranch(s.Branch); err != nil {
		return nil, err
	}
	if s.Token != "" && (len(s.Token) > 1024 || !tokenCharR.MatchString(s.Token)) {
		return nil, fmt.Errorf("%w: the token has characters a token cannot have", ErrInvalid)
	}
	if s.TokenUser != "" && !userRE.MatchString(s.TokenUser) {
		return nil, fmt.Errorf("%w: token user %q", ErrInvalid, s.TokenUser)
	}
	var pin net.IP
	if s.Pin != "" {
		if pin = net.ParseIP(s.Pin); pin == nil {
			return nil, fmt.Errorf("%w: pinned address %q", ErrInvalid, s.Pin)
		}
	}
	r, err := parseURL(s.URL, pin)
	if err != nil {
		return nil, err
	}
	switch {
	case r.ssh && s.Token != "":
		return nil, fmt.Errorf("%w: a token is for https URLs; an ssh URL takes a deploy key", ErrInvalid)
	case r.ssh && len(s.SSHKey) == 0:
		return nil, fmt.Errorf("%w: an ssh URL needs a deploy key", ErrInvalid)
	case !r.ssh && len(s.SSHKey) > 0:
		return nil, fmt.Errorf("%w: a deploy key is for ssh URLs (ssh://… or git@host:…)", ErrInvalid)
	case s.Token != "" && !strings.HasPrefix(r.url, "https://"):
		return nil, fmt.Errorf("%w: a token is only sent over https", ErrInvalid)
	}
	return r, nil
}

// parseURL takes a repository URL apart; for ssh with a pin, the URL git
// is given names the pinned address instead of the host.
func parseURL(raw string, pin net.IP) (*remote, error) {
	bad := func(why string) error { return fmt.Errorf("%w: repository URL: %s", ErrInvalid, why) }
	if raw == "" || len(raw) > 2048 || strings.ContainsAny(raw, " \t\r\n\x00\\") || strings.HasPrefix(raw, "-") {
		return nil, bad("not a URL git may fetch")
	}
	if m := scpRE.FindStringSubmatch(raw); m != nil && !strings.Contains(raw, "://") {
		host := strings.Trim(m[2], "[]")
		if !validHost(host) {
			return nil, bad("host " + m[2])
		}
		r := &remote{ssh: true, url: raw, host: host}
		if pin != nil {
			r.url = m[1] + "@" + bracket(pin) + ":" + m[3]
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
	r := &remote{url: u.String(), host: host, port: u.Port()}
	switch u.Scheme {
	case "https", "http":
		if u.User != nil {
			return nil, bad("no user or password in the URL: the token has a field of its own")
		}
		if r.port == "" {
			r.port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
		}
	case "ssh":
		r.ssh = true
		if u.User == nil || !userRE.MatchString(u.User.Username()) {
			return nil, bad("an ssh URL names its user: ssh://git@host/owner/repository")
		}
		if _, has := u.User.Password(); has {
			return nil, bad("no password in the URL: an ssh URL takes a deploy key")
		}
		if pin != nil {
			pinned := *u
			pinned.Host = bracket(pin)
			if r.port != "" {
				pinned.Host = net.JoinHostPort(pin.String(), r.port)
			}
			r.url = pinned.String()
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

// bracket writes an address as a URL host: IPv6 in brackets.
func bracket(ip net.IP) string {
	if ip.To4() == nil {
		return "[" + ip.String() + "]"
	}
	return ip.String()
}

// checkBranch refuses what git's check-ref-format would, and anything a
// command line could take for an option.
func checkBranch(b string) error {
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
