// Package e2e runs the built sandboxd binary the way an operator and a
// customer use it: `sandboxd dev`, `sandboxd server --join`, `sandboxd
// admin …`, and the REST API over real HTTP.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/runtime"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// binary is sandboxd and ctlBinary sandboxctl, both built for this run.
var binary, ctlBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sandboxd")
	ctlBinary = filepath.Join(dir, "sandboxctl")
	for _, b := range [][2]string{{binary, "../cmd/sandboxd"}, {ctlBinary, "../cmd/sandboxctl"}} {
		build := exec.Command("go", "build", "-o", b[0], b[1])
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", b[1]+":", err)
			os.Exit(1)
		}
	}
	code := agenttest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// sharedContainerd is the test binary's one containerd, which the dev
// systems of most tests share (each in its own namespace, as two agents
// on one host do), so that each does not start a daemon and import every
// image again. Tests of the own-containerd path (`make run`, dev --stop)
// leave it out.
func sharedContainerd(t *testing.T) []string {
	t.Helper()
	socket, _ := agenttest.Containerd(t)
	shared.socket = socket
	return []string{"--containerd-socket", socket}
}

// shared remembers the shared containerd once a test has started it.
var shared struct{ socket string }

func freeAddr(t *testing.T) string { return st.FreeAddr(t) }

// devDataDir is a data dir for `sandboxd dev` whose sites, MariaDB and
// containerd are stopped when the test ends (after the process, since
// cleanups run last-registered first and this one is registered before
// the process starts).
func devDataDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(agenttest.ShortDir(t), "d")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := agent.Purge(ctx, filepath.Join(dir, "agent"), ""); err != nil {
			t.Errorf("stop the dev system's containers: %v", err)
		}
		// On the shared containerd, Purge found the namespace through the
		// socket the agent recorded: nothing of this system is left there.
		if shared.socket != "" {
			rt, err := runtime.Connect(shared.socket, agent.Namespace(filepath.Join(dir, "agent")))
			if err != nil {
				t.Errorf("connect to the shared containerd: %v", err)
				return
			}
			defer rt.Close()
			if ids, err := rt.Containers(ctx); err != nil || len(ids) > 0 {
				t.Errorf("containers left on the shared containerd after the purge: %v %v", ids, err)
			}
		}
	})
	return dir
}

// proc is a running sandboxd process whose output is collected.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout strings.Builder
	stderr strings.Builder
	lines  chan string
	done   chan error
}

func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startCmd(t, env, binary, args...)
}

// startCmd is start for any command (sandboxd through nsenter, say).
func startCmd(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), lines: make(chan string, 100), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = writerFunc(func(b []byte) {
		p.mu.Lock()
		p.stderr.Write(b)
		p.mu.Unlock()
	})
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) { f(b); return len(b), nil }

// waitLine returns the first stdout line with prefix.
func (p *proc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return strings.TrimPrefix(l, prefix)
			}
		case err := <-p.done:
			p.done <- err
			t.Fatalf("sandboxd exited (%v) before printing %q\nstderr:\n%s", err, prefix, p.errText())
		case <-timeout:
			t.Fatalf("no %q line\nstderr:\n%s", prefix, p.errText())
		}
	}
}

func (p *proc) errText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// tailLines is how much of a failed test's process output stop logs.
const tailLines = 80

// tail is the last n lines the process wrote (stdout then stderr), but
// the access log's lines (one per request, heartbeats included).
func (p *proc) tail(n int) string {
	var keep []string
	for _, l := range strings.Split(p.output(), "\n") {
		if l != "" && !strings.Contains(l, `"msg":"request"`) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep[max(0, len(keep)-n):], "\n")
}

// output is all the process has written so far, stdout then stderr.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String() + p.stderr.String()
}

// stop sends SIGTERM and waits for a clean exit. When the test failed,
// it logs the end of what the process said first, so that a failure in
// CI can be read without running it again.
func (p *proc) stop(t *testing.T) {
	if t.Failed() {
		t.Logf("%s said (last %d lines, access log left out):\n%s", filepath.Base(p.cmd.Path), tailLines, p.tail(tailLines))
	}
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("sandboxd did not exit cleanly: %v\n%s", err, p.errText())
		}
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("sandboxd ignored SIGTERM")
	}
}

// run runs a sandboxd command to completion and returns its stdout.
func run(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%v: %s", err, stderr.String())
	}
	return string(out), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// joinToken makes a join token for a new member through the server with
// data dir dir (its operator token), waiting for the server to lead.
func joinToken(t *testing.T, dir string, role, name string) string {
	t.Helper()
	var out string
	var err error
	st.WaitFor(t, 2*time.Minute, "a join token from "+dir, func() bool {
		args := []string{"admin", "join-token", "create", "--data-dir", dir, "--role", role}
		if name != "" {
			args = append(args, "--name", name)
		}
		out, err = run(t, nil, args...)
		return err == nil
	})
	return lastLine(out)
}
