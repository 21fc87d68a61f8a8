package sftpjail_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"

	"github.com/sandboxd/sandboxd/agent/sftpjail"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestMain makes the test binary a jail child when Command starts it.
func TestMain(m *testing.M) {
	if sftpjail.Invoked() {
		os.Exit(sftpjail.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// siteUID is the unprivileged owner of the site roots here.
const siteUID = 2000777

// site is a site root on the host, laid out as a tenant could leave it.
type site struct {
	root string
	// hostOnly is a path outside the root the jail must never create.
	hostOnly string
}

func newSite(t *testing.T) site {
	t.Helper()
	parent := t.TempDir() // root-owned, as the agent's sites directory
	s := site{root: filepath.Join(parent, "site"), hostOnly: fmt.Sprintf("/etc/sbx-jail-%d", time.Now().UnixNano())}
	t.Cleanup(func() { os.Remove(s.hostOnly) })
	mk := func(p string, dir bool, content string, owner int) {
		t.Helper()
		p = filepath.Join(s.root, p)
		var err error
		if dir {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err == nil {
			err = os.Lchown(p, owner, owner)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	mk("", true, "", siteUID)
	mk("etc", true, "", siteUID)
	mk("etc/hostname", false, "jail-hostname\n", siteUID)
	mk("ro", true, "", 0)
	mk("ro-file", false, "keep\n", 0)
	for name, target := range map[string]string{
		"passwd-link":   "/etc/passwd",
		"hostname-link": "/etc/hostname",
		"up-link":       "../../../../../../etc/passwd",
		"escape-link":   s.hostOnly,
	} {
		if err := os.Symlink(target, filepath.Join(s.root, name)); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(filepath.Join(s.root, name), siteUID, siteUID); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// jail starts a jail child for root and returns a client on its pipes
// and the child; both end with the test.
func jail(t *testing.T, root string) (*sftp.Client, *exec.Cmd) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := sftpjail.Command(context.Background(), self, root, siteUID, siteUID)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case err := <-waited:
			if err != nil {
				t.Errorf("jail child: %v; stderr: %s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
			t.Error("the jail child did not end when its stdin closed")
		}
	})
	c, err := sftp.NewClientPipe(stdout, stdin)
	if err != nil {
		t.Fatalf("sftp handshake: %v; stderr: %s", err, stderr.String())
	}
	t.Cleanup(func() { c.Close() })
	return c, cmd
}

func put(c *sftp.Client, name, content string) error {
	f, err := c.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(content)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func get(c *sftp.Client, name string) (string, error) {
	f, err := c.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

// TestJailPutGet: a file written through the jail lands inside the root,
// owned by the site's uid, and reads back.
func TestJailPutGet(t *testing.T) {
	hosttest.Root(t)
	s := newSite(t)
	c, _ := jail(t, s.root)
	if err := put(c, "/hello.txt", "hello\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir("/wp-content"); err != nil {
		t.Fatal(err)
	}
	if err := put(c, "wp-content/x.php", "<?php\n"); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"hello.txt": "hello\n", "wp-content/x.php": "<?php\n"} {
		got, err := get(c, name)
		if err != nil || got != content {
			t.Fatalf("get %s: %q, %v", name, got, err)
		}
		p := filepath.Join(s.root, name)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if sys.Uid != siteUID || sys.Gid != siteUID {
			t.Errorf("%s is owned by %d:%d on the host, want %d", p, sys.Uid, sys.Gid, siteUID)
		}
		if b, _ := os.ReadFile(p); string(b) != content {
			t.Errorf("%s holds %q on the host", p, b)
		}
	}
}

// TestJailConfines: nothing outside the root can be read or written,
// whatever path or symlink the client uses, and inside it the client has
// the site user's rights only. Each case is checked on the host too.
func TestJailConfines(t *testing.T) {
	hosttest.Root(t)
	s := newSite(t)
	c, cmd := jail(t, s.root)
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("reads", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			want string // "" means the read must fail
		}{
			{"/etc/passwd", ""},
			{"../../etc/passwd", ""},
			{"/../../../etc/passwd", ""},
			{"passwd-link", ""},
			{"up-link", ""},
			{"hostname-link", "jail-hostname\n"},
			{"../etc/hostname", "jail-hostname\n"},
		} {
			got, err := get(c, tc.name)
			if tc.want == "" && err == nil {
				t.Errorf("get %s succeeded: %.40q", tc.name, got)
			}
			if tc.want != "" && (err != nil || got != tc.want) {
				t.Errorf("get %s: %q, %v; want %q", tc.name, got, err, tc.want)
			}
			if got != "" && strings.Contains(string(hostPasswd), strings.TrimSpace(got)) {
				t.Errorf("get %s returned host content", tc.name)
			}
		}
	})

	t.Run("cd up stays at the root", func(t *testing.T) {
		for _, p := range []string{"..", "/..", "../../..", "etc/../../.."} {
			if rp, err := c.RealPath(p); err != nil || rp != "/" {
				t.Errorf("realpath %s = %q, %v", p, rp, err)
			}
		}
		ents, err := c.ReadDir("../..")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if got := strings.Join(names, " "); !strings.Contains(got, "ro-file") || strings.Contains(got, "tmp") {
			t.Errorf("ls ../.. lists %s", got)
		}
	})

	t.Run("writes", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			// host is the path on the host that must be left alone.
			host string
		}{
			{"ro/new.php", filepath.Join(s.root, "ro/new.php")},
			{"ro-file", filepath.Join(s.root, "ro-file")},
			{"/ro/../ro-file", filepath.Join(s.root, "ro-file")},
		} {
			before, _ := os.ReadFile(tc.host)
			if err := put(c, tc.name, "evil"); err == nil {
				t.Errorf("put %s succeeded", tc.name)
			}
			if after, _ := os.ReadFile(tc.host); !bytes.Equal(before, after) {
				t.Errorf("%s changed on the host: %q", tc.host, after)
			}
		}
		if err := c.Chmod("ro-file", 0o666); err == nil {
			t.Error("chmod of a root-owned file succeeded")
		}
		if err := c.Chown("etc/hostname", 0, 0); err == nil {
			t.Error("chown to root succeeded")
		}
		if st, _ := os.Stat(filepath.Join(s.root, "ro-file")); st.Mode().Perm() != 0o644 {
			t.Errorf("ro-file mode is %v on the host", st.Mode())
		}
		// A write through a symlink to a host path lands inside the root.
		if err := put(c, "escape-link", "inside"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(s.hostOnly); !os.IsNotExist(err) {
			t.Fatalf("%s exists on the host: %v", s.hostOnly, err)
		}
		if b, err := os.ReadFile(filepath.Join(s.root, s.hostOnly)); err != nil || string(b) != "inside" {
			t.Fatalf("the write through the symlink is not inside the root: %q %v", b, err)
		}
		// A symlink the client makes resolves inside the root too.
		if err := c.Symlink("/etc/shadow", "shadow-link"); err != nil {
			t.Fatal(err)
		}
		if got, err := get(c, "shadow-link"); err == nil {
			t.Errorf("get shadow-link: %.40q", got)
		}
	})

	t.Run("the child's credentials on the host", func(t *testing.T) {
		pid := cmd.Process.Pid
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		status := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				status[k] = strings.Join(strings.Fields(v), " ")
			}
		}
		u := strconv.Itoa(siteUID)
		for k, want := range map[string]string{
			"Uid": u + " " + u + " " + u + " " + u, "Gid": u + " " + u + " " + u + " " + u, "Groups": "",
			"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "NoNewPrivs": "1",
		} {
			if got, ok := status[k]; !ok || got != want {
				t.Errorf("child %s is %q, want %q", k, got, want)
			}
		}
		if r, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid)); err != nil || r != s.root {
			t.Errorf("child root is %q (%v), want %s", r, err, s.root)
		}
		lim, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(lim), fmt.Sprintf("Max open files            %d                  %d", sftpjail.MaxOpenFiles, sftpjail.MaxOpenFiles)) {
			t.Errorf("open-file limit not set:\n%s", lim)
		}
	})
}

// TestJailRefuses: the child serves nothing unless it can confine itself
// as asked.
func TestJailRefuses(t *testing.T) {
	hosttest.Root(t)
	s := newSite(t)
	link := filepath.Join(filepath.Dir(s.root), "link")
	if err := os.Symlink(s.root, link); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		root     string
		uid, gid int
		want     string
	}{
		{"root uid", s.root, 0, siteUID, "never runs as root"},
		{"root gid", s.root, siteUID, 0, "never runs as root"},
		{"relative root", "site", siteUID, siteUID, "clean absolute path"},
		{"symlinked root", link, siteUID, siteUID, "open root"},
		{"missing root", s.root + "-gone", siteUID, siteUID, "open root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := sftpjail.Command(context.Background(), self, tc.root, tc.uid, tc.gid)
			// A client that would send an init packet: it must get no answer.
			cmd.Stdin = strings.NewReader("\x00\x00\x00\x05\x01\x00\x00\x00\x03")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
				t.Fatalf("exit %d (%v), want 1", code, err)
			}
			if stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stdout %q, stderr %q; want %q", stdout.String(), stderr.String(), tc.want)
			}
		})
	}
}

// TestJailWithOpenSSHClient drives the jail with /usr/bin/sftp in batch
// mode, as a person would.
func TestJailWithOpenSSHClient(t *testing.T) {
	hosttest.Root(t)
	s := newSite(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	local := t.TempDir()
	if err := os.WriteFile(filepath.Join(local, "up.txt"), []byte("uploaded\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	batch := filepath.Join(local, "batch")
	script := strings.Join([]string{
		"put " + filepath.Join(local, "up.txt") + " up.txt",
		"cd ..",
		"cd ..",
		"pwd",
		"get up.txt " + filepath.Join(local, "back.txt"),
		"-get /etc/passwd " + filepath.Join(local, "passwd"),
		"-get ../../etc/passwd " + filepath.Join(local, "passwd2"),
		"ls -1",
	}, "\n") + "\n"
	if err := os.WriteFile(batch, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := sftpjail.Command(context.Background(), self, s.root, siteUID, siteUID)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/sftp", "-b", batch, "-D", strings.Join(cmd.Args, " ")).CombinedOutput()
	if err != nil {
		t.Fatalf("sftp: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Remote working directory: /\n") {
		t.Errorf("cd .. left the root:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(local, "back.txt")); string(b) != "uploaded\n" {
		t.Errorf("get returned %q", b)
	}
	for _, f := range []string{"passwd", "passwd2"} {
		if _, err := os.Stat(filepath.Join(local, f)); !os.IsNotExist(err) {
			t.Errorf("%s was fetched: %v", f, err)
		}
	}
	st, err := os.Stat(filepath.Join(s.root, "up.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != siteUID {
		t.Errorf("up.txt owned by %d on the host", uid)
	}
}
