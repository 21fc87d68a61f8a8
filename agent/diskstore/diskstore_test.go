package diskstore

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/agent/sitedisk"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestStoreClonesByReference makes a store on the test's ext4 temporary
// directory (an XFS image), checks that a clone of a site disk in it
// shares every block until one side changes, that a frozen disk's clone
// mounts clean with the data written before the freeze, and that the
// store unmounts without a trace.
func TestStoreClonesByReference(t *testing.T) {
	hosttest.Root(t)
	base := t.TempDir()
	dir, img := filepath.Join(base, "fs"), filepath.Join(base, "fs.xfs")
	disk, clone := filepath.Join(dir, "disk.img"), filepath.Join(dir, "clone.img")
	mnt, cmnt := filepath.Join(base, "disk"), filepath.Join(base, "clone")
	t.Cleanup(func() {
		for _, d := range []string{mnt, cmnt, dir} {
			if err := Unmount(d); err != nil {
				t.Error(err)
			}
		}
	})
	if ok, err := CanClone(base); err != nil || ok {
		t.Skipf("the test's directory clones already (%v): nothing to prepare", err)
	}
	st, err := Prepare(dir, img)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Cloning || st.Image != img {
		t.Fatalf("store %+v: want a cloning XFS image at %s", st, img)
	}
	if again, err := Prepare(dir, img); err != nil || again != st {
		t.Fatalf("Prepare again = %+v, %v; want %+v", again, err, st)
	}
	if err := sitedisk.Ensure(disk, 64, mnt); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 8<<20)
	_, _ = rand.Read(data)
	if err := os.WriteFile(filepath.Join(mnt, "data"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	thaw, err := Freeze(mnt)
	if err != nil {
		t.Fatal(err)
	}
	// A write while frozen waits for the thaw.
	wrote := make(chan error, 1)
	go func() { wrote <- os.WriteFile(filepath.Join(mnt, "late"), []byte("late"), 0o600) }()
	reflink, cerr := Clone(clone, disk)
	for _, f := range []string{disk, clone} {
		if n, err := Exclusive(f); cerr == nil && (err != nil || n != 0) {
			t.Errorf("%s holds %d bytes of its own (%v) right after the clone; want 0", f, n, err)
		}
	}
	if err := thaw(); err != nil {
		t.Fatal(err)
	}
	if err := thaw(); err != nil {
		t.Fatalf("a second thaw: %v", err)
	}
	if cerr != nil || !reflink {
		t.Fatalf("clone: reflink %v, %v", reflink, cerr)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := sitedisk.Ensure(clone, 64, cmnt); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(cmnt, "data"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the clone's data differs (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(cmnt, "late")); !os.IsNotExist(err) {
		t.Fatalf("the clone has a file written after the freeze (%v)", err)
	}
	// Changing the clone makes what it changed its own, not the original's.
	if err := os.WriteFile(filepath.Join(cmnt, "data"), data[:4<<20], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(cmnt); err != nil {
		t.Fatal(err)
	}
	if n, err := Exclusive(clone); err != nil || n == 0 || n > 16<<20 {
		t.Fatalf("the changed clone holds %d bytes of its own (%v); want some, not a whole copy", n, err)
	}
	if err := Unmount(mnt); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(dir); err != nil {
		t.Fatal(err)
	}
	if m, err := sitedisk.Mounted(dir); err != nil || m {
		t.Fatalf("store still mounted (%v)", err)
	}
}

// TestCopySparse checks the fallback of Clone where the filesystem
// cannot clone: the data is copied and the holes stay holes.
func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 20 << 20, 64<<20 - 4096} {
		if _, err := f.WriteAt(bytes.Repeat([]byte{byte(off>>20) + 1}, 4096), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := copySparse(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	a, _ := os.ReadFile(src)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Fatal("the copy differs")
	}
	var st unix.Stat_t
	if err := unix.Stat(dst, &st); err != nil || st.Blocks*512 > 1<<20 {
		t.Fatalf("the copy is not sparse: %d bytes allocated (%v)", st.Blocks*512, err)
	}
	// A clone over an existing file replaces it and leaves no temporary.
	if _, err := Clone(dst, src); err != nil {
		t.Fatalf("a clone over an existing file: %v", err)
	}
	if _, err := os.Stat(dst + ".part"); !os.IsNotExist(err) {
		t.Fatalf("a temporary file was left (%v)", err)
	}
}
