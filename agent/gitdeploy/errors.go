package gitdeploy

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Errors Fetch and WriteTar wrap, to be told apart with errors.Is and
// translated to API codes at the RPC boundary. Their text is for
// customers: it says what went wrong in words and never holds a secret.
var (
	// ErrInvalid means the Source itself is unusable (a bad URL, branch
	// name, repository id, or a token or key of the wrong kind).
	ErrInvalid = errors.New("invalid git source")
	// ErrAuth means the server refused the token or the deploy key.
	ErrAuth = errors.New("authentication failed")
	// ErrRepoNotFound means no repository at the URL (or a private one
	// the credentials cannot read: code hosts answer alike).
	ErrRepoNotFound = errors.New("repository not found")
	// ErrBranchNotFound means the repository has no such branch.
	ErrBranchNotFound = errors.New("branch not found")
	// ErrHostKey means the ssh server's host key is not the one it
	// showed on the repository's first fetch.
	ErrHostKey = errors.New("the ssh server's host key changed")
	// ErrUnreachable means the server could not be reached or did not
	// answer in time.
	ErrUnreachable = errors.New("the git server could not be reached")
	// ErrRefused means the fetched tree breaks the deploy rules: a link,
	// a submodule, a path leaving the tree, or over a bound.
	ErrRefused = errors.New("the repository cannot be deployed")
	// ErrGone means a Tree's objects were pruned from the cache by a
	// later fetch: fetch again.
	ErrGone = errors.New("the fetched commit is no longer in the cache")
)

// scrubber removes a Source's secrets from text git or ssh printed.
type scrubber []string

func newScrubber(s Source) scrubber {
	var sc scrubber
	if s.Token != "" {
		user := s.TokenUser
		if user == "" {
			user = defaultTokenUser
		}
		sc = append(sc, s.Token, basicAuth(user, s.Token))
	}
	return sc
}

func (sc scrubber) scrub(text string) string {
	for _, s := range sc {
		text = strings.ReplaceAll(text, s, "[redacted]")
	}
	return text
}

func basicAuth(user, token string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + token))
}

// classify turns a failed fetch's stderr into one of the errors above,
// with git's own words (scrubbed, clipped) after it.
func classify(r *remote, stderr string, sc scrubber) error {
	msg := clip(gitWords(sc.scrub(stderr)), 400)
	low := strings.ToLower(stderr)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(low, s) {
				return true
			}
		}
		return false
	}
	var kind error
	var hint string
	switch {
	case has("fsck error", "hasdot", "fullpathname"):
		kind, hint = ErrRefused, "its objects are malformed or name paths that leave the tree"
	case has("remote host identification has changed", "host key verification failed"):
		kind, hint = ErrHostKey, "if the server's key really changed, reconnect the repository"
	case has("permission denied (publickey", "permission denied (", "no more authentication methods"):
		kind, hint = ErrAuth, "check the deploy key is added to the repository"
	case has("authentication failed", "could not read username", "could not read password", "returned error: 401", "returned error: 403",
		"http basic: access denied", "invalid username or password", "terminal prompts disabled"):
		kind, hint = ErrAuth, "check the token is valid and can read the repository"
	case has("couldn't find remote ref", "could not find remote ref", "no such ref"):
		kind = ErrBranchNotFound
	case has("repository not found", "returned error: 404", "does not appear to be a git repository", "not found", "does not exist"):
		kind, hint = ErrRepoNotFound, "check the URL (a private repository needs a token or deploy key that can read it)"
	case has("could not resolve", "connection refused", "timed out", "no route to host", "network is unreachable",
		"failed to connect", "connection reset", "connection closed", "operation too slow", "signal: killed"):
		kind = ErrUnreachable
	default:
		return fmt.Errorf("git fetch failed: %s", msg)
	}
	if r.SSH && kind == ErrAuth {
		hint = "check the deploy key is added to the repository"
	}
	if kind == ErrHostKey {
		return fmt.Errorf("%w: %s", kind, hint) // git's words are ssh's banner
	}
	if hint != "" {
		return fmt.Errorf("%w: %s (git: %s)", kind, hint, msg)
	}
	return fmt.Errorf("%w (git: %s)", kind, msg)
}

// gitWords is what git said that matters: its fatal and error lines
// without the generic advice, or its last line.
func gitWords(stderr string) string {
	var keep []string
	last := ""
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		last = l
		low := strings.ToLower(l)
		switch {
		case strings.Contains(low, "could not read from remote repository"), strings.Contains(low, "the remote end hung up"),
			strings.Contains(low, "unable to read askpass response"), strings.HasPrefix(low, "please make sure"),
			strings.HasPrefix(low, "and the repository exists"):
		case strings.HasPrefix(low, "fatal:"), strings.HasPrefix(low, "error:"), strings.HasPrefix(low, "remote:"),
			strings.Contains(low, "permission denied"):
			keep = append(keep, l)
		}
	}
	if len(keep) == 0 {
		return last
	}
	return strings.Join(keep, "; ")
}

// size writes a byte count for people.
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// clip shortens s to at most n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
