package runtime_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/runtime"
)

// TestContainerLifecycle runs the PHP image under real containerd: a
// long-running container with limits, exec in it, its log file, stop,
// idempotent re-run and removal.
func TestContainerLifecycle(t *testing.T) {
	socket, dir := agenttest.Containerd(t)
	rt := agenttest.Runtime(t, socket)
	cat := agenttest.Catalog(t)
	ctx := context.Background()
	ref, err := cat.PHP(ctx, rt, "8.2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.PHP(ctx, rt, "5.6"); err == nil || !strings.Contains(err.Error(), "make images") {
		t.Fatalf("missing version: %v", err)
	}
	share := filepath.Join(dir, "share")
	if err := os.MkdirAll(share, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(share, 33, 33); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "c1.log")
	spec := runtime.Spec{ID: "c1", Image: ref, UID: 33, GID: 33, MemoryBytes: 128 << 20, CPUMilli: 500, Pids: 64,
		Args:    []string{"/bin/sh", "-c", "php -r 'echo PHP_VERSION, \"\\n\";'; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; id -u; touch /share/written; exec sleep 600"},
		Mounts:  []runtime.Mount{{Source: share, Target: "/share"}},
		LogPath: logPath}
	if err := rt.Run(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var log string
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(log, "\n33\n") && time.Now().Before(deadline) {
		b, _ := os.ReadFile(logPath)
		log = string(b)
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"8.2.", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "\n33\n"} {
		if !strings.Contains(log, want) {
			t.Fatalf("log lacks %q:\n%s", want, log)
		}
	}
	if _, err := os.Stat(filepath.Join(share, "written")); err != nil {
		t.Fatal("bind mount not writable:", err)
	}
	if running, _ := rt.Running(ctx, "c1"); !running {
		t.Fatal("not running")
	}
	// Run again while running: nothing changes.
	if err := rt.Run(ctx, spec); err != nil {
		t.Fatal(err)
	}
	res, err := rt.Exec(ctx, "c1", []string{"/bin/sh", "-c", "cat; echo err >&2; exit 3"}, nil, 33, 33, []byte("in"))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "in" || string(res.Stderr) != "err\n" {
		t.Fatalf("exec: %+v", res)
	}
	if err := rt.Stop(ctx, "c1", time.Second); err != nil {
		t.Fatal(err)
	}
	if running, _ := rt.Running(ctx, "c1"); running {
		t.Fatal("still running after stop")
	}
	if err := rt.Run(ctx, spec); err != nil {
		t.Fatal("restart:", err)
	}
	if err := rt.Remove(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(ctx, "c1"); err != nil {
		t.Fatal("second remove:", err)
	}
	if ok, _ := rt.Exists(ctx, "c1"); ok {
		t.Fatal("container left behind")
	}
}
