// Package agenttest starts a private containerd per test binary (a
// namespace per test) and opens the
// image catalogue that `make images` filled. Tests that use it run against
// the real daemon and fail (never skip) when a part is missing.
package agenttest

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/agent/daemon"
	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/agent/logwriter"
	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// ShortDir returns a fresh directory with a short path (unix sockets are
// limited to about 100 bytes), removed when the test ends.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sbx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// shared is the one containerd of a test binary: tests get a namespace
// each (Runtime), not a daemon each. Main stops it.
var shared struct {
	once   sync.Once
	dir    string
	socket string
	d      *daemon.Daemon
	err    error
}

// Containerd returns the socket of the test binary's private containerd,
// starting it on first use, and a fresh short directory of the test's
// own. The package's TestMain must be Main, which stops the daemon.
func Containerd(t testing.TB) (socket, dir string) {
	t.Helper()
	hosttest.Root(t)
	if !mainRuns {
		t.Fatal("agenttest.Containerd needs agenttest.Main as the package's TestMain (it stops the daemon)")
	}
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("/tmp", "sbx-ctd-"); shared.err != nil {
			return
		}
		shared.socket, shared.d, shared.err = daemon.Ensure(context.Background(), "", filepath.Join(shared.dir, "ctd"), slog.New(slog.DiscardHandler))
	})
	if shared.err != nil {
		t.Fatalf("containerd: %v", shared.err)
	}
	return shared.socket, ShortDir(t)
}

// Runtime is a runtime on socket for one test: it sees only the
// containers it makes, in a namespace the test binary's tests share with
// their images, so that each test does not import and unpack every image
// again (seconds a test). The test's containers are removed when it ends.
func Runtime(t testing.TB, socket string) *runtime.Runtime {
	t.Helper()
	base := sharedNamespace(t, socket)
	rt := base.Scoped("t" + ids.Random(4) + "-")
	t.Cleanup(func() {
		ctx := context.Background()
		ids, _ := rt.Containers(ctx)
		for _, id := range ids {
			if err := rt.Remove(ctx, id); err != nil {
				t.Errorf("remove container %s: %v", id, err)
			}
		}
	})
	return rt
}

// namespaces holds, per containerd socket, the runtime of the namespace
// the binary's tests share; Run removes their cgroups at the end.
var namespaces struct {
	mu  sync.Mutex
	rts map[string]*runtime.Runtime
}

func sharedNamespace(t testing.TB, socket string) *runtime.Runtime {
	t.Helper()
	namespaces.mu.Lock()
	defer namespaces.mu.Unlock()
	if rt, ok := namespaces.rts[socket]; ok {
		return rt
	}
	rt, err := runtime.Connect(socket, "sbx-test-"+ids.Random(4))
	if err != nil {
		t.Fatal(err)
	}
	if namespaces.rts == nil {
		namespaces.rts = map[string]*runtime.Runtime{}
	}
	namespaces.rts[socket] = rt
	return rt
}

// FreshRuntime connects to socket in a namespace of the test's own, with
// no image in it (a test of importing or pulling one), and removes every
// container of that namespace when the test ends.
func FreshRuntime(t testing.TB, socket string) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.Connect(socket, "sbx-test-"+ids.Random(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		ids, _ := rt.Containers(ctx)
		for _, id := range ids {
			_ = rt.Remove(ctx, id)
		}
		if err := runtime.RemoveNamespaceCgroups(rt.Namespace()); err != nil {
			t.Error(err)
		}
		rt.Close()
	})
	return rt
}

// Catalog opens the image cache and fails the test, naming `make images`,
// when it holds no PHP 8.2 image. Every test of a binary gets the same
// catalogue, so that two tests never import one image at once.
func Catalog(t testing.TB) *images.Catalog {
	t.Helper()
	catalog.once.Do(func() { catalog.c, catalog.err = images.Load(images.DefaultDir(), nil) })
	if catalog.err != nil {
		t.Fatal(catalog.err)
	}
	for _, v := range catalog.c.PHPVersions() {
		if v == "8.2" {
			return catalog.c
		}
	}
	t.Fatalf("no PHP 8.2 image in %s: run `make images` first", images.DefaultDir())
	return nil
}

var catalog struct {
	once sync.Once
	c    *images.Catalog
	err  error
}

// Main runs a test package that uses Containerd or whose containers log
// through agent/logwriter: the shim starts the test binary itself as the
// logger, and Main turns it into one before any test runs; after the
// tests it stops the package's containerd. Call it from TestMain.
func Main(m *testing.M) {
	if logwriter.Invoked() {
		os.Exit(logwriter.Main(os.Args[1:]))
	}
	os.Exit(Run(m))
}

// Run runs the tests, then each of before (what must go while the
// daemon still runs), then stops the package's containerd, returning the
// exit code: for a TestMain with work of its own before or after.
func Run(m *testing.M, before ...func() error) int {
	mainRuns = true
	code := m.Run()
	for _, f := range before {
		if err := f(); err != nil {
			fmt.Fprintln(os.Stderr, "agenttest:", err)
			code = 1
		}
	}
	namespaces.mu.Lock()
	for _, rt := range namespaces.rts {
		ctx := context.Background()
		left, _ := rt.Containers(ctx)
		if len(left) > 0 {
			fmt.Fprintln(os.Stderr, "agenttest: containers left in the shared namespace:", left)
			code = 1
		}
		for _, id := range left {
			_ = rt.Remove(ctx, id)
		}
		if err := runtime.RemoveNamespaceCgroups(rt.Namespace()); err != nil {
			fmt.Fprintln(os.Stderr, "agenttest:", err)
			code = 1
		}
		rt.Close()
	}
	namespaces.mu.Unlock()
	if shared.socket != "" {
		// A shim whose task was killed but never deleted outlives every
		// container record: it would outlive the daemon too.
		if left := shimsOf(shared.socket); len(left) > 0 {
			fmt.Fprintln(os.Stderr, "agenttest: shims left on the shared containerd:", left)
			code = 1
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if shared.d != nil {
		if err := shared.d.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "agenttest: stop containerd:", err)
			code = 1
		}
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	return code
}

// mainRuns is set by Main: Containerd refuses to start a daemon nothing
// would stop.
var mainRuns bool

// LogWriter is the binary to name in runtime.Spec.LogWriter: this test
// binary (see Main).
func LogWriter(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TreeBytes is what the regular files under dir take, links not followed:
// how much of a disk a tree really holds.
func TreeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			info, err := e.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// shimsOf lists the pids of the containerd shims serving the daemon at
// socket.
func shimsOf(socket string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if !strings.Contains(args[0], "containerd-shim") || !slices.Contains(args, socket) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
