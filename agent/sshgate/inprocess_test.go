package sshgate_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/agent/sshgate"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestPTYAndWindowChange: a terminal request and later window changes
// reach the backend, with TERM from the terminal request.
func TestPTYAndWindowChange(t *testing.T) {
	hosttest.Root(t)
	f := startGateway(t, sshgate.Config{})
	key := signer(t)
	f.auth.allow("site_alice", key.PublicKey())
	c := dial(t, f.g, "site_alice", key)
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Setenv("LANG", "C.UTF-8"); err != nil {
		t.Fatal("LANG refused:", err)
	}
	if err := s.Setenv("LD_PRELOAD", "/tmp/x.so"); err == nil {
		t.Fatal("LD_PRELOAD accepted")
	}
	if err := s.RequestPty("xterm-256color", 40, 100, ssh.TerminalModes{ssh.ECHO: 0}); err != nil {
		t.Fatal(err)
	}
	stdin, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("cat"); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("typed\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "typed\n" {
		t.Fatalf("echoed %q, %v", line, err)
	}
	p, _ := f.backend.last()
	if !p.TTY || p.Size != (sshgate.WindowSize{Cols: 100, Rows: 40}) || !slices.Equal(p.Argv, []string{"/bin/sh", "-c", "cat"}) {
		t.Fatalf("backend got tty %v size %+v argv %q", p.TTY, p.Size, p.Argv)
	}
	if !slices.Contains(p.Env, "TERM=xterm-256color") || !slices.Contains(p.Env, "LANG=C.UTF-8") || len(p.Env) != 2 {
		t.Fatalf("backend got env %q", p.Env)
	}
	if err := s.WindowChange(50, 132); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-f.backend.resizes:
		if w != (sshgate.WindowSize{Cols: 132, Rows: 50}) {
			t.Fatalf("resize %+v", w)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the window change did not reach the backend")
	}
	stdin.Close()
	if err := s.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

// TestSessionRequests: one command per channel; agent and X11 forwarding,
// unknown subsystems, port forwarding and other channel types are
// refused; a shell without a command is the backend's choice.
func TestSessionRequests(t *testing.T) {
	hosttest.Root(t)
	f := startGateway(t, sshgate.Config{})
	key := signer(t)
	f.auth.allow("site_alice", key.PublicKey())
	c := dial(t, f.g, "site_alice", key)

	ch, reqs, err := c.OpenChannel("session", nil)
	if err != nil {
		t.Fatal(err)
	}
	go ssh.DiscardRequests(reqs)
	for _, tc := range []struct {
		req     string
		payload []byte
		ok      bool
	}{
		{"auth-agent-req@openssh.com", nil, false},
		{"x11-req", ssh.Marshal(struct {
			Single        bool
			Proto, Cookie string
			Screen        uint32
		}{false, "MIT-MAGIC-COOKIE-1", "00", 0}), false},
		{"subsystem", ssh.Marshal(struct{ Name string }{"shell"}), false},
		{"env", ssh.Marshal(struct{ Name, Value string }{"PATH", "/tmp"}), false},
		{"env", ssh.Marshal(struct{ Name, Value string }{"LC_ALL", "C"}), true},
		{"exec", ssh.Marshal(struct{ Command string }{"cat"}), true},
		{"exec", ssh.Marshal(struct{ Command string }{"echo second"}), false},
		{"shell", nil, false},
		{"subsystem", ssh.Marshal(struct{ Name string }{"sftp"}), false},
		{"pty-req", ssh.Marshal(struct {
			Term             string
			Cols, Rows, W, H uint32
			Modes            string
		}{"xterm", 80, 24, 0, 0, ""}), false},
	} {
		ok, err := ch.SendRequest(tc.req, true, tc.payload)
		if err != nil || ok != tc.ok {
			t.Errorf("%s: %v (%v), want %v", tc.req, ok, err, tc.ok)
		}
	}
	ch.Close()

	if _, _, err := c.OpenChannel("direct-tcpip", ssh.Marshal(struct {
		Host     string
		Port     uint32
		OrigHost string
		OrigPort uint32
	}{"127.0.0.1", 22, "127.0.0.1", 1})); !isProhibited(err) {
		t.Errorf("direct-tcpip: %v", err)
	}
	if _, _, err := c.OpenChannel("x11", nil); !isProhibited(err) {
		t.Errorf("x11 channel: %v", err)
	}
	if _, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
		t.Error("tcpip-forward accepted")
	}

	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	s.Stdin, s.Stdout = strings.NewReader("echo from-the-shell\n"), &out
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil || out.String() != "from-the-shell\n" {
		t.Fatalf("shell: %q %v", out.String(), err)
	}
	if p, _ := f.backend.last(); len(p.Argv) != 0 {
		t.Fatalf("a shell came to the backend as %q", p.Argv)
	}
}

func isProhibited(err error) bool {
	var oe *ssh.OpenChannelError
	return errors.As(err, &oe) && oe.Reason == ssh.Prohibited
}

// TestLimits: the version string, the handshake deadline, the caps on
// connections per address and sessions per connection, and idleness.
func TestLimits(t *testing.T) {
	hosttest.Root(t)
	f := startGateway(t, sshgate.Config{HandshakeTimeout: 300 * time.Millisecond, MaxConnsPerAddr: 2,
		MaxSessionsPerConn: 2, IdleTimeout: 2 * time.Second, MaxAuthTries: 3})
	key := signer(t)
	f.auth.allow("site_alice", key.PublicKey())

	t.Run("version and handshake deadline", func(t *testing.T) {
		raw, err := net.Dial("tcp", f.g.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		_ = raw.SetDeadline(time.Now().Add(20 * time.Second))
		line, err := bufio.NewReader(raw).ReadString('\n')
		if err != nil || line != "SSH-2.0-sandboxd\r\n" {
			t.Fatalf("banner %q, %v", line, err)
		}
		// Say nothing: the gateway hangs up at its deadline.
		start := time.Now()
		if _, err := io.Copy(io.Discard, raw); err != nil {
			t.Fatalf("read: %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("closed after %v", d)
		}
	})

	t.Run("auth tries", func(t *testing.T) {
		var keys []ssh.Signer
		for range 6 {
			keys = append(keys, signer(t))
		}
		before := f.auth.callCount()
		_, err := ssh.Dial("tcp", f.g.Addr().String(), &ssh.ClientConfig{
			User: "site_alice", Auth: []ssh.AuthMethod{ssh.PublicKeys(keys...)},
			HostKeyCallback: ssh.FixedHostKey(f.g.HostKey()), Timeout: 20 * time.Second,
		})
		if err == nil {
			t.Fatal("unknown keys accepted")
		}
		if n := f.auth.callCount() - before; n > 3 {
			t.Fatalf("%d keys were tried, want at most 3", n)
		}
	})

	t.Run("sessions per connection", func(t *testing.T) {
		c := dial(t, f.g, "site_alice", key)
		var chans []ssh.Channel
		for range 2 {
			ch, reqs, err := c.OpenChannel("session", nil)
			if err != nil {
				t.Fatal(err)
			}
			go ssh.DiscardRequests(reqs)
			chans = append(chans, ch)
		}
		var oe *ssh.OpenChannelError
		if _, _, err := c.OpenChannel("session", nil); !errors.As(err, &oe) || oe.Reason != ssh.ResourceShortage {
			t.Fatalf("third session: %v", err)
		}
		chans[0].Close()
		waitFor(t, "a session slot", func() bool {
			ch, reqs, err := c.OpenChannel("session", nil)
			if err != nil {
				return false
			}
			go ssh.DiscardRequests(reqs)
			ch.Close()
			return true
		})
	})

	t.Run("connections per address and idleness", func(t *testing.T) {
		a := dial(t, f.g, "site_alice", key)
		b := dial(t, f.g, "site_alice", key)
		// A third from the same address is closed before the banner.
		raw, err := net.Dial("tcp", f.g.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		_ = raw.SetDeadline(time.Now().Add(20 * time.Second))
		if n, err := raw.Read(make([]byte, 64)); n != 0 || err == nil {
			t.Fatalf("third connection got %d bytes, %v", n, err)
		}
		// Idle connections are closed, which frees their slots.
		waited := make(chan error, 2)
		go func() { waited <- a.Wait() }()
		go func() { waited <- b.Wait() }()
		for range 2 {
			select {
			case <-waited:
			case <-time.After(20 * time.Second):
				t.Fatal("an idle connection stayed open")
			}
		}
		dial(t, f.g, "site_alice", key)
	})
	if !strings.Contains(f.logs.String(), "too many connections") {
		t.Error("the refused connection was not logged")
	}
}

// TestCloseEndsSessions: Close ends running sessions (their context) and
// returns; the client sees its connection end.
func TestCloseEndsSessions(t *testing.T) {
	hosttest.Root(t)
	f := startGateway(t, sshgate.Config{})
	key := signer(t)
	f.auth.allow("site_alice", key.PublicKey())
	c := dial(t, f.g, "site_alice", key)
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StdinPipe(); err != nil { // held open: cat never ends by itself
		t.Fatal(err)
	}
	if err := s.Start("cat"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the backend to run", func() bool { return f.backend.calls() == 1 })
	closed := make(chan error, 1)
	go func() { closed <- f.g.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return")
	}
	if err := s.Wait(); err == nil {
		t.Fatal("the session ended cleanly after Close")
	}
}
