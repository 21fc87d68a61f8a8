// Package gitdeploy fetches a connected repository's branch on the node
// with the real git, into a bare repository cached per repository, and
// reads the fetched commit's tree from git's objects (nothing is checked
// out, so no link in the repository is ever followed) under the Library's
// ZIP rules: regular files only, no path leaving the tree, bounded in
// files and bytes before any content is read.
//
// git runs hardened: an environment of its own (no user or system
// configuration, no credential helpers, no proxy, no prompts), only the
// URL's protocol allowed, redirects refused, received objects checked by
// fsck, the host reached at the address the control plane's guard
// checked, bounded in time and in the size of what it writes. Secrets
// reach git in its environment and a 0600 key file, never its argv.
package gitdeploy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Limits bound one fetch and what it may deploy. A zero field takes its
// default (DefaultLimits).
type Limits struct {
	// MaxFiles is the most files a tree may hold.
	MaxFiles int
	// MaxBytes is the most bytes a tree's files may hold together.
	MaxBytes int64
	// MaxFileBytes is the most bytes of one file.
	MaxFileBytes int64
	// MaxPackBytes bounds any file git writes while fetching (the pack):
	// a repository whose branch tip packs larger fails the fetch.
	MaxPackBytes int64
	// CacheBytes is the size a repository's cache may grow to before a
	// fetch prunes it to the fetched commit's objects.
	CacheBytes int64
	// Timeout bounds one fetch (network, git and reading the tree).
	Timeout time.Duration
}

// DefaultLimits are the Library's ZIP bounds, with room for git's own
// files.
func DefaultLimits() Limits {
	return Limits{MaxFiles: 20000, MaxBytes: 256 << 20, MaxFileBytes: 64 << 20, MaxPackBytes: 512 << 20,
		CacheBytes: 768 << 20, Timeout: 5 * time.Minute}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxPackBytes <= 0 {
		l.MaxPackBytes = d.MaxPackBytes
	}
	if l.CacheBytes <= 0 {
		l.CacheBytes = d.CacheBytes
	}
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	return l
}

// Fetcher fetches branches into a cache of bare repositories, one per
// repository id. Fetches of one repository run one at a time (a Tree's
// WriteTar waits for a fetch of its repository to end, and the other way
// round); fetches of different repositories run in parallel. The zero
// value is not usable: Dir must be set.
type Fetcher struct {
	// Dir is the cache root: Dir/<repo id>/repo.git and known_hosts. It
	// should be on the node's disk, writable by the agent only.
	Dir string
	// Limits bound each fetch; zero fields take DefaultLimits.
	Limits Limits
	// CAFile, when set, is the PEM bundle https servers are checked
	// against instead of the system's roots (a private code host; tests).
	CAFile string
	// Git is the git binary; empty is "git" on /usr/local/bin:/usr/bin:/bin.
	Git string

	mu    sync.Mutex
	repos map[string]*sync.RWMutex // by repo id; entries are never removed
}

// repoLock is the lock of one repository's cache.
func (f *Fetcher) repoLock(id string) *sync.RWMutex {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.repos == nil {
		f.repos = map[string]*sync.RWMutex{}
	}
	l, ok := f.repos[id]
	if !ok {
		l = &sync.RWMutex{}
		f.repos[id] = l
	}
	return l
}

// Fetch fetches s's branch (depth 1) into the repository's cache and
// reads its tree. Errors wrap ErrInvalid, ErrAuth, ErrRepoNotFound,
// ErrBranchNotFound, ErrHostKey, ErrUnreachable or ErrRefused when they
// are one of those; none holds s.Token or s.SSHKey. Cancelling ctx (or
// Limits.Timeout passing) kills git and everything it started. The tree
// is checked and bounded here; no file's content is read until WriteTar.
func (f *Fetcher) Fetch(ctx context.Context, s Source) (*Tree, error) {
	if f.Dir == "" {
		return nil, errors.New("gitdeploy: Fetcher.Dir is not set")
	}
	r, err := s.check()
	if err != nil {
		return nil, err
	}
	lim := f.Limits.withDefaults()
	ctx, cancel := context.WithTimeoutCause(ctx, lim.Timeout, fmt.Errorf("%w: the fetch took longer than %s", ErrUnreachable, lim.Timeout))
	defer cancel()
	l := f.repoLock(s.RepoID)
	l.Lock()
	defer l.Unlock()

	base := filepath.Join(f.Dir, s.RepoID)
	repo := filepath.Join(base, "repo.git")
	if err := os.MkdirAll(repo, 0o700); err != nil {
		return nil, fmt.Errorf("git cache: %w", err)
	}
	home, err := os.MkdirTemp("", "sandboxd-gitdeploy-")
	if err != nil {
		return nil, fmt.Errorf("git home: %w", err)
	}
	defer os.RemoveAll(home)
	in := &invocation{git: f.gitBinary(), dir: repo, home: home, maxFile: lim.MaxPackBytes}
	in.config = f.baseConfig(r)
	if _, err := os.Stat(filepath.Join(repo, "HEAD")); err != nil {
		if _, stderr, err := in.run(ctx, 1<<16, "init", "--quiet", "--bare", "."); err != nil {
			return nil, fmt.Errorf("git cache: %w: %s", err, clip(stderr, 300))
		}
	}
	// What a fetch killed midway left (its partial pack) goes: this one
	// holds the repository's lock.
	tmps, _ := filepath.Glob(filepath.Join(repo, "objects", "pack", "tmp_*"))
	for _, t := range tmps {
		_ = os.Remove(t)
	}
	sc := newScrubber(s)
	fetchIn := *in // with the transport's secrets, for the fetch alone
	fetchIn.config = slices.Clone(in.config)
	if err := f.transport(&fetchIn, s, r, home, base); err != nil {
		return nil, err
	}
	ref := "refs/heads/" + s.Branch
	if _, stderr, err := fetchIn.run(ctx, 1<<20, "fetch", "--quiet", "--depth", "1", "--no-tags", "--no-recurse-submodules",
		"--no-auto-gc", "--no-write-fetch-head", "--", r.URL, "+"+ref+":"+ref); err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		if strings.Contains(stderr, "File too large") || strings.Contains(stderr, "signal 25") {
			return nil, fmt.Errorf("%w: the branch's objects are larger than %s", ErrRefused, size(lim.MaxPackBytes))
		}
		return nil, classify(r, stderr, sc)
	}
	tree, err := f.readTree(ctx, in, ref, lim)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		return nil, err
	}
	inv := *in
	tree.lock, tree.inv = l, &inv
	inv.home = "/nonexistent" // the fetch's home is removed on return
	if err := f.maybePrune(ctx, in, ref, lim); err != nil {
		return nil, err
	}
	return tree, nil
}

// Remove deletes a repository's cache and known host keys (the
// repository was disconnected, or its host key legitimately changed).
func (f *Fetcher) Remove(repoID string) error {
	if !repoIDRE.MatchString(repoID) || f.Dir == "" {
		return fmt.Errorf("%w: repository id %q", ErrInvalid, repoID)
	}
	l := f.repoLock(repoID)
	l.Lock()
	defer l.Unlock()
	return os.RemoveAll(filepath.Join(f.Dir, repoID))
}

func (f *Fetcher) gitBinary() string {
	if f.Git != "" {
		return f.Git
	}
	return "git"
}

// baseConfig is git's configuration for every command on a repository.
func (f *Fetcher) baseConfig(r *remote) [][2]string {
	c := [][2]string{
		{"protocol.allow", "never"},
		{"http.followRedirects", "false"},
		{"http.proxy", ""},
		{"credential.helper", ""},
		{"core.hooksPath", "/dev/null"},
		{"core.askPass", "/bin/false"},
		{"gc.auto", "0"},
		{"maintenance.auto", "false"},
		{"submodule.recurse", "false"},
		// Every fetch writes one pack, a file ulimit -f bounds.
		{"transfer.unpackLimit", "1"},
		// What arrives is checked, paths that leave a checkout refused.
		{"fetch.fsckObjects", "true"},
		{"fetch.fsck.hasDot", "error"},
		{"fetch.fsck.hasDotdot", "error"},
		{"fetch.fsck.hasDotgit", "error"},
		{"fetch.fsck.fullPathname", "error"},
		// A stalled server ends the fetch before the timeout does.
		{"http.lowSpeedLimit", "1000"},
		{"http.lowSpeedTime", "60"},
	}
	if f.CAFile != "" {
		c = append(c, [2]string{"http.sslCAInfo", f.CAFile})
	}
	if r.SSH {
		return append(c, [2]string{"protocol.ssh.allow", "always"})
	}
	return append(c, [2]string{"protocol.https.allow", "always"}, [2]string{"protocol.http.allow", "always"})
}

// transport adds what the fetch needs to reach the server: the pin and
// the token for https, the key and known hosts for ssh.
func (f *Fetcher) transport(in *invocation, s Source, r *remote, home, base string) error {
	if !r.SSH {
		in.env = append(in.env, "GIT_ALLOW_PROTOCOL=https:http")
		if s.Pin != "" {
			in.config = append(in.config, [2]string{"http.curloptResolve", r.Host + ":" + r.Port + ":" + bracket(net.ParseIP(s.Pin))})
		}
		if s.Token != "" {
			user := s.TokenUser
			if user == "" {
				user = defaultTokenUser
			}
			in.config = append(in.config, [2]string{"http.extraHeader", "Authorization: Basic " + basicAuth(user, s.Token)})
		}
		return nil
	}
	key := strings.ReplaceAll(string(s.SSHKey), "\r\n", "\n")
	if !strings.Contains(key, "-----BEGIN ") || !strings.Contains(key, "PRIVATE KEY-----") {
		return fmt.Errorf("%w: the deploy key is not a private key in OpenSSH or PEM form", ErrInvalid)
	}
	if !strings.HasSuffix(key, "\n") {
		key += "\n" // ssh refuses a key file without its last newline
	}
	// home is a fresh 0700 directory, removed when the fetch ends.
	keyFile := filepath.Join(home, "deploy_key")
	if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
		return fmt.Errorf("deploy key: %w", err)
	}
	cmd := []string{"ssh", "-F", "/dev/null", "-i", shellQuote(keyFile), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile=" + shellQuote(filepath.Join(base, "known_hosts")), "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "StrictHostKeyChecking=accept-new", "-o", "ConnectTimeout=30", "-o", "ServerAliveInterval=15",
		"-o", "IdentityAgent=none", "-o", "LogLevel=ERROR"}
	if s.Pin != "" {
		// The host's key is trusted by name, wherever the pin leads.
		cmd = append(cmd, "-o", "HostKeyAlias="+r.Host)
	}
	in.env = append(in.env, "GIT_ALLOW_PROTOCOL=ssh", "GIT_SSH_VARIANT=ssh", "GIT_SSH_COMMAND="+strings.Join(cmd, " "))
	return nil
}

// maxPacks is the number of packs (one a fetch) that makes a fetch
// prune: many small packs slow every read.
const maxPacks = 50

// maybePrune keeps the cache bounded: when the repository's objects pass
// CacheBytes or maxPacks packs, every ref but ref goes and gc drops what
// it no longer reaches (older commits, other branches, stale shallow
// roots).
func (f *Fetcher) maybePrune(ctx context.Context, in *invocation, ref string, lim Limits) error {
	size, packs, err := objectsSize(filepath.Join(in.dir, "objects"))
	if err != nil || (size <= lim.CacheBytes && packs <= maxPacks) {
		return err
	}
	refs, _, err := in.run(ctx, 1<<20, "for-each-ref", "--format=%(refname)")
	if err != nil {
		return fmt.Errorf("prune the git cache: %w", err)
	}
	for _, r := range strings.Fields(string(refs)) {
		if r != ref {
			if _, stderr, err := in.run(ctx, 1<<16, "update-ref", "-d", "--", r); err != nil {
				return fmt.Errorf("prune the git cache: %w: %s", err, clip(stderr, 300))
			}
		}
	}
	if _, stderr, err := in.run(ctx, 1<<16, "gc", "--quiet", "--prune=now"); err != nil {
		return fmt.Errorf("prune the git cache: %w: %s", err, clip(stderr, 300))
	}
	return nil
}

// objectsSize is the bytes of the regular files under a repository's
// objects directory and the number of its packs.
func objectsSize(dir string) (int64, int, error) {
	var n int64
	var packs int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
			if strings.HasSuffix(p, ".pack") {
				packs++
			}
		}
		return nil
	})
	return n, packs, err
}
