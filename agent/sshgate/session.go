package sshgate

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Bounds on what a client may set in a session.
const (
	maxEnv      = 32
	maxEnvValue = 1024
	maxTerm     = 64
	// maxDim bounds a terminal's columns and rows.
	maxDim = 10000
)

// session is one "session" channel: its requests set up a terminal and
// environment, then start exactly one shell, command or subsystem.
type session struct {
	g   *Gateway
	t   *Target
	ch  ssh.Channel
	log *slog.Logger

	tty     bool
	term    string
	size    WindowSize
	env     []string
	resize  chan WindowSize
	started bool
}

// Request payloads (RFC 4254, section 6).
type (
	ptyReq struct {
		Term             string
		Cols, Rows, W, H uint32
		Modes            string
	}
	windowChange struct{ Cols, Rows, W, H uint32 }
	envReq       struct{ Name, Value string }
	execReq      struct{ Command string }
	subsystemReq struct{ Name string }
	exitStatus   struct{ Status uint32 }
)

// serve answers the channel's requests until the client closes it; the
// process started in it is ended then, or when ctx ends.
func (s *session) serve(ctx context.Context, reqs <-chan *ssh.Request) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() {
		cancel()
		if s.started {
			<-done
		}
		s.ch.Close()
	}()
	s.resize = make(chan WindowSize, 1)
	for req := range reqs {
		ok := false
		switch req.Type {
		case "pty-req":
			var p ptyReq
			if s.started || ssh.Unmarshal(req.Payload, &p) != nil || len(p.Term) > maxTerm || !printable(p.Term) {
				break
			}
			s.tty, s.term, s.size, ok = true, p.Term, clampSize(p.Cols, p.Rows), true
		case "window-change":
			var w windowChange
			if ssh.Unmarshal(req.Payload, &w) != nil || !s.tty {
				break
			}
			s.pushResize(clampSize(w.Cols, w.Rows))
			ok = true
		case "env":
			var e envReq
			if s.started || ssh.Unmarshal(req.Payload, &e) != nil || !allowedEnv(e.Name) ||
				len(e.Value) > maxEnvValue || strings.ContainsRune(e.Value, 0) || len(s.env) >= maxEnv {
				break
			}
			s.env = append(s.env, e.Name+"="+e.Value)
			ok = true
		case "shell":
			ok = s.start(ctx, done, "shell", nil)
		case "exec":
			var e execReq
			if ssh.Unmarshal(req.Payload, &e) != nil || strings.ContainsRune(e.Command, 0) {
				break
			}
			ok = s.start(ctx, done, "exec", []string{"/bin/sh", "-c", e.Command})
		case "subsystem":
			var sub subsystemReq
			if ssh.Unmarshal(req.Payload, &sub) != nil || sub.Name != "sftp" {
				break
			}
			ok = s.start(ctx, done, "sftp", nil)
		}
		// Anything else (x11-req, auth-agent-req@openssh.com, signal,
		// keepalives) is answered no.
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
	}
}

// start runs the one shell, command or subsystem of the channel; a second
// one is refused. done is closed once it has ended and the channel is
// closed for writing.
func (s *session) start(ctx context.Context, done chan struct{}, kind string, argv []string) bool {
	if s.started {
		return false
	}
	s.started = true
	log := s.log.With("session", kind, "tty", s.tty)
	log.Info("ssh session started")
	// Owned by the session; ends when the process does, which ctx forces.
	go func() {
		defer close(done)
		code, err := s.run(ctx, kind, argv)
		switch {
		case err != nil && ctx.Err() != nil:
			log.Info("ssh session cut short", "err", err)
			return
		case err != nil:
			log.Error("ssh session failed", "err", err)
			fmt.Fprintf(s.ch.Stderr(), "sandboxd: the %s could not be run\r\n", kind)
			code = 255
		default:
			log.Info("ssh session ended", "exit_code", code)
		}
		_, _ = s.ch.SendRequest("exit-status", false, ssh.Marshal(exitStatus{Status: uint32(code)}))
		_ = s.ch.CloseWrite()
		_ = s.ch.Close()
	}()
	return true
}

func (s *session) run(ctx context.Context, kind string, argv []string) (int, error) {
	if kind == "sftp" {
		if err := s.g.cfg.Backend.SFTP(ctx, s.t, s.ch); err != nil {
			return 0, fmt.Errorf("sshgate: sftp in %s: %w", s.t.SiteID, err)
		}
		return 0, nil
	}
	env := append([]string{}, s.env...)
	if s.tty {
		// The terminal's type wins over an env request's TERM.
		env = append(env, "TERM="+s.term)
	}
	p := Process{Argv: argv, Env: env, TTY: s.tty, Stdin: s.ch, Stdout: s.ch, Stderr: s.ch.Stderr()}
	if s.tty {
		p.Size, p.Resize, p.Stderr = s.size, s.resize, s.ch
	}
	code, err := s.g.cfg.Backend.Exec(ctx, s.t, p)
	if err != nil {
		return 0, fmt.Errorf("sshgate: %s in %s: %w", kind, s.t.SiteID, err)
	}
	if code < 0 {
		code = 255
	}
	return code, nil
}

// pushResize queues a window change, replacing one not yet taken: only
// the latest size matters.
func (s *session) pushResize(w WindowSize) {
	for {
		select {
		case s.resize <- w:
			return
		default:
		}
		select {
		case <-s.resize:
		default:
		}
	}
}

func clampSize(cols, rows uint32) WindowSize {
	return WindowSize{Cols: uint16(min(cols, maxDim)), Rows: uint16(min(rows, maxDim))}
}

// allowedEnv: the variables OpenSSH clients send by default (locale) and
// the terminal type; nothing that changes how programs load or run.
func allowedEnv(name string) bool {
	return name == "TERM" || name == "LANG" || strings.HasPrefix(name, "LC_") && len(name) <= 32 && printable(name)
}

func printable(s string) bool {
	for _, r := range s {
		if r <= ' ' || r > '~' || r == '=' {
			return false
		}
	}
	return true
}
