package sshgate_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/sshgate"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestExecWithOpenSSH: `ssh site@node CMD` runs CMD through the backend,
// returns its output on the right streams and its exit code, passes
// stdin, and lets only the locale and terminal variables through.
func TestExecWithOpenSSH(t *testing.T) {
	hosttest.Root(t)
	f := startGateway(t, sshgate.Config{})
	alice := newUserKey(t, t.TempDir(), "alice")
	f.auth.allow("site_alice", alice.pub)
	o := newOpenSSH(t, f.g)
	for _, tc := range []struct {
		name, stdin, command string
		extra                []string
		stdout, stderr       string
		code                 int
	}{
		{name: "output and exit code", command: "echo hello; exit 3", stdout: "hello\n", code: 3},
		{name: "stderr apart", command: "echo out; echo err >&2", stdout: "out\n", stderr: "err\n"},
		{name: "stdin", stdin: "from the client\n", command: "cat; echo done", stdout: "from the client\ndone\n"},
		{name: "quoting is the shell's", command: `printf '%s|' "a b" c`, stdout: "a b|c|"},
		{name: "only locale variables", command: `echo "$LANG|$LC_TIME|$EVIL"`, stdout: "C.UTF-8|C|\n",
			extra: []string{"-o", "SetEnv=LANG=C.UTF-8 LC_TIME=C EVIL=1 LD_PRELOAD=/x.so"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := o.run(t, alice, "site_alice", tc.stdin, tc.command, tc.extra...)
			if stdout != tc.stdout || code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("stdout %q, stderr %q, exit %d; want %q, %q, %d", stdout, stderr, code, tc.stdout, tc.stderr, tc.code)
			}
		})
	}
	p, target := f.backend.last()
	if p.TTY || target.SiteID != "site_alice" || target.UID != siteUID || target.Cwd != "/srv/site/wordpress" {
		t.Fatalf("backend got %+v for %+v", p, target)
	}
	for _, e := range p.Env {
		if strings.HasPrefix(e, "EVIL=") || strings.HasPrefix(e, "LD_PRELOAD=") {
			t.Fatalf("env %s reached the backend", e)
		}
	}
	// Logs name the site, the client and the key, never the output or the
	// key itself.
	logs := f.logs.String()
	for _, want := range []string{"component=sshgate", "site_id=site_alice", "fingerprint=" + fingerprintOf(t, alice), "remote=127.0.0.1:", "exit_code=3"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	keyB64 := strings.Fields(string(mustRead(t, alice.path+".pub")))[1]
	for _, never := range []string{"hello", "from the client", keyB64} {
		if strings.Contains(logs, never) {
			t.Errorf("logs hold %q", never)
		}
	}
}

// TestAuthRefusedWithOpenSSH: a wrong key, an unknown user and another
// site's key are refused; a key revoked in the control plane is refused
// at the next connection.
func TestAuthRefusedWithOpenSSH(t *testing.T) {
	hosttest.Root(t)
	f := startGateway(t, sshgate.Config{})
	keys := t.TempDir()
	alice, bob, mallory := newUserKey(t, keys, "alice"), newUserKey(t, keys, "bob"), newUserKey(t, keys, "mallory")
	f.auth.allow("site_alice", alice.pub)
	f.auth.allow("site_bob", bob.pub)
	o := newOpenSSH(t, f.g)
	for _, tc := range []struct {
		name string
		key  userKey
		user string
	}{
		{"wrong key", mallory, "site_alice"},
		{"unknown user", alice, "site_nobody"},
		{"another site's key", bob, "site_alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := o.run(t, tc.key, tc.user, "", "echo in")
			if code != 255 || stdout != "" || !strings.Contains(stderr, "Permission denied (publickey)") {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
		})
	}
	if n := f.backend.calls(); n != 0 {
		t.Fatalf("the backend ran %d times for refused clients", n)
	}
	if out, _, code := o.run(t, alice, "site_alice", "", "echo in"); code != 0 || out != "in\n" {
		t.Fatalf("allowed key: exit %d, %q", code, out)
	}
	f.auth.revoke("site_alice")
	if _, stderr, code := o.run(t, alice, "site_alice", "", "echo in"); code != 255 || !strings.Contains(stderr, "Permission denied") {
		t.Fatalf("revoked key: exit %d, %q", code, stderr)
	}
}

// TestForwardingRefusedWithOpenSSH: no local (-L), remote (-R) or stdio
// (-W) forwarding reaches anything.
func TestForwardingRefusedWithOpenSSH(t *testing.T) {
	hosttest.Root(t)
	f := startGateway(t, sshgate.Config{})
	alice := newUserKey(t, t.TempDir(), "alice")
	f.auth.allow("site_alice", alice.pub)
	o := newOpenSSH(t, f.g)
	// A service the forwarding would reach; it must never get a
	// connection.
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	reached := make(chan struct{}, 1)
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			c.Close()
			reached <- struct{}{}
		}
	}()

	t.Run("-W", func(t *testing.T) {
		_, stderr, code := o.run(t, alice, "site_alice", "", "", "-W", target.Addr().String())
		if code != 255 || !strings.Contains(stderr, "administratively prohibited") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("-R", func(t *testing.T) {
		_, stderr, code := o.run(t, alice, "site_alice", "", "", "-N", "-o", "ExitOnForwardFailure=yes",
			"-R", "127.0.0.1:0:"+target.Addr().String())
		if code != 255 || !strings.Contains(stderr, "forwarding failed") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("-N -L", func(t *testing.T) {
		// The local end listens on a port of the client's; find a free one.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		local := l.Addr().String()
		l.Close()
		ctx, cancel := context.WithCancel(context.Background())
		args := append(o.opts(alice), "-p", o.port, "-N", "-L", local+":"+target.Addr().String(), "site_alice@127.0.0.1")
		cmd := o.cmd(ctx, "/usr/bin/ssh", args...)
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cancel()
			_ = cmd.Wait()
		})
		var c net.Conn
		waitFor(t, "the client's local listener", func() bool {
			c, err = net.Dial("tcp", local)
			return err == nil
		})
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("forwarded connection: %d bytes, %v; want EOF", n, err)
		}
		waitFor(t, "the refusal", func() bool { return strings.Contains(stderr.String(), "administratively prohibited") })
	})
	select {
	case <-reached:
		t.Fatal("a forwarded connection reached the target")
	default:
	}
}

// TestHostKeyPersists: the key is made once (0600 in a 0700 directory),
// kept across restarts, and is what OpenSSH sees and prints.
func TestHostKeyPersists(t *testing.T) {
	hosttest.Root(t)
	path := filepath.Join(t.TempDir(), "etc", "ssh", "ssh_host_ed25519_key")
	first := startGateway(t, sshgate.Config{HostKeyPath: path})
	fp := first.g.Fingerprint()
	if !strings.HasPrefix(fp, "SHA256:") {
		t.Fatalf("fingerprint %q", fp)
	}
	for p, mode := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		if st, err := os.Stat(p); err != nil || st.Mode() != mode {
			t.Fatalf("%s: %v %v, want %v", p, st.Mode(), err, mode)
		}
	}
	// OpenSSH reads the file and prints the same fingerprint.
	out, err := exec.Command("ssh-keygen", "-l", "-f", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fp) || !strings.Contains(string(out), "(ED25519)") {
		t.Fatalf("ssh-keygen -l: %s %v; want %s", out, err, fp)
	}
	before := mustRead(t, path)
	if err := first.g.Close(); err != nil {
		t.Fatal(err)
	}
	second := startGateway(t, sshgate.Config{HostKeyPath: path})
	if second.g.Fingerprint() != fp || !bytes.Equal(mustRead(t, path), before) {
		t.Fatalf("fingerprint after restart %s, want %s", second.g.Fingerprint(), fp)
	}
	if first.g.AuthorizedKey() != second.g.AuthorizedKey() || !strings.HasPrefix(second.g.AuthorizedKey(), "ssh-ed25519 ") {
		t.Fatalf("authorized key %q", second.g.AuthorizedKey())
	}
	// A client that trusted the first start trusts the second.
	alice := newUserKey(t, t.TempDir(), "alice")
	second.auth.allow("site_alice", alice.pub)
	o := newOpenSSH(t, first.g)
	_, port, _ := net.SplitHostPort(second.g.Addr().String())
	o.port = port
	line := strings.Replace(first.g.KnownHostsLine(first.g.Addr().String()), ":"+portOf(first.g), ":"+port, 1)
	if err := os.WriteFile(o.knownHosts, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := o.run(t, alice, "site_alice", "", "echo ok"); code != 0 || out != "ok\n" {
		t.Fatalf("after restart: exit %d, %q %q", code, out, stderr)
	}
}

// TestHostKeyRefused: a host key file that others can read, that is not a
// key, or that is not ed25519 stops the gateway from starting.
func TestHostKeyRefused(t *testing.T) {
	dir := t.TempDir()
	rsa := filepath.Join(dir, "rsa")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", rsa).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	good := filepath.Join(dir, "good")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", good).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	if err := os.Chmod(good, 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(rsa, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"readable by others", good, "mode 0600"},
		{"not a key", garbage, "garbage"},
		{"rsa", rsa, "want ed25519"},
		{"symlink", link, "regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sshgate.New(sshgate.Config{Addr: "127.0.0.1:0", HostKeyPath: tc.path, Auth: &keyAuth{}, Backend: newHostBackend(t)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSFTPWithOpenSSH: /usr/bin/sftp through the gateway reaches the
// backend's SFTP, here the real jail: files land in the site root owned
// by the site's user, and nothing outside it is reachable.
func TestSFTPWithOpenSSH(t *testing.T) {
	hosttest.Root(t)
	f := startGateway(t, sshgate.Config{})
	alice := newUserKey(t, t.TempDir(), "alice")
	f.auth.allow("site_alice", alice.pub)
	o := newOpenSSH(t, f.g)
	local := t.TempDir()
	if err := os.WriteFile(filepath.Join(local, "index.php"), []byte("<?php echo 1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	batch := filepath.Join(local, "batch")
	script := "put " + filepath.Join(local, "index.php") + " index.php\n" +
		"cd ..\npwd\n" +
		"get index.php " + filepath.Join(local, "back.php") + "\n" +
		"-get /etc/passwd " + filepath.Join(local, "passwd") + "\n"
	if err := os.WriteFile(batch, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append(o.opts(alice), "-P", o.port, "-b", batch, "site_alice@127.0.0.1")
	out, err := o.cmd(ctx, "/usr/bin/sftp", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("sftp: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Remote working directory: /\n") {
		t.Errorf("cd .. left the root:\n%s", out)
	}
	st, err := os.Stat(filepath.Join(f.root, "index.php"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != siteUID {
		t.Errorf("index.php is owned by %d on the host, want %d", uid, siteUID)
	}
	if b := mustRead(t, filepath.Join(local, "back.php")); string(b) != "<?php echo 1;\n" {
		t.Errorf("get returned %q", b)
	}
	if _, err := os.Stat(filepath.Join(local, "passwd")); !os.IsNotExist(err) {
		t.Errorf("/etc/passwd was fetched: %v", err)
	}
	if p, _ := f.backend.last(); len(p.Argv) != 1 || p.Argv[0] != "sftp" {
		t.Errorf("the backend's SFTP was not used: %+v", p)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func portOf(g *sshgate.Gateway) string {
	_, p, _ := net.SplitHostPort(g.Addr().String())
	return p
}

// fingerprintOf is the key's fingerprint as ssh-keygen prints it.
func fingerprintOf(t *testing.T, k userKey) string {
	t.Helper()
	out, err := exec.Command("ssh-keygen", "-l", "-E", "sha256", "-f", k.path+".pub").Output()
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(out))
	if len(fields) < 2 {
		t.Fatalf("ssh-keygen -l: %q", out)
	}
	return fields[1]
}
