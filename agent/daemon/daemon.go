// Package daemon makes sure a containerd daemon answers: it uses one that
// already listens on the configured socket, or starts a private one whose
// root, state and socket live under the agent's data directory, so a
// single binary is enough on a machine where no containerd service runs.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd"
)

// Daemon is a containerd this agent started, or nil when one was running.
type Daemon struct {
	cmd  *exec.Cmd
	done chan error
	// Socket is the address clients dial.
	Socket string
}

// SystemSocket is where a containerd service listens by default.
const SystemSocket = "/run/containerd/containerd.sock"

// Answers reports whether a containerd daemon serves socket.
func Answers(ctx context.Context, socket string) bool {
	if _, err := os.Stat(socket); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := containerd.New(socket, containerd.WithTimeout(2*time.Second))
	if err != nil {
		return false
	}
	defer c.Close()
	ok, err := c.IsServing(ctx)
	return err == nil && ok
}

// Ensure returns the socket of a serving containerd: socket itself when a
// daemon answers there; otherwise it starts one with its state under dir
// (a socket in dir). The returned Daemon is nil when nothing was started.
func Ensure(ctx context.Context, socket, dir string, log *slog.Logger) (string, *Daemon, error) {
	if socket != "" && Answers(ctx, socket) {
		return socket, nil, nil
	}
	own := filepath.Join(dir, "containerd.sock")
	if len(own) > 100 {
		return "", nil, fmt.Errorf("containerd socket path %s is too long for a unix socket; use a shorter data dir", own)
	}
	if Answers(ctx, own) {
		// Left running by an earlier agent on this data dir: reuse it,
		// its shims still hold our sites.
		return own, nil, nil
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return "", nil, fmt.Errorf("containerd is not installed (deploy/dev/install-deps.sh installs it): %w", err)
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", nil, err
	}
	config := filepath.Join(dir, "config.toml")
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %q

[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), own, own+".ttrpc")
	if err := os.WriteFile(config, []byte(conf), 0o600); err != nil {
		return "", nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--config", config)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C to the agent's terminal must not
	// reach containerd before the agent has shut down cleanly. The daemon
	// outlives the agent on purpose (the shims keep sites running).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return "", nil, fmt.Errorf("start containerd: %w", err)
	}
	logFile.Close()
	if err := os.WriteFile(filepath.Join(dir, "containerd.pid"), []byte(fmt.Sprint(cmd.Process.Pid)), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return "", nil, err
	}
	d := &Daemon{cmd: cmd, done: make(chan error, 1), Socket: own}
	go func() { d.done <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for !Answers(ctx, own) {
		select {
		case err := <-d.done:
			b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			return "", nil, fmt.Errorf("containerd exited (%v): %s", err, lastLines(string(b), 10))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return "", nil, errors.New("containerd did not answer within 20s")
		}
	}
	log.Info("started containerd", "component", "daemon", "socket", own, "pid", cmd.Process.Pid)
	return own, d, nil
}

// Stop ends a daemon this agent started. Running sites stop with it.
func (d *Daemon) Stop() error {
	if d == nil {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// isDaemonOf reports whether pid is a containerd started with dir's
// config file.
func isDaemonOf(pid int, dir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	return len(args) > 0 && filepath.Base(args[0]) == "containerd" && slices.Contains(args, filepath.Join(dir, "config.toml"))
}

// StopIn stops a containerd that an agent started under dir, whichever
// process started it, and waits for it to exit. No daemon is fine.
func StopIn(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "containerd.pid"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 1 {
		return fmt.Errorf("bad pid file in %s", dir)
	}
	// The pid file outlives its daemon (a reboot): signal the process only
	// while it is still that containerd, run with this dir's config.
	if !isDaemonOf(pid, dir) {
		return os.Remove(filepath.Join(dir, "containerd.pid"))
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 200; i++ {
		if syscall.Kill(pid, 0) != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if syscall.Kill(pid, 0) == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return os.Remove(filepath.Join(dir, "containerd.pid"))
}
