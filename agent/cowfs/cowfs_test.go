package cowfs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// asUID runs a shell command as uid (and gid) on the host.
func asUID(t *testing.T, uid int, script string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func owner(t *testing.T, path string) int {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Uid)
}

// TestTwoSitesOverOneTemplate: two sites with uids of their own over one
// template frozen from a third: each sees the template's files as its
// own, writes only to its upper layer, cannot write the template even as
// root through its view, and its changes are invisible to the other.
func TestTwoSitesOverOneTemplate(t *testing.T) {
	hosttest.Root(t)
	dir, err := os.MkdirTemp("/tmp", "cow-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the sites' uids walk through it
		t.Fatal(err)
	}
	const tplUID, uidA, uidB = 2099001, 2099002, 2099003
	lower := filepath.Join(dir, "template")
	if err := os.MkdirAll(filepath.Join(lower, "wp-content"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"index.php": "<?php // template\n", "wp-content/a.txt": "A\n"} {
		if err := os.WriteFile(filepath.Join(lower, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := filepath.Walk(lower, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, tplUID, tplUID)
	}); err != nil {
		t.Fatal(err)
	}
	layout := func(name string, uid int) Layout {
		d := filepath.Join(dir, name)
		return Layout{Lower: lower, LowerUID: tplUID, Upper: filepath.Join(d, "upper"), Work: filepath.Join(d, "work"),
			SiteUID: uid, Mapped: filepath.Join(d, "mapped"), Target: filepath.Join(d, "wordpress")}
	}
	a, b := layout("a", uidA), layout("b", uidB)
	for _, l := range []Layout{a, b} {
		if err := Mount(l); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := Unmount(l); err != nil {
				t.Error(err)
			}
		})
	}
	if got := owner(t, filepath.Join(a.Target, "index.php")); got != uidA {
		t.Fatalf("site A sees the template's file owned by %d, want %d", got, uidA)
	}
	if out, err := asUID(t, uidA, "echo changed > "+a.Target+"/index.php && mkdir "+a.Target+"/wp-content/uploads && echo new > "+a.Target+"/wp-content/uploads/x.txt"); err != nil {
		t.Fatalf("site A cannot write its tree: %v %s", err, out)
	}
	if out, err := asUID(t, uidB, "echo hack > "+a.Target+"/index.php"); err == nil {
		t.Fatalf("site B wrote site A's tree: %s", out)
	}
	if got, _ := os.ReadFile(filepath.Join(b.Target, "index.php")); !bytes.Equal(got, []byte("<?php // template\n")) {
		t.Fatalf("site A's change shows in site B: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(lower, "index.php")); !bytes.Equal(got, []byte("<?php // template\n")) {
		t.Fatalf("the template changed: %q", got)
	}
	if got := owner(t, filepath.Join(a.Upper, "index.php")); got != uidA {
		t.Fatalf("the copied-up file belongs to %d, want %d", got, uidA)
	}
	if got := owner(t, filepath.Join(lower, "index.php")); got != tplUID {
		t.Fatalf("the template's file now belongs to %d", got)
	}
	// The id-mapped view is read-only, even for root.
	if err := os.WriteFile(filepath.Join(a.Mapped, "index.php"), []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("root wrote the template through the mapped view: %v", err)
	}
	// Deleting a template file in a site hides it there only.
	if out, err := asUID(t, uidB, "rm "+b.Target+"/wp-content/a.txt"); err != nil {
		t.Fatalf("site B cannot delete its copy: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(a.Target, "wp-content", "a.txt")); err != nil {
		t.Fatalf("site B's delete reached site A: %v", err)
	}
	if err := Mount(Layout{Lower: lower, LowerUID: 0, SiteUID: uidA}); err == nil {
		t.Fatal("a root-owned layer was accepted")
	}
}
