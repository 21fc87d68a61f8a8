package sitedisk

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDiskLimitIsEnforced mounts a real 32 MiB disk, fills it, and checks
// that the write past its size fails, that the image stays sparse, and
// that unmounting leaves no mount or loop device behind.
func TestDiskLimitIsEnforced(t *testing.T) {
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "data")
	t.Cleanup(func() { _ = Unmount(mnt) })
	if err := Ensure(img, 32, mnt); err != nil {
		t.Fatal(err)
	}
	// Idempotent: mounted stays mounted, once.
	if err := Ensure(img, 32, mnt); err != nil {
		t.Fatal(err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &fs); err != nil || int64(fs.Blocks)*fs.Bsize < 24<<20 || int64(fs.Blocks)*fs.Bsize > 32<<20 {
		t.Fatalf("mounted filesystem is %d bytes (%v), want about 32 MiB", int64(fs.Blocks)*fs.Bsize, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(img, &st); err != nil || st.Blocks*512 > 8<<20 {
		t.Fatalf("image is not sparse: %d bytes allocated (%v)", st.Blocks*512, err)
	}
	f, err := os.Create(filepath.Join(mnt, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	var werr error
	for i := 0; i < 64 && werr == nil; i++ {
		_, werr = f.Write(chunk)
		if werr == nil {
			werr = f.Sync()
		}
	}
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("64 MiB into a 32 MiB disk: %v, want ENOSPC", werr)
	}
	u, err := UsageOf(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if u.Size < 20<<20 || u.Size > 32<<20 || u.Free > 1<<20 { // ext4 keeps ~20% of a tiny disk for itself
		t.Fatalf("usage of a full 32 MiB disk: %+v", u)
	}
	if err := Unmount(mnt); err != nil {
		t.Fatal(err)
	}
	if m, _ := Mounted(mnt); m {
		t.Fatal("still mounted")
	}
	if _, err := os.Stat(filepath.Join(mnt, "fill")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the disk's files show without the mount")
	}
	// Mounted again, the content is still there.
	if err := Ensure(img, 32, mnt); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "fill")); err != nil {
		t.Fatalf("content lost across remount: %v", err)
	}
	if err := Unmount(mnt); err != nil {
		t.Fatal(err)
	}
	if loops := attachedTo(t, img); len(loops) != 0 {
		t.Fatalf("loop devices left attached: %v", loops)
	}
}

// attachedTo lists loop devices whose backing file is img.
func attachedTo(t *testing.T, img string) []string {
	t.Helper()
	var out []string
	ms, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err == nil && string(b) == img+"\n" {
			out = append(out, m)
		}
	}
	return out
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
