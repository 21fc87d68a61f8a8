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
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/runtime"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/ids"
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
	code := agenttest.Run(m, stopShared)
	if shared.namespace != "" {
		if err := runtime.RemoveNamespaceCgroups(shared.namespace); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// sharedContainerd is the test binary's one containerd and namespace,
// which the dev systems of most tests share (as agents of one host may),
// so that each does not start a daemon and import and unpack every image
// again; each system's containers carry its own scope. Tests of the
// own-containerd path (`make run`, dev --stop) leave it out.
func sharedContainerd(t *testing.T) []string {
	t.Helper()
	socket, _ := agenttest.Containerd(t)
	shared.once.Do(func() {
		shared.socket, shared.namespace = socket, "sbx-e2e-"+ids.Random(4)
		// The images go in before any system starts: systems started
		// at once would otherwise import the same image together.
		rt, err := runtime.Connect(socket, shared.namespace)
		if err != nil {
			shared.err = err
			return
		}
		defer rt.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		shared.err = agenttest.Catalog(t).EnsureAll(ctx, rt)
	})
	if shared.err != nil {
		t.Fatalf("import the images into the shared namespace: %v", shared.err)
	}
	return []string{"--containerd-socket", socket, "--containerd-namespace", shared.namespace}
}

// shared is the shared containerd and namespace once a test has set
// them up.
var shared struct {
	once              sync.Once
	socket, namespace string
	err               error
}

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
			rt, err := runtime.ConnectScoped(shared.socket, shared.namespace, agent.ContainerScope(filepath.Join(dir, "agent")))
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
	// A node's SSH gateway binds port 2222 by default: tests run side by
	// side, so each takes a port of its own unless it names one.
	if len(args) > 0 && (args[0] == "dev" || args[0] == "agent") && !slices.Contains(args, "--ssh-addr") {
		args = append(args, "--ssh-addr", "127.0.0.1:0")
	}
	return startCmd(t, env, binary, args...)
}

// startCmd is start for any command (sandboxd through nsenter, say).
func startCmd(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p, err := spawn(env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(t) })
	return p
}

// spawn starts a process whose output is collected; stopping it is the
// caller's.
func spawn(env []string, name string, args ...string) (*proc, error) {
	p := &proc{cmd: exec.Command(name, args...), lines: make(chan string, 100), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = writerFunc(func(b []byte) {
		p.mu.Lock()
		p.stderr.Write(b)
		p.mu.Unlock()
	})
	if err := p.cmd.Start(); err != nil {
		return nil, err
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
	return p, nil
}

type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) { f(b); return len(b), nil }

// waitLine returns the first stdout line with prefix.
func (p *proc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	l, err := p.line(prefix, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// line returns the first stdout line with prefix, without it.
func (p *proc) line(prefix string, wait time.Duration) (string, error) {
	timeout := time.After(wait)
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return strings.TrimPrefix(l, prefix), nil
			}
		case err := <-p.done:
			p.done <- err
			return "", fmt.Errorf("sandboxd exited (%v) before printing %q\nstderr:\n%s", err, prefix, p.errText())
		case <-timeout:
			return "", fmt.Errorf("no %q line\nstderr:\n%s", prefix, p.errText())
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
	if err := p.terminate(); err != nil {
		t.Error(err)
	}
}

// terminate sends SIGTERM and waits for a clean exit (SIGKILL after 20s).
func (p *proc) terminate() error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			return fmt.Errorf("sandboxd did not exit cleanly: %v\n%s", err, p.errText())
		}
		return nil
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		// Gone before anyone cleans up after it (a purge takes no lock).
		err := <-p.done
		p.done <- err
		return fmt.Errorf("sandboxd ignored SIGTERM")
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
