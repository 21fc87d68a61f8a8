package sshgate_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/agent/sftpjail"
	"github.com/sandboxd/sandboxd/agent/sshgate"
)

// TestMain makes the test binary a jail child when the SFTP backend
// starts it.
func TestMain(m *testing.M) {
	if sftpjail.Invoked() {
		os.Exit(sftpjail.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// siteUID owns the test sites' roots.
const siteUID = 2000555

// keyAuth is the test Authorizer: the keys each user (site id) accepts.
type keyAuth struct {
	mu    sync.Mutex
	keys  map[string][]ssh.PublicKey
	root  string
	calls int
}

func (a *keyAuth) allow(user string, k ssh.PublicKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.keys == nil {
		a.keys = map[string][]ssh.PublicKey{}
	}
	a.keys[user] = append(a.keys[user], k)
}

func (a *keyAuth) revoke(user string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.keys, user)
}

func (a *keyAuth) callCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

func (a *keyAuth) AuthorizeSSH(_ context.Context, user string, key ssh.PublicKey, _ net.Addr) (*sshgate.Target, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	for _, k := range a.keys[user] {
		if bytes.Equal(k.Marshal(), key.Marshal()) {
			return &sshgate.Target{SiteID: user, Container: "c-" + user, UID: siteUID, GID: siteUID,
				Root: a.root, Cwd: "/srv/site/wordpress"}, nil
		}
	}
	return nil, errors.New("not allowed")
}

// hostBackend is the test Backend: it runs commands on the host with
// os/exec in a temporary directory (test only: the agent runs them in
// the site's container) and SFTP with the real jail.
type hostBackend struct {
	dir string

	mu      sync.Mutex
	procs   []sshgate.Process
	targets []sshgate.Target
	// resizes receives the window changes the backend saw.
	resizes chan sshgate.WindowSize
}

func newHostBackend(t *testing.T) *hostBackend {
	return &hostBackend{dir: t.TempDir(), resizes: make(chan sshgate.WindowSize, 16)}
}

func (b *hostBackend) record(t *sshgate.Target, p sshgate.Process) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.procs = append(b.procs, p)
	b.targets = append(b.targets, *t)
}

func (b *hostBackend) calls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.procs)
}

func (b *hostBackend) last() (sshgate.Process, sshgate.Target) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.procs[len(b.procs)-1], b.targets[len(b.targets)-1]
}

func (b *hostBackend) Exec(ctx context.Context, t *sshgate.Target, p sshgate.Process) (int, error) {
	b.record(t, p)
	argv := p.Argv
	if len(argv) == 0 {
		argv = []string{"/bin/sh"}
	}
	done := make(chan struct{})
	defer close(done)
	if p.Resize != nil {
		go func() {
			for {
				select {
				case w := <-p.Resize:
					b.resizes <- w
				case <-done:
					return
				}
			}
		}()
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = b.dir
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, p.Env...)
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() {
		_, _ = io.Copy(stdin, p.Stdin)
		stdin.Close()
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return ee.ExitCode(), nil
	}
	return 0, err
}

func (b *hostBackend) SFTP(ctx context.Context, t *sshgate.Target, rw io.ReadWriteCloser) error {
	b.record(t, sshgate.Process{Argv: []string{"sftp"}})
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := sftpjail.Command(ctx, self, t.Root, int(t.UID), int(t.GID))
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = rw, rw, &stderr
	if err := cmd.Run(); err != nil {
		return errors.New(err.Error() + ": " + stderr.String())
	}
	return nil
}

// syncBuffer collects log output written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fixture is a running gateway with its fakes and a site root.
type fixture struct {
	g       *sshgate.Gateway
	auth    *keyAuth
	backend *hostBackend
	logs    *syncBuffer
	root    string
}

// startGateway serves cfg (Addr, HostKeyPath, Auth, Backend and Logger
// filled in where empty) on 127.0.0.1 until the test ends.
func startGateway(t *testing.T, cfg sshgate.Config) *fixture {
	t.Helper()
	parent := t.TempDir()
	f := &fixture{auth: &keyAuth{}, backend: newHostBackend(t), logs: &syncBuffer{}, root: filepath.Join(parent, "site")}
	if err := os.Mkdir(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f.root, siteUID, siteUID); err != nil {
		t.Fatal(err)
	}
	f.auth.root = f.root
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.HostKeyPath == "" {
		cfg.HostKeyPath = filepath.Join(t.TempDir(), "keys", "ssh_host_ed25519_key")
	}
	if cfg.Auth == nil {
		cfg.Auth = f.auth
	}
	if cfg.Backend == nil {
		cfg.Backend = f.backend
	}
	cfg.Logger = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g, err := sshgate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.g = g
	served := make(chan error, 1)
	go func() { served <- g.Serve() }()
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return f
}

// userKey is a client key made by ssh-keygen, as a user would.
type userKey struct {
	path string
	pub  ssh.PublicKey
}

func newUserKey(t *testing.T, dir, name string) userKey {
	t.Helper()
	p := filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	b, err := os.ReadFile(p + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return userKey{path: p, pub: pub}
}

// openssh runs the OpenSSH client tools against a gateway, trusting only
// its host key.
type openssh struct {
	home       string
	knownHosts string
	port       string
}

func newOpenSSH(t *testing.T, g *sshgate.Gateway) *openssh {
	t.Helper()
	home := t.TempDir()
	_, port, _ := net.SplitHostPort(g.Addr().String())
	o := &openssh{home: home, knownHosts: filepath.Join(home, "known_hosts"), port: port}
	if err := os.WriteFile(o.knownHosts, []byte(g.KnownHostsLine(g.Addr().String())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return o
}

// opts are the options every invocation gets: no config, no agent, no
// other key, strict host key checking.
func (o *openssh) opts(key userKey) []string {
	return []string{"-F", "/dev/null", "-i", key.path, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile=" + o.knownHosts, "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=20"}
}

// cmd builds a client command (ssh or sftp) with a clean environment.
func (o *openssh) cmd(ctx context.Context, tool string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, tool, args...)
	c.Env = []string{"HOME=" + o.home, "PATH=/usr/bin:/bin"}
	c.WaitDelay = 5 * time.Second
	return c
}

// run runs `ssh [extra] user@127.0.0.1 command` with stdin and returns
// its output and exit code.
func (o *openssh) run(t *testing.T, key userKey, user, stdin, command string, extra ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append(o.opts(key), "-p", o.port)
	args = append(append(args, extra...), user+"@127.0.0.1", command)
	c := o.cmd(ctx, "/usr/bin/ssh", args...)
	c.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	err := c.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("ssh: %v", err)
	}
	return out.String(), errOut.String(), c.ProcessState.ExitCode()
}

// signer is an in-process client key.
func signer(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dial opens an authenticated x/crypto client connection as user.
func dial(t *testing.T, g *sshgate.Gateway, user string, key ssh.Signer) *ssh.Client {
	t.Helper()
	c, err := ssh.Dial("tcp", g.Addr().String(), &ssh.ClientConfig{
		User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.FixedHostKey(g.HostKey()), Timeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
