package runtime_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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
		Args:    []string{"/bin/sh", "-c", "php -r 'echo PHP_VERSION, \"\\n\";'; touch /share/written; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; id -u; exec sleep 600"},
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

// TestConfinedContainer checks what every tenant container gets: a
// seccomp filter, no privileges, a read-only root with only its mounts
// writable, a log capped by the logger binary, and bounded exec output.
func TestConfinedContainer(t *testing.T) {
	socket, dir := agenttest.Containerd(t)
	rt := agenttest.Runtime(t, socket)
	ctx := context.Background()
	ref, err := agenttest.Catalog(t).PHP(ctx, rt, "8.2")
	if err != nil {
		t.Fatal(err)
	}
	share := filepath.Join(dir, "share")
	if err := os.MkdirAll(share, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(share, 2000123, 2000123); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "logs", "c2.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		t.Fatal(err)
	}
	spec := runtime.Spec{ID: "c2", Image: ref, UID: 2000123, GID: 2000123, Confined: true, MemoryBytes: 64 << 20, Pids: 32,
		Args:    []string{"/bin/sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x; echo; echo done; exec sleep 600"},
		Mounts:  []runtime.Mount{{Source: share, Target: "/share"}},
		LogPath: logPath, LogWriter: agenttest.LogWriter(t), LogMaxBytes: 64 << 10}
	if err := rt.Run(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var tail []byte
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(string(tail), "done") && time.Now().Before(deadline) {
		tail, _ = os.ReadFile(logPath)
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(string(tail), "done") {
		t.Fatalf("log never got the end of the output: %d bytes", len(tail))
	}
	for _, f := range []string{logPath, logPath + ".1"} {
		if st, err := os.Stat(f); err != nil || st.Size() > 64<<10 {
			t.Fatalf("%s: %v over the cap (%v)", f, st, err)
		}
	}
	res, err := rt.Exec(ctx, "c2", []string{"/bin/sh", "-c", `grep -E '^(Seccomp|NoNewPrivs|CapEff|CapPrm|CapBnd):' /proc/self/status; id -u;
touch /etc/x 2>/dev/null && echo root-writable; touch /share/ok && echo share-writable`}, nil, 2000123, 2000123, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	for _, want := range []string{"Seccomp:\t2", "NoNewPrivs:\t1", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000",
		"CapBnd:\t0000000000000000", "2000123", "share-writable"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "root-writable") {
		t.Error("the root filesystem is writable")
	}
	big, err := rt.Exec(ctx, "c2", []string{"/bin/sh", "-c", "head -c 80000000 /dev/zero; echo end >&2"}, nil, 2000123, 2000123, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !big.Truncated || len(big.Stdout) != runtime.MaxExecOutput || string(big.Stderr) != "end\n" || big.ExitCode != 0 {
		t.Fatalf("80 MB of output: truncated %v, %d bytes kept, stderr %q, exit %d", big.Truncated, len(big.Stdout), big.Stderr, big.ExitCode)
	}
}

// TestScopedRuntimesShareANamespace: two scoped runtimes on one
// namespace (two agents of a host, or two tests) use the same ids without
// touching each other's containers, and share its images.
func TestScopedRuntimesShareANamespace(t *testing.T) {
	socket, _ := agenttest.Containerd(t)
	a, b := agenttest.Runtime(t, socket), agenttest.Runtime(t, socket)
	ctx := context.Background()
	ref, err := agenttest.Catalog(t).PHP(ctx, a, "8.2")
	if err != nil {
		t.Fatal(err)
	}
	if has, err := b.HasImage(ctx, ref); err != nil || !has {
		t.Fatalf("the other scope does not see the namespace's image: %v %v", has, err)
	}
	for _, rt := range []*runtime.Runtime{a, b} {
		if err := rt.Run(ctx, runtime.Spec{ID: "same", Image: ref, UID: 33, GID: 33, Args: []string{"sleep", "600"}}); err != nil {
			t.Fatal(err)
		}
	}
	for name, rt := range map[string]*runtime.Runtime{"a": a, "b": b} {
		if ids, err := rt.Containers(ctx); err != nil || len(ids) != 1 || ids[0] != "same" {
			t.Fatalf("%s sees %v %v", name, ids, err)
		}
	}
	if err := a.Remove(ctx, "same"); err != nil {
		t.Fatal(err)
	}
	if running, err := b.Running(ctx, "same"); err != nil || !running {
		t.Fatalf("removing a's container stopped b's: %v %v", running, err)
	}
	if exists, _ := a.Exists(ctx, "same"); exists {
		t.Fatal("a's container is still there")
	}
}

// shims counts the runc shims serving containers whose ids start with
// prefix (a grouped shim is named after its first container), from the
// host's process table.
func shims(prefix string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		args := strings.Split(string(b), "\x00")
		if i := slices.Index(args, "-id"); i > 0 && i+1 < len(args) && strings.Contains(args[0], "containerd-shim") &&
			strings.HasPrefix(args[i+1], prefix) {
			n++
		}
	}
	return n
}

// TestShimGroup: containers of one group share one shim process (read
// on the host), each still run, exec'd, frozen and removed on its own;
// the shim goes with the last of them.
func TestShimGroup(t *testing.T) {
	socket, dir := agenttest.Containerd(t)
	rt := agenttest.Runtime(t, socket)
	ctx := context.Background()
	ref, err := agenttest.Catalog(t).PHP(ctx, rt, "8.2")
	if err != nil {
		t.Fatal(err)
	}
	group := "group"
	for _, id := range []string{"g1", "g2", "g3"} {
		if err := rt.Run(ctx, runtime.Spec{ID: id, Image: ref, UID: 33, GID: 33, Args: []string{"sleep", "600"},
			LogPath: filepath.Join(dir, id+".log"), LogWriter: agenttest.LogWriter(t), ShimGroup: group}); err != nil {
			t.Fatal(err)
		}
	}
	scoped := rt.CgroupDirs("g1")[0] // …/<namespace>/<scope>g1
	scope := strings.TrimSuffix(filepath.Base(scoped), "g1")
	if n := shims(scope); n != 1 {
		t.Fatalf("%d shims for a group of three", n)
	}
	for _, id := range []string{"g1", "g2", "g3"} {
		if res, err := rt.Exec(ctx, id, []string{"echo", id}, nil, 33, 33, nil); err != nil || string(res.Stdout) != id+"\n" {
			t.Fatalf("exec in %s: %v %+v", id, err, res)
		}
	}
	if err := rt.Freeze(ctx, "g2"); err != nil {
		t.Fatal(err)
	}
	if frozen, _ := rt.Frozen("g1"); frozen {
		t.Fatal("freezing g2 froze g1")
	}
	if err := rt.Halt(ctx, "g2"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if running, err := rt.Running(ctx, "g3"); err != nil || !running {
		t.Fatalf("g3 after its group's others went: %v %v", running, err)
	}
	if n := shims(scope); n != 1 {
		t.Fatalf("%d shims while g3 runs", n)
	}
	for _, id := range []string{"g2", "g3"} {
		if err := rt.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for shims(scope) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := shims(scope); n != 0 {
		t.Fatalf("the group's shim outlived its containers: %d", n)
	}
}
