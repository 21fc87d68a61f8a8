// Package gittest runs real git servers for tests: smart HTTP over TLS
// (git http-backend behind net/http/cgi, optionally asking for a token)
// and Debian's sshd with one authorized deploy key, each on loopback,
// stopped and removed when the test ends.
package gittest

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// T is what the servers need of a test: a testing.TB, or the stand-in a
// benchmark command brings.
type T interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// RealGit is the git the servers and the shim run; missing, the test
// fails.
func RealGit(t T) string {
	t.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is needed: %v", err)
	}
	return p
}

// git runs git in dir for the test's own repositories.
func Git(t T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(RealGit(t), args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com", "GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Repo is a repository the test servers serve: a work tree to
// commit in and the bare repository they read.
type Repo struct {
	t    T
	Work string
	Bare string
}

// NewRepo makes root/name.git with one commit on main holding
// files (path → content; a "->" prefix makes a symbolic link).
func NewRepo(t T, root, name string, files map[string]string) *Repo {
	t.Helper()
	r := &Repo{t: t, Work: filepath.Join(t.TempDir(), name), Bare: filepath.Join(root, name+".git")}
	Git(t, filepath.Dir(r.Work), "init", "-q", "-b", "main", r.Work)
	r.Commit("first", files)
	Git(t, root, "init", "-q", "--bare", r.Bare)
	r.Push("main")
	return r
}

// commit writes files into the work tree and commits them.
func (r *Repo) Commit(msg string, files map[string]string) {
	r.t.Helper()
	for p, content := range files {
		full := filepath.Join(r.Work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			r.t.Fatal(err)
		}
		_ = os.Remove(full)
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			mode := os.FileMode(0o644)
			if strings.HasSuffix(p, ".sh") {
				mode = 0o755
			}
			err = os.WriteFile(full, []byte(content), mode)
		}
		if err != nil {
			r.t.Fatal(err)
		}
	}
	Git(r.t, r.Work, "add", "-A")
	Git(r.t, r.Work, "commit", "-q", "--allow-empty", "-m", msg)
}

// push sends the work tree's branch to the bare repository; it returns
// the branch's commit.
func (r *Repo) Push(branch string) string {
	r.t.Helper()
	Git(r.t, r.Work, "push", "-q", "--force", r.Bare, "HEAD:refs/heads/"+branch)
	return Git(r.t, r.Bare, "rev-parse", "refs/heads/"+branch)
}

// HTTPServer is a smart-HTTP git server over TLS: git http-backend behind
// net/http/cgi, asking for a token when one is set.
type HTTPServer struct {
	Root   string // GIT_PROJECT_ROOT
	CAFile string // the server certificate, for Fetcher.CAFile
	Port   string
	srv    *httptest.Server

	mu       sync.Mutex
	token    string   // the token asked for; empty: none
	requests int      // requests answered
	leaks    []string // processes whose argv held a secret, seen while a request was served
	secrets  []string // what the argv scan looks for
	hook     func(*http.Request)
}

// setHook has every request go through hook first (nil: none).
func (s *HTTPServer) SetHook(hook func(*http.Request)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = hook
}

func NewHTTPServer(t T) *HTTPServer {
	t.Helper()
	s := &HTTPServer{Root: t.TempDir()}
	backend := &cgi.Handler{Path: RealGit(t), Args: []string{"http-backend"}, Dir: s.Root, Stderr: io.Discard,
		Env: []string{"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests++
		token, secrets, hook := s.token, s.secrets, s.hook
		s.mu.Unlock()
		if hook != nil {
			hook(r)
		}
		// The client's git processes are alive now, waiting for this
		// answer: whatever their argv holds, ps would show.
		if leaks := ArgvHolding(secrets); len(leaks) > 0 {
			s.mu.Lock()
			s.leaks = append(s.leaks, leaks...)
			s.mu.Unlock()
		}
		if token != "" {
			user, pass, ok := r.BasicAuth()
			if !ok || pass != token || user == "" {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		backend.ServeHTTP(w, r)
	}))
	cert, certPEM := testCert(t)
	s.CAFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(s.CAFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	s.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	_, s.Port, _ = net.SplitHostPort(s.srv.Listener.Addr().String())
	return s
}

// url is name's URL at host (127.0.0.1, or a name a pin leads here).
func (s *HTTPServer) URL(host, name string) string {
	return "https://" + host + ":" + s.Port + "/" + name + ".git"
}

func (s *HTTPServer) RequireToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
	s.secrets = []string{token, base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))}
}

func (s *HTTPServer) Stats() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, append([]string(nil), s.leaks...)
}

// ArgvHolding lists the processes of this machine whose command line
// holds one of secrets.
func ArgvHolding(secrets []string) []string {
	if len(secrets) == 0 {
		return nil
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				out = append(out, fmt.Sprintf("%s: %q", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
			}
		}
	}
	return out
}

// testCert is a self-signed certificate for repo.test and 127.0.0.1.
func testCert(t T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "repo.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"repo.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert, certPEM
}

// SSHServer is Debian's sshd on 127.0.0.1, letting the holder of one
// deploy key run git-upload-pack as the current user.
type SSHServer struct {
	Port    string
	User    string
	HostKey string
	// AuthorizedKeys is sshd's authorized_keys file: a test may rewrite
	// it (sshd reads it at every connection).
	AuthorizedKeys string // public half, as known_hosts writes it
}

// Keygen makes an ed25519 key pair in dir: the private key's file and the
// public half.
func Keygen(t T, dir, name string) (string, []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	pub, err := os.ReadFile(p + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return p, pub
}

// NewSSHServer starts sshd with its own configuration, host key and
// authorized key (authorized's public half) in a temporary directory;
// the test's end stops it and removes them.
func NewSSHServer(t T, authorized []byte) *SSHServer {
	t.Helper()
	sshd := "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		t.Fatalf("openssh-server is needed: %v", err)
	}
	// sshd started as root wants its (empty) privilege separation
	// directory, which the system's service makes at boot.
	if os.Geteuid() == 0 {
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hostKey, hostPub := Keygen(t, dir, "host_key")
	auth := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(auth, authorized, 0o600); err != nil {
		t.Fatal(err)
	}
	for attempt := 0; ; attempt++ {
		port := freePort(t)
		cfg := filepath.Join(dir, "sshd_config")
		conf := strings.Join([]string{
			"ListenAddress 127.0.0.1:" + port,
			"HostKey " + hostKey,
			"AuthorizedKeysFile " + auth,
			"AllowUsers " + u.Username,
			"StrictModes no",
			"UsePAM no",
			"PasswordAuthentication no",
			"KbdInteractiveAuthentication no",
			"PubkeyAuthentication yes",
			"PermitRootLogin prohibit-password",
			"PidFile none",
			"MaxStartups 50",
			"LogLevel INFO",
		}, "\n") + "\n"
		if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(sshd, "-f", cfg, "-D", "-e")
		// A group of its own: the cleanup ends its per-connection
		// children with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("sshd: %v", err)
		}
		ready, log := waitListening(stderr, port)
		if ready {
			t.Cleanup(func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				_ = cmd.Wait()
			})
			f := strings.Fields(string(hostPub))
			return &SSHServer{Port: port, User: u.Username, HostKey: f[0] + " " + f[1], AuthorizedKeys: auth}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if attempt == 2 || !strings.Contains(log, "Address already in use") {
			t.Fatalf("sshd did not start: %s", log)
		}
	}
}

// waitListening reads sshd's log until it listens (then drains the rest
// in the background until sshd exits) or 10 s pass.
func waitListening(stderr interface{ Read([]byte) (int, error) }, port string) (bool, string) {
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody waits any more: drain
			}
		}
		close(lines)
	}()
	var log strings.Builder
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return false, log.String()
			}
			log.WriteString(l + "\n")
			if strings.Contains(l, "Server listening on 127.0.0.1 port "+port) {
				return true, log.String()
			}
		case <-deadline:
			return false, log.String() + "(no answer in 10 s)"
		}
	}
}

func freePort(t T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// url is the ssh URL of a bare repository at host.
func (s *SSHServer) URL(host, bare string) string {
	return "ssh://" + s.User + "@" + host + ":" + s.Port + bare
}

// GitShim is a git in front of the real one that records every argv it
// is started with, one line each.
func GitShim(t T) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	bin, log = filepath.Join(dir, "git"), filepath.Join(dir, "argv.log")
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '" + log + "'\nexec '" + RealGit(t) + "' \"$@\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}
