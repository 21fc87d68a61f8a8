package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestStopRefusedWhileTheAgentRuns: the data dir's lock keeps a stop, a
// retire or a second agent off a running agent's sites; it is free again
// once the holder closes it.
func TestStopRefusedWhileTheAgentRuns(t *testing.T) {
	dir := t.TempDir()
	held, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, try := range map[string]func() error{
		"stop":   func() error { return Stop(context.Background(), dir) },
		"retire": func() error { return Retire(context.Background(), dir, t.TempDir()) },
		"start":  func() error { f, err := lockDataDir(dir); f.Close(); return err },
	} {
		if err := try(); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "pid ") {
			t.Errorf("%s while the agent runs: %v", name, err)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a refused retire removed the data dir: %v", err)
	}
	held.Close()
	f, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("the lock outlived its holder: %v", err)
	}
	f.Close()
}

// TestRemoveDataDirLeavesAMountedDirAlone: with anything still mounted
// below it, the data dir is left whole (RemoveAll would empty the mount).
func TestRemoveDataDirLeavesAMountedDirAlone(t *testing.T) {
	hosttest.Root(t)
	dir := filepath.Join(t.TempDir(), "data dir") // a space: mountinfo escapes it
	inner := filepath.Join(dir, "sites", "disk")
	if err := os.MkdirAll(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a tmpfs (the agent's tests run as root): %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(inner, syscall.MNT_DETACH) })
	keep := filepath.Join(inner, "wp-config.php")
	if err := os.WriteFile(keep, []byte("<?php"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveDataDir(dir); err == nil || !strings.Contains(err.Error(), inner) {
		t.Fatalf("removed with a mount under it: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("the mounted disk lost a file: %v", err)
	}
	if err := syscall.Unmount(inner, 0); err != nil {
		t.Fatal(err)
	}
	if err := RemoveDataDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("still there: %v", err)
	}
}

// TestRemoveDataDirThatIsAMount: a data dir that is a file system of its
// own is emptied and stays (its mount point is the operator's).
func TestRemoveDataDirThatIsAMount(t *testing.T) {
	hosttest.Root(t)
	dir := filepath.Join(t.TempDir(), "agent")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	if err := os.MkdirAll(filepath.Join(dir, "sites", "fs"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A mount point that no agent made (a --data-dir mistyped as /home)
	// is refused, whole.
	if err := RemoveDataDir(dir); err == nil || !strings.Contains(err.Error(), "no agent's data dir") {
		t.Fatalf("a mount point without an agent's record: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sites", "fs")); err != nil {
		t.Fatalf("the refused mount point lost its files: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, namespaceRecord), []byte("ns\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Through a link to it, as a data dir under /var/lib may be.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := RemoveDataDir(link); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("the mounted data dir was not emptied: %v %v", ents, err)
	}
}

// TestRemoveDataDirRefusesTheRoot: --data-dir / (an empty variable in
// a script) removes nothing; nor does a containerd dir in the temporary
// directory that is a link someone planted.
func TestRemoveDataDirRefusesTheRoot(t *testing.T) {
	hosttest.Root(t)
	if err := RemoveDataDir("/"); err == nil {
		t.Fatal("the root directory was not refused")
	}
	target := t.TempDir()
	if err := os.WriteFile(filepath.Join(target, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "sandboxd-ctd-planted")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := removeTempDir(link); err == nil {
		t.Fatal("a link in the temporary directory was followed")
	}
	if _, err := os.Stat(filepath.Join(target, "keep")); err != nil {
		t.Fatalf("the link's target lost its files: %v", err)
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a/b`: "/a/b", `/data\040dir/x`: "/data dir/x", `/t\011ab`: "/t\tab", `/end\04`: `/end\04`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
