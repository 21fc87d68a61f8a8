package sitedisk

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestDiskLimitIsEnforced mounts a real 32 MiB disk, fills it, and checks
// that the write past its size fails, that the image stays sparse, and
// that unmounting leaves no mount or loop device behind.
func TestDiskLimitIsEnforced(t *testing.T) {
	hosttest.Root(t)
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
	// The kernel lets the loop device go as the last reference to it
	// drops (autoclear), a moment after the unmount on a busy machine.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		loops := attachedTo(t, img)
		if len(loops) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("loop devices left attached: %v", loops)
		}
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

// TestReserveIsTheUIDs: a disk of 32 MiB with 16 MiB reserved for one
// uid is full at 32 MiB for every other uid (the site's files), while
// that uid (the node's MariaDB) writes on into the reserve.
func TestReserveIsTheUIDs(t *testing.T) {
	hosttest.Root(t)
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "data")
	t.Cleanup(func() { _ = Unmount(mnt) })
	const owner, other = 999, 2_000_123
	if err := EnsureReserved(img, 32, Reserve{MB: 16, UID: owner}, mnt); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(dir), dir, mnt} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	fill := func(uid int, name string) (int64, string) {
		t.Helper()
		cmd := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(mnt, name), "bs=1M", "count=64", "conv=fsync")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		out, _ := cmd.CombinedOutput()
		st, err := os.Stat(filepath.Join(mnt, name))
		if err != nil {
			t.Fatalf("%s: %v: %s", name, err, out)
		}
		return st.Size(), string(out)
	}
	n, out := fill(other, "site")
	if n > 32<<20 || !strings.Contains(out, "No space left") {
		t.Fatalf("another uid wrote %d MiB into a 32 MiB disk: %s", n>>20, out)
	}
	u, err := UsageOf(mnt)
	if err != nil || u.Free > 2<<20 || u.Size < 40<<20 || u.Used > 32<<20 {
		t.Fatalf("usage after the other uid filled it: %+v %v", u, err)
	}
	n, out = fill(owner, "owner")
	if n < 12<<20 || n > 16<<20 || !strings.Contains(out, "No space left") {
		t.Fatalf("the reserve's uid wrote %d MiB more: %s", n>>20, out)
	}
}
