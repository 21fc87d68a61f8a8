// Package sitedisk gives each site a disk of its own size: a sparse ext4
// image attached to a loop device and mounted where the site's writable
// directories live. The kernel enforces the size (a write past it fails
// with ENOSPC inside the site), the image uses only the space its files
// take (discard returns freed blocks), and the loop device detaches by
// itself when the last mount of it goes.
package sitedisk

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Ensure makes sure img exists as an ext4 filesystem of sizeMB and is
// mounted at dir (nodev, nosuid). It is idempotent: an existing image is
// kept (its content is the site's), a mounted dir is left alone. A new
// filesystem's root belongs to root with mode 0755.
func Ensure(img string, sizeMB int64, dir string) error {
	return EnsureReserved(img, sizeMB, Reserve{}, dir)
}

// Reserve is room on a disk beyond its size that only one uid may use
// (ext4's reserved blocks, given to that uid): every other uid finds the
// disk full at its size.
type Reserve struct {
	MB  int64
	UID int
}

// EnsureReserved is Ensure for a disk of sizeMB plus r, r usable by
// r.UID alone. The reserve is set when the image is made; an existing
// image keeps what it has.
func EnsureReserved(img string, sizeMB int64, r Reserve, dir string) error {
	if sizeMB < 16 {
		return fmt.Errorf("sitedisk: size %d MiB is too small", sizeMB)
	}
	if r.MB < 0 || (r.MB > 0 && r.UID <= 0) {
		return fmt.Errorf("sitedisk: bad reserve %+v", r)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sitedisk: %w", err)
	}
	mounted, err := Mounted(dir)
	if err != nil || mounted {
		return err
	}
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		if err := create(img, sizeMB, r); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("sitedisk: %w", err)
	}
	return mount(img, dir, "ext4")
}

// create makes a sparse image and an ext4 filesystem on it, written to a
// temporary name first so a crash never leaves a half-made image behind.
func create(img string, sizeMB int64, r Reserve) error {
	sizeMB += r.MB
	tmp := img + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("sitedisk: %w", err)
	}
	err = f.Truncate(sizeMB << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sitedisk: size image: %w", err)
	}
	// No reserved blocks (the site gets all of its size), a small journal,
	// inode tables initialised lazily: about 15 ms.
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-J", "size=4", "-b", strconv.Itoa(blockSize),
		"-E", "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0", tmp).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sitedisk: mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if r.MB > 0 {
		blocks := (r.MB << 20) / blockSize
		out, err := exec.Command("tune2fs", "-r", strconv.FormatInt(blocks, 10), "-u", strconv.Itoa(r.UID), tmp).CombinedOutput()
		if err != nil {
			os.Remove(tmp)
			return fmt.Errorf("sitedisk: tune2fs: %v: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.Rename(tmp, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sitedisk: %w", err)
	}
	return nil
}

// MountImage attaches img (a filesystem of fstype) to a loop device and
// mounts it at dir (nodev, nosuid, discard): for the node's own images
// that are not a site's disk.
func MountImage(img, dir, fstype string) error { return mount(img, dir, fstype) }

func mount(img, dir, fstype string) error {
	back, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("sitedisk: %w", err)
	}
	defer back.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("sitedisk: %w", err)
	}
	defer ctl.Close()
	// Another process may take the free device between asking and
	// configuring it: ask again.
	for attempt := 0; attempt < 20; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("sitedisk: no free loop device: %w", err)
		}
		dev, err := openLoop(n)
		if err != nil {
			return err
		}
		cfg := unix.LoopConfig{Fd: uint32(back.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
		copy(cfg.Info.File_name[:], img)
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) {
			// The backing filesystem refuses direct I/O: go through its page cache.
			cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
			err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		}
		if errors.Is(err, unix.EBUSY) {
			dev.Close()
			continue
		}
		if err != nil {
			dev.Close()
			return fmt.Errorf("sitedisk: attach %s: %w", img, err)
		}
		// With autoclear, closing our descriptor after the mount leaves the
		// device to the mount; after a failed mount it detaches it.
		err = unix.Mount(dev.Name(), dir, fstype, unix.MS_NODEV|unix.MS_NOSUID, "discard")
		dev.Close()
		if err != nil {
			return fmt.Errorf("sitedisk: mount %s at %s: %w", img, dir, err)
		}
		return nil
	}
	return errors.New("sitedisk: every free loop device was taken while attaching")
}

func openLoop(n int) (*os.File, error) {
	name := "/dev/loop" + strconv.Itoa(n)
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		// No udev here: make the node ourselves (block major 7).
		if merr := unix.Mknod(name, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); merr != nil && !errors.Is(merr, os.ErrExist) {
			return nil, fmt.Errorf("sitedisk: mknod %s: %w", name, merr)
		}
		f, err = os.OpenFile(name, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("sitedisk: %w", err)
	}
	return f, nil
}

// Unmount detaches the disk mounted at dir; nothing mounted is fine. The
// loop device goes with the last mount of it (a container still holding
// a bind mount keeps it until it stops).
func Unmount(dir string) error {
	for {
		mounted, err := Mounted(dir)
		if err != nil || !mounted {
			return err
		}
		if err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW); err != nil {
			if errors.Is(err, unix.EBUSY) {
				// Something on the host still has it open: detach lazily,
				// it goes when they let go.
				err = unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			}
			if err != nil {
				return fmt.Errorf("sitedisk: unmount %s: %w", dir, err)
			}
		}
	}
}

// Mounted reports whether dir is a mount point in this mount namespace.
func Mounted(dir string) (bool, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("sitedisk: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescape(fields[4]) == abs {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space, …).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Usage is how full a mounted site disk is, in bytes: its Size (a
// reserve included), what is Used on it (by anyone, in the reserve too)
// and what is Free for a uid without the reserve.
type Usage struct{ Size, Used, Free int64 }

// UsageOf reports the size and the free space of the disk mounted at dir,
// so a refused write can say the disk is full rather than "cannot write".
func UsageOf(dir string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, fmt.Errorf("sitedisk: %w", err)
	}
	return Usage{Size: int64(st.Blocks) * st.Bsize, Used: int64(st.Blocks-st.Bfree) * st.Bsize,
		Free: int64(st.Bavail) * st.Bsize}, nil
}

// blockSize is the disks' block size: the unit of their reserve.
const blockSize = 4096
