package sitefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// TreeLimits bound a copy out of a tenant's tree.
type TreeLimits struct {
	Files int   // entries of any kind
	Bytes int64 // bytes of regular files
	Depth int   // directory nesting
}

// ErrTreeTooLarge means a tree passed one of its TreeLimits.
var ErrTreeTooLarge = errors.New("tree over its limits")

// TreeStats is what a copy took.
type TreeStats struct {
	Files, Dirs, Symlinks, Skipped int
	Bytes                          int64
}

// CopyTree copies the tree at src, which a tenant can write, into dst,
// which must not exist, as root and safely: every step is taken from an
// open directory with O_NOFOLLOW, so a directory swapped for a link
// mid-copy fails the copy instead of leading it out; symlinks are copied
// as links, never followed; FIFOs, sockets and devices are skipped;
// setuid, setgid and sticky bits are dropped; every entry of dst belongs
// to uid. A failed copy removes what it wrote.
func CopyTree(src, dst string, uid int, lim TreeLimits) (st TreeStats, err error) {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return st, fmt.Errorf("copy tree: open %s: %w", src, err)
	}
	defer unix.Close(sfd)
	if err := os.Mkdir(dst, 0o755); err != nil {
		return st, fmt.Errorf("copy tree: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dst)
		}
	}()
	root, err := os.OpenRoot(dst)
	if err != nil {
		return st, err
	}
	defer root.Close()
	c := &treeCopy{root: root, uid: uid, lim: lim, st: &st}
	if err := root.Lchown(".", uid, uid); err != nil {
		return st, err
	}
	return st, c.dir(sfd, ".", 0)
}

type treeCopy struct {
	root *os.Root
	uid  int
	lim  TreeLimits
	st   *TreeStats
}

func (c *treeCopy) count(bytes int64) error {
	c.st.Bytes += bytes
	if n := c.st.Files + c.st.Dirs + c.st.Symlinks + c.st.Skipped; (c.lim.Files > 0 && n > c.lim.Files) ||
		(c.lim.Bytes > 0 && c.st.Bytes > c.lim.Bytes) {
		return ErrTreeTooLarge
	}
	return nil
}

// dir copies the entries of the open directory fd into rel.
func (c *treeCopy) dir(fd int, rel string, depth int) error {
	if c.lim.Depth > 0 && depth > c.lim.Depth {
		return fmt.Errorf("%s: %w (deeper than %d)", rel, ErrTreeTooLarge, c.lim.Depth)
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), rel)
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", rel, err)
	}
	for _, name := range names {
		var fst unix.Stat_t
		if err := unix.Fstatat(fd, name, &fst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", path.Join(rel, name), err)
		}
		to := path.Join(rel, name)
		perm := os.FileMode(fst.Mode & 0o777)
		switch fst.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			c.st.Dirs++
			if err := c.count(0); err != nil {
				return err
			}
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open %s: %w", to, err)
			}
			err = c.root.Mkdir(to, perm|0o700)
			if err == nil {
				err = c.dir(sub, to, depth+1)
			}
			unix.Close(sub)
			if err != nil {
				return err
			}
			if err := c.root.Chmod(to, perm); err != nil {
				return err
			}
			if err := c.root.Lchown(to, c.uid, c.uid); err != nil {
				return err
			}
		case unix.S_IFREG:
			c.st.Files++
			if err := c.count(fst.Size); err != nil {
				return err
			}
			if err := c.file(fd, name, to, perm, fst.Size); err != nil {
				return err
			}
		case unix.S_IFLNK:
			c.st.Symlinks++
			if err := c.count(0); err != nil {
				return err
			}
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(fd, name, buf)
			if err != nil {
				return fmt.Errorf("readlink %s: %w", to, err)
			}
			if err := c.root.Symlink(string(buf[:n]), to); err != nil {
				return err
			}
			if err := c.root.Lchown(to, c.uid, c.uid); err != nil {
				return err
			}
		default:
			c.st.Skipped++
			if err := c.count(0); err != nil {
				return err
			}
		}
	}
	return nil
}

// file copies one regular file, checking on the open descriptor that it
// still is one and copying no more than was counted for it.
func (c *treeCopy) file(dirfd int, name, to string, perm os.FileMode, counted int64) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", to, err)
	}
	in := os.NewFile(uintptr(fd), to)
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: %w", to, ErrNotRegular)
	}
	out, err := c.root.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	// A file that grew since it was counted is copied up to that size.
	_, err = io.Copy(out, io.LimitReader(in, min(st.Size, counted)))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", to, err)
	}
	if err := c.root.Chmod(to, perm); err != nil {
		return err
	}
	return c.root.Lchown(to, c.uid, c.uid)
}
