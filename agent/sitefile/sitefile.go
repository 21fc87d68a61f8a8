// Package sitefile reads files inside a tree a tenant can write, from the
// host, as root, safely: the path is resolved beneath the tree with no
// symlink, magic link or mount crossing (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), the file
// must be a regular file (a FIFO or device the site planted neither blocks
// nor is read), and no read takes more than a stated number of bytes.
package sitefile

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular means the path names something other than a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrUnsafePath means resolving the path would cross a symlink, a mount or
// leave the tree.
var ErrUnsafePath = errors.New("path leaves the tree or crosses a link")

// Open opens rel beneath dir for reading under the rules above.
func Open(dir, rel string) (*os.File, error) {
	d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(d)
	fd, err := unix.Openat2(d, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("open %s: %w", rel, os.ErrNotExist)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("open %s: %w", rel, ErrUnsafePath)
	case err != nil:
		return nil, fmt.Errorf("open %s: %w", rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("open %s: %w", rel, ErrNotRegular)
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// Tail returns at most max bytes from the end of rel beneath dir, and
// whether the file held more. A 4 GiB sparse file costs one seek.
func Tail(dir, rel string, max int64) (data []byte, truncated bool, err error) {
	f, err := Open(dir, rel)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, false, err
	}
	start := max64(0, size-max)
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return nil, false, err
	}
	data, err = io.ReadAll(io.LimitReader(f, max))
	return data, start > 0, err
}

// Head returns at most max bytes from the start of rel beneath dir, and
// whether the file held more.
func Head(dir, rel string, max int64) (data []byte, truncated bool, err error) {
	f, err := Open(dir, rel)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, max+1))
	if int64(len(data)) > max {
		return data[:max], true, err
	}
	return data, false, err
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
