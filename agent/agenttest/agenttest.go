// Package agenttest starts a private containerd for a test and opens the
// image catalogue that `make images` filled. Tests that use it run against
// the real daemon and fail (never skip) when a part is missing.
package agenttest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/agent/daemon"
	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/agent/logwriter"
	"github.com/sandboxd/sandboxd/agent/runtime"
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

// Containerd starts a private containerd under a short temp dir and
// returns its socket; the daemon stops when the test ends.
func Containerd(t testing.TB) (socket, dir string) {
	t.Helper()
	dir = ShortDir(t)
	socket, d, err := daemon.Ensure(context.Background(), "", filepath.Join(dir, "ctd"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("containerd: %v", err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	return socket, dir
}

// Runtime connects to socket in a namespace of its own, and removes every
// container of that namespace when the test ends.
func Runtime(t testing.TB, socket string) *runtime.Runtime {
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
		rt.Close()
	})
	return rt
}

// Catalog opens the image cache and fails the test, naming `make images`,
// when it holds no PHP 8.2 image.
func Catalog(t testing.TB) *images.Catalog {
	t.Helper()
	c, err := images.Load(images.DefaultDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range c.PHPVersions() {
		if v == "8.2" {
			return c
		}
	}
	t.Fatalf("no PHP 8.2 image in %s: run `make images` first", images.DefaultDir())
	return nil
}

// Main runs a test package whose containers log through agent/logwriter:
// the shim starts the test binary itself as the logger, and Main turns it
// into one before any test runs. Call it from TestMain.
func Main(m *testing.M) {
	if logwriter.Invoked() {
		os.Exit(logwriter.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

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
