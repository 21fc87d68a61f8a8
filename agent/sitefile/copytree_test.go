package sitefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestCopyTree: a tenant's tree is copied with its files, directories and
// links as they are (links never followed), without what could hurt the
// host (FIFOs, setuid bits), owned by the given uid; limits stop a copy
// and leave nothing behind.
func TestCopyTree(t *testing.T) {
	hosttest.Root(t)
	src := t.TempDir()
	const uid = 2099010
	write := func(rel, body string, mode os.FileMode) {
		p := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("index.php", "<?php echo 1;", 0o644)
	write("wp-content/uploads/2024/a.jpg", strings.Repeat("x", 5000), 0o600)
	write("wp-content/evil", "#!/bin/sh", 0o4755|os.ModeSetuid)
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "passwd")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(src, "wp-content", "etc")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	dst := filepath.Join(t.TempDir(), "tpl")
	st, err := CopyTree(src, dst, uid, TreeLimits{Files: 100, Bytes: 1 << 20, Depth: 10})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 3 || st.Symlinks != 2 || st.Skipped != 1 || st.Bytes != int64(len("<?php echo 1;")+5000+len("#!/bin/sh")) {
		t.Errorf("stats %+v", st)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "wp-content/uploads/2024/a.jpg")); len(b) != 5000 {
		t.Errorf("upload copied as %d bytes", len(b))
	}
	if l, err := os.Readlink(filepath.Join(dst, "passwd")); err != nil || l != "/etc/passwd" {
		t.Errorf("link: %q %v", l, err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "wp-content", "etc")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("a link to /etc was not copied as a link: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a FIFO was copied: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dst, "wp-content/evil"))
	if err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("setuid file copied as %v %v", fi.Mode(), err)
	}
	if err := filepath.Walk(dst, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if o := int(fi.Sys().(*syscall.Stat_t).Uid); o != uid {
			t.Errorf("%s belongs to %d", p, o)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "wp-content/uploads/2024/a.jpg")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v not kept", fi.Mode())
	}

	for name, lim := range map[string]TreeLimits{"files": {Files: 3}, "bytes": {Bytes: 4000}, "depth": {Depth: 1}} {
		out := filepath.Join(t.TempDir(), "tpl")
		if _, err := CopyTree(src, out, uid, lim); !errors.Is(err, ErrTreeTooLarge) {
			t.Errorf("%s limit: %v", name, err)
		}
		if _, err := os.Lstat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s limit: a partial copy was left", name)
		}
	}
	if _, err := CopyTree(src, dst, uid, TreeLimits{}); err == nil {
		t.Error("copied over an existing tree")
	}
	// A source that is itself a link is refused, not followed.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	if _, err := CopyTree(link, filepath.Join(t.TempDir(), "x"), uid, TreeLimits{}); err == nil {
		t.Error("a linked source was followed")
	}
}
