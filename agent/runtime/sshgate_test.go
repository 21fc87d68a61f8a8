package runtime_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/sshgate"
)

// containerBackend is how the agent is meant to back the SSH gateway's
// sessions with ExecInteractive (SFTP is sftpjail's, not tested here).
type containerBackend struct{ rt *runtime.Runtime }

func (b containerBackend) Exec(ctx context.Context, t *sshgate.Target, p sshgate.Process) (int, error) {
	argv := p.Argv
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-c", "[ -x /bin/bash ] && exec /bin/bash -l; exec /bin/sh -l"}
	}
	var resize chan runtime.WindowSize
	if p.Resize != nil {
		resize = make(chan runtime.WindowSize, 1)
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case w := <-p.Resize:
					select {
					case resize <- runtime.WindowSize(w):
					case <-done:
						return
					}
				case <-done:
					return
				}
			}
		}()
	}
	return b.rt.ExecInteractive(ctx, t.Container, runtime.InteractiveProcess{
		Argv: argv, Env: p.Env, UID: t.UID, GID: t.GID, Cwd: t.Cwd, TTY: p.TTY,
		Size: runtime.WindowSize(p.Size), Resize: resize, Stdin: p.Stdin, Stdout: p.Stdout, Stderr: p.Stderr,
	})
}

func (containerBackend) SFTP(context.Context, *sshgate.Target, io.ReadWriteCloser) error {
	return errors.New("not in this test")
}

type oneSite struct{ key ssh.PublicKey }

func (a oneSite) AuthorizeSSH(_ context.Context, user string, key ssh.PublicKey, _ net.Addr) (*sshgate.Target, error) {
	if user != "site_abc" || !bytes.Equal(key.Marshal(), a.key.Marshal()) {
		return nil, errors.New("refused")
	}
	return &sshgate.Target{SiteID: user, Container: "site", UID: siteUID, GID: siteUID, Cwd: "/tmp"}, nil
}

// TestSSHGatewayIntoContainer: an SSH client reaches a terminal in the
// site's container through the gateway, as the site's user, with its
// size and TERM; dropping the connection kills what it ran.
func TestSSHGatewayIntoContainer(t *testing.T) {
	rt := siteContainer(t, "site")
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	g, err := sshgate.New(sshgate.Config{Addr: "127.0.0.1:0", HostKeyPath: filepath.Join(t.TempDir(), "host_key"),
		Auth: oneSite{key: key.PublicKey()}, Backend: containerBackend{rt: rt}})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve() }()
	t.Cleanup(func() {
		g.Close()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	dial := func() *ssh.Client {
		c, err := ssh.Dial("tcp", g.Addr().String(), &ssh.ClientConfig{User: "site_abc",
			Auth: []ssh.AuthMethod{ssh.PublicKeys(key)}, HostKeyCallback: ssh.FixedHostKey(g.HostKey()), Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	c := dial()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RequestPty("xterm-256color", 40, 100, ssh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s.Stdout = &out
	err = s.Run(`stty size; id -u; echo "$TERM"; pwd; exit 4`)
	var exit *ssh.ExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 4 {
		t.Fatalf("exit: %v", err)
	}
	got := strings.ReplaceAll(out.String(), "\r", "")
	if got != "40 100\n2000321\nxterm-256color\n/tmp\n" {
		t.Fatalf("output %q", got)
	}

	// A command left running when its client goes away is killed.
	c2 := dial()
	s2, err := c2.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start("sleep 4646 & sleep 4747"); err != nil {
		t.Fatal(err)
	}
	procs := func() string {
		res, err := rt.Exec(context.Background(), "site", []string{"sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done`}, nil, siteUID, siteUID, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}
	waitFor(t, "the command to run", func() bool { return strings.Contains(procs(), "sleep 4747") })
	c2.Close()
	waitFor(t, "the command to be killed", func() bool {
		p := procs()
		return !strings.Contains(p, "sleep 4646") && !strings.Contains(p, "sleep 4747")
	})
}
