// Package diskstore keeps the sites' disk images where a copy of one is
// a reference to its blocks (a reflink): a checkpoint or a fork of a
// site then costs what changes afterwards, not a copy of its disk, and
// takes the same few milliseconds for a site of ten thousand posts as
// for a fresh one.
//
// A node whose data directory lies on a filesystem that clones (XFS
// made with reflink, btrfs) keeps its images there. Elsewhere (ext4)
// Prepare makes the images' directory the mount point of an XFS image of
// the node's own, sparse and as large as the filesystem under it, with
// discard so that what sites free goes back to the host. A directory
// that already holds images and cannot clone (a node from before) is
// left as it is, and its clones are copies.
package diskstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/agent/sitedisk"
)

// Store is where a node's site disks are.
type Store struct {
	Dir string
	// Cloning says a clone in Dir is a reflink; false: a copy.
	Cloning bool
	// Image is the XFS image mounted at Dir, "" when Dir is the data
	// directory's own filesystem.
	Image string
}

// Prepare makes dir able to clone files, mounting the XFS image img on
// it when its own filesystem cannot: the one made before, or a new one
// when dir is empty. It is idempotent: a store already mounted is kept.
func Prepare(dir, img string) (Store, error) {
	st := Store{Dir: dir}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return st, fmt.Errorf("diskstore: %w", err)
	}
	mounted, err := sitedisk.Mounted(dir)
	if err != nil {
		return st, err
	}
	if !mounted {
		if ok, err := CanClone(dir); err != nil || ok {
			st.Cloning = ok
			return st, err
		}
		if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
			ents, err := os.ReadDir(dir)
			if err != nil {
				return st, fmt.Errorf("diskstore: %w", err)
			}
			if len(ents) > 0 {
				return st, nil // images from before: copies
			}
			if err := makeImage(img, filepath.Dir(dir)); err != nil {
				return st, err
			}
		} else if err != nil {
			return st, fmt.Errorf("diskstore: %w", err)
		}
		if err := sitedisk.MountImage(img, dir, "xfs"); err != nil {
			return st, fmt.Errorf("diskstore: %w", err)
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return st, fmt.Errorf("diskstore: %w", err)
		}
	}
	if _, err := os.Stat(img); err == nil {
		st.Image = img
	}
	ok, err := CanClone(dir)
	st.Cloning = ok
	return st, err
}

// minImage is the smallest store made (XFS wants 300 MiB at least).
const minImage = 1 << 30

// makeImage makes a sparse XFS image as large as the filesystem holding
// under, with reflink on; written under a temporary name first.
func makeImage(img, under string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(under, &fs); err != nil {
		return fmt.Errorf("diskstore: %w", err)
	}
	size := max(int64(fs.Blocks)*fs.Bsize, minImage)
	tmp := img + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("diskstore: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The smallest log XFS takes; no discard of a file that is all hole.
		var out []byte
		out, err = exec.Command("mkfs.xfs", "-q", "-f", "-K", "-m", "reflink=1", "-l", "size=64m", tmp).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("mkfs.xfs: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		err = os.Rename(tmp, img)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("diskstore: %w", err)
	}
	return nil
}

// Unmount takes the store mounted at dir down (after every disk in it);
// nothing mounted is fine.
func Unmount(dir string) error { return sitedisk.Unmount(dir) }

// CanClone reports whether files in dir can be cloned by reference.
func CanClone(dir string) (bool, error) {
	a, err := os.CreateTemp(dir, ".clone-probe-*")
	if err != nil {
		return false, fmt.Errorf("diskstore: %w", err)
	}
	defer os.Remove(a.Name())
	defer a.Close()
	if _, err := a.Write(make([]byte, 4096)); err != nil {
		return false, fmt.Errorf("diskstore: %w", err)
	}
	b, err := os.CreateTemp(dir, ".clone-probe-*")
	if err != nil {
		return false, fmt.Errorf("diskstore: %w", err)
	}
	defer os.Remove(b.Name())
	defer b.Close()
	return unix.IoctlFileClone(int(b.Fd()), int(a.Fd())) == nil, nil
}

// Clone makes dst (which must not exist) a copy of src: a reflink where
// the filesystem can, else a copy of src's data that keeps its holes.
// It reports whether it was a reflink. dst is written under a
// temporary name and renamed, so a failed clone leaves nothing.
func Clone(dst, src string) (reflink bool, err error) {
	in, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("diskstore: %w", err)
	}
	defer in.Close()
	tmp := dst + ".part"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return false, fmt.Errorf("diskstore: %w", err)
	}
	defer os.Remove(tmp)
	err = unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
	reflink = err == nil
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
		err = copySparse(out, in)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		return false, fmt.Errorf("diskstore: clone %s: %w", filepath.Base(src), err)
	}
	return reflink, nil
}

// copySparse copies in's data regions to out, leaving its holes holes.
func copySparse(out, in *os.File) error {
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if err := out.Truncate(size); err != nil {
		return err
	}
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole left
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(out, in, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// Ioctl numbers Go's unix package does not name.
const (
	fiFreeze   = 0xC0045877 // FIFREEZE: _IOWR('X', 119, int)
	fiThaw     = 0xC0045878 // FITHAW: _IOWR('X', 120, int)
	fsIocMap   = 0xC020660B // FS_IOC_FIEMAP: _IOWR('f', 11, struct fiemap)
	fiemapSync = 0x1        // FIEMAP_FLAG_SYNC
	extentLast = 0x1        // FIEMAP_EXTENT_LAST
	extUnwrit  = 0x800      // FIEMAP_EXTENT_UNWRITTEN: allocated ahead, no data
	extShared  = 0x2000     // FIEMAP_EXTENT_SHARED
)

// Freeze writes out and freezes the filesystem mounted at dir, so that a
// clone of its image is as it would be unmounted; writers wait until
// thaw. thaw must be called, and may be called more than once, from any
// goroutine.
func Freeze(dir string) (thaw func() error, err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("diskstore: %w", err)
	}
	// Most of the writing out happens here, while writers still go on:
	// the freeze itself then has little left to do.
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		f.Close()
		return nil, fmt.Errorf("diskstore: sync %s: %w", dir, err)
	}
	if _, err := unix.IoctlRetInt(int(f.Fd()), fiFreeze); err != nil {
		f.Close()
		return nil, fmt.Errorf("diskstore: freeze %s: %w", dir, err)
	}
	var once sync.Once
	var terr error
	return func() error {
		once.Do(func() {
			defer f.Close()
			if _, err := unix.IoctlRetInt(int(f.Fd()), fiThaw); err != nil {
				terr = fmt.Errorf("diskstore: thaw %s: %w", dir, err)
			}
		})
		return terr
	}, nil
}

// Free is how many bytes the filesystem holding path has free for root.
func Free(path string) (free, size int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("diskstore: %w", err)
	}
	return int64(st.Bfree) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// Thaw thaws the filesystem mounted at dir if it is frozen (an agent
// that stopped between a freeze and its thaw).
func Thaw(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("diskstore: %w", err)
	}
	defer f.Close()
	if _, err := unix.IoctlRetInt(int(f.Fd()), fiThaw); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("diskstore: thaw %s: %w", dir, err)
	}
	return nil
}

// fiemap is struct fiemap with room for a batch of extents.
type fiemap struct {
	Start, Length                  uint64
	Flags, Mapped, Count, reserved uint32
	Extents                        [fiemapBatch]fiemapExtent
}

type fiemapExtent struct {
	Logical, Physical, Length uint64
	reserved64                [2]uint64
	Flags                     uint32
	reserved                  [3]uint32
}

const fiemapBatch = 256

// Exclusive is how many bytes of path's data no other file shares: what
// deleting it gives back (space allocated ahead of writes aside).
func Exclusive(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("diskstore: %w", err)
	}
	defer f.Close()
	var total int64
	for start := uint64(0); ; {
		m := fiemap{Start: start, Length: ^uint64(0) - start, Flags: fiemapSync, Count: fiemapBatch}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocMap, uintptr(unsafe.Pointer(&m))); e != 0 {
			return 0, fmt.Errorf("diskstore: extents of %s: %w", filepath.Base(path), e)
		}
		if m.Mapped == 0 {
			return total, nil
		}
		for _, e := range m.Extents[:m.Mapped] {
			if e.Flags&(extShared|extUnwrit) == 0 {
				total += int64(e.Length)
			}
			if e.Flags&extentLast != 0 {
				return total, nil
			}
			start = e.Logical + e.Length
		}
	}
}
