// Package artifact writes and reads a template's artifact: one
// zstd-compressed tar stream holding its record (template.json), its
// database as a dump (database.sql) and its files (files/…), so any node
// can restore a template it never froze. Writing streams; reading
// extracts through an os.Root of a fresh directory, so no name or link
// in the stream (a tenant chose them) lands anywhere else, and every
// bound (entries, bytes, depth) holds while it reads.
package artifact

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"
)

// Names of the entries besides the files.
const (
	RecordName   = "template.json"
	DatabaseName = "database.sql"
	FilesDir     = "files"
)

// Limits bound what reading an artifact may make.
type Limits struct {
	Entries  int   // tar entries
	Bytes    int64 // bytes of files and database together
	Depth    int   // directory depth under files/
	Record   int64 // bytes of template.json
	Database int64 // bytes of database.sql
}

// Write streams an artifact to w: record (any JSON value), then the dump
// of database (a file the caller made), then the tree under files (the
// node's own frozen copy: links are written as links, nothing is
// followed).
func Write(w io.Writer, record any, database, files string) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	rec, err := json.Marshal(record)
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: RecordName, Mode: 0o600, Size: int64(len(rec)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(rec); err != nil {
		return err
	}
	if err := addFile(tw, DatabaseName, database); err != nil {
		return fmt.Errorf("artifact: database: %w", err)
	}
	err = filepath.WalkDir(files, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(files, p)
		if err != nil {
			return err
		}
		name := FilesDir
		if rel != "." {
			name = path.Join(FilesDir, filepath.ToSlash(rel))
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := int64(info.Mode().Perm())
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Name: name + "/", Mode: mode, Typeflag: tar.TypeDir})
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return tw.WriteHeader(&tar.Header{Name: name, Linkname: target, Mode: 0o777, Typeflag: tar.TypeSymlink})
		case d.Type().IsRegular():
			return addFile(tw, name, p)
		}
		return nil // nothing else is in a frozen tree
	})
	if err != nil {
		return fmt.Errorf("artifact: files: %w", err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func addFile(tw *tar.Writer, name, p string) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: int64(info.Mode().Perm()), Size: info.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.CopyN(tw, f, info.Size())
	return err
}

// ErrInvalid marks an artifact that is malformed or past a limit.
var ErrInvalid = errors.New("invalid template artifact")

// Read extracts an artifact into dir, which must be empty: the record is
// decoded into record, the dump lands at dir/database.sql and the tree
// under dir/files, owned by uid (modes kept, setuid bits dropped).
func Read(r io.Reader, dir string, uid int, lim Limits, record any) error {
	zr, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(64<<20), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return err
	}
	defer zr.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(zr)
	var entries int
	var total int64
	haveRecord, haveDatabase := false, false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if entries++; entries > lim.Entries {
			return fmt.Errorf("%w: more than %d entries", ErrInvalid, lim.Entries)
		}
		name := strings.TrimSuffix(h.Name, "/")
		switch {
		case name == RecordName && h.Typeflag == tar.TypeReg && !haveRecord:
			if h.Size > lim.Record {
				return fmt.Errorf("%w: record of %d bytes", ErrInvalid, h.Size)
			}
			if err := json.NewDecoder(io.LimitReader(tr, lim.Record)).Decode(record); err != nil {
				return fmt.Errorf("%w: record: %v", ErrInvalid, err)
			}
			haveRecord = true
		case name == DatabaseName && h.Typeflag == tar.TypeReg && !haveDatabase:
			if h.Size > lim.Database {
				return fmt.Errorf("%w: database dump of %d bytes is over %d", ErrInvalid, h.Size, lim.Database)
			}
			if total += h.Size; total > lim.Bytes {
				return fmt.Errorf("%w: over %d bytes", ErrInvalid, lim.Bytes)
			}
			if err := extractFile(root, DatabaseName, 0o600, -1, tr, h.Size); err != nil {
				return err
			}
			haveDatabase = true
		case name == FilesDir || strings.HasPrefix(name, FilesDir+"/"):
			if !validName(name) || strings.Count(name, "/") > lim.Depth {
				return fmt.Errorf("%w: entry %q", ErrInvalid, h.Name)
			}
			if h.Typeflag == tar.TypeReg {
				if total += h.Size; total > lim.Bytes {
					return fmt.Errorf("%w: over %d bytes", ErrInvalid, lim.Bytes)
				}
			}
			if err := extract(root, name, h, tr, uid); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: unexpected entry %q", ErrInvalid, h.Name)
		}
	}
	if !haveRecord || !haveDatabase {
		return fmt.Errorf("%w: no record or no database", ErrInvalid)
	}
	return nil
}

// validName refuses absolute names, empty, dot and dot-dot components.
func validName(name string) bool {
	if strings.HasPrefix(name, "/") {
		return false
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}

func extract(root *os.Root, name string, h *tar.Header, r io.Reader, uid int) error {
	mode := os.FileMode(h.Mode).Perm() // no setuid, setgid or sticky bit
	switch h.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("artifact: %s: %w", name, err)
		}
		if err := root.Lchown(name, uid, uid); err != nil {
			return err
		}
		return root.Chmod(name, mode)
	case tar.TypeReg:
		return extractFile(root, name, mode, uid, r, h.Size)
	case tar.TypeSymlink:
		if err := root.Symlink(h.Linkname, name); err != nil {
			return fmt.Errorf("artifact: %s: %w", name, err)
		}
		return root.Lchown(name, uid, uid)
	}
	return nil // devices, FIFOs and hard links are never in a frozen tree
}

// extractFile writes a new file (never an existing one, never through a
// link) of exactly size bytes; uid -1 leaves it root's.
func extractFile(root *os.Root, name string, mode os.FileMode, uid int, r io.Reader, size int64) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("artifact: %s: %w", name, err)
	}
	_, err = io.CopyN(f, r, size)
	if err == nil && uid >= 0 {
		err = f.Chown(uid, uid)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("artifact: %s: %w", name, err)
	}
	return nil
}
