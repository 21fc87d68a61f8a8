// Package hosttest marks the tests that need the host itself: root, and
// through it containerd, mounts, network namespaces and nftables. Under
// `go test -short` they are skipped, so a developer without root runs
// everything else in a minute or two; without -short (`make test`, CI)
// they always run, and fail, never skip, when the host cannot.
package hosttest

import (
	"os"
	"testing"
)

// Root skips the test under -short and fails it when not run as root.
func Root(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs root (containerd, mounts, namespaces): make test runs it")
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root (containerd, mounts, namespaces): run make test as root, or go test -short for the rest")
	}
}

// Missing reports a tool that deploy/dev/install-deps.sh installs but
// this machine lacks: the test fails, or under -short is skipped (a
// developer may run the short tests before installing everything).
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if testing.Short() {
		t.Skipf(format, args...)
	}
	t.Fatalf(format, args...)
}
