package agenttest

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on a thread that has entered the network namespace at
// path (a listener made there stays there). The thread goes back to its
// own namespace afterwards; one that cannot is discarded (Go would park,
// not end, the main thread, leaving it in the namespace).
func InNetns(t testing.TB, path string, fn func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		origin, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- err
			return
		}
		defer origin.Close()
		f, err := os.Open(path)
		if err != nil {
			done <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		fn()
		// Home before answering, so the caller never sees this thread away.
		if err := unix.Setns(int(origin.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		runtime.UnlockOSThread()
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("InNetns: fn did not return within a minute")
	}
}

// HostRoutes serialises tests that route a fixed address such as
// 169.254.169.254 from the host to a namespace of their own: test packages
// run in parallel and the host has one routing table. It holds until the
// test ends.
func HostRoutes(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/run/lock/sandboxd-test-host-routes", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
