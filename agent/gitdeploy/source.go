package gitdeploy

import (
	"fmt"
	"net"
	"regexp"
	"strings"

	"github.com/sandboxd/sandboxd/internal/gitsource"
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

// remote is a Source's URL taken apart (gitsource's rules, shared with
// the control plane).
type remote = gitsource.Remote

var (
	repoIDRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
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
	if s.TokenUser != "" && !gitsource.UserRE.MatchString(s.TokenUser) {
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
	case r.SSH && s.Token != "":
		return nil, fmt.Errorf("%w: a token is for https URLs; an ssh URL takes a deploy key", ErrInvalid)
	case r.SSH && len(s.SSHKey) == 0:
		return nil, fmt.Errorf("%w: an ssh URL needs a deploy key", ErrInvalid)
	case !r.SSH && len(s.SSHKey) > 0:
		return nil, fmt.Errorf("%w: a deploy key is for ssh URLs (ssh://… or git@host:…)", ErrInvalid)
	case s.Token != "" && !strings.HasPrefix(r.URL, "https://"):
		return nil, fmt.Errorf("%w: a token is only sent over https", ErrInvalid)
	}
	return r, nil
}

// parseURL is gitsource.Parse with this package's ErrInvalid.
func parseURL(raw string, pin net.IP) (*remote, error) {
	r, err := gitsource.Parse(raw, pin)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(err.Error(), gitsource.ErrInvalid.Error()+": "))
	}
	return r, nil
}

// checkBranch is gitsource.CheckBranch with this package's ErrInvalid.
func checkBranch(b string) error {
	if err := gitsource.CheckBranch(b); err != nil {
		return fmt.Errorf("%w: branch name %q", ErrInvalid, b)
	}
	return nil
}

func bracket(ip net.IP) string { return gitsource.Bracket(ip) }
