// Package sitearchive reads an archive of a live WordPress site that a
// tenant uploaded (tar, tar.gz, tar.zst or ZIP), checks every entry, works
// out where the site's root and wp-content are, and hands wp-content's
// files and the SQL dumps to a Handler. The archive is hostile input: a
// name or link that could leave wp-content, a device, a bomb or a second
// site is refused with an error naming the entry. The package writes
// nothing to disk except a spool file for ZIPs, which need random access.
package sitearchive

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// Limits bound what one archive may make Read do. A field that is zero or
// negative takes its value from DefaultLimits.
type Limits struct {
	// MaxEntries bounds the entries of the archive, of every kind and
	// wherever they are.
	MaxEntries int
	// MaxBytes bounds the entry data Read takes out of the archive: the
	// files and dumps handed on (a .sql.gz counts both its stored and its
	// decompressed bytes), wp-config.php and, for tar, the entries it
	// skips, since a compressed tar stream must be decompressed to skip
	// them (a ZIP's skipped entries are never read and cost nothing).
	// Declared sizes are checked before any data is read.
	MaxBytes int64
	// MaxFileBytes bounds one file or dump (a .sql.gz: stored and
	// decompressed, each).
	MaxFileBytes int64
	// MaxArchiveBytes bounds a ZIP spooled to disk.
	MaxArchiveBytes int64
}

// DefaultLimits fit the largest sites we expect to restore.
var DefaultLimits = Limits{
	MaxEntries:      1_000_000,
	MaxBytes:        32 << 30,
	MaxFileBytes:    4 << 30,
	MaxArchiveBytes: 32 << 30,
}

func (l Limits) orDefaults() Limits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultLimits.MaxEntries
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultLimits.MaxFileBytes
	}
	if l.MaxArchiveBytes <= 0 {
		l.MaxArchiveBytes = DefaultLimits.MaxArchiveBytes
	}
	return l
}

// Handler receives what Read accepts, in archive order, one call at a time
// from the goroutine that called Read. Every rel is relative to
// wp-content, slash-separated and clean: never empty, ".", "..", absolute,
// or through a symlink an earlier call made; wp-content itself is never
// passed. Parents may arrive without a Dir call, and an entry that the
// archive holds twice is passed twice. An error from any method stops Read,
// which returns it wrapped with the entry's name; a Read that fails leaves
// behind whatever the handler had been given, which the caller discards.
type Handler interface {
	// Dir makes the directory rel; mode is always fs.ModeDir|0o755.
	Dir(rel string, mode fs.FileMode) error
	// File writes the file rel with mode 0o644 or 0o755 from r, which
	// yields exactly size bytes or fails (an archive fault, which Read
	// then reports itself). r is valid only during the call; what the
	// handler leaves unread, Read discards.
	File(rel string, mode fs.FileMode, size int64, r io.Reader) error
	// Symlink makes rel a symlink to target: a clean relative path whose
	// ".." components all come first and which resolves, from rel's
	// directory, inside wp-content (or to wp-content itself), whatever
	// other symlinks it passes through.
	Symlink(rel, target string) error
	// Hardlink makes rel a hard link to target, the rel of a regular file
	// an earlier File or Hardlink call passed.
	Hardlink(rel, target string) error
	// SQL loads a dump; name is its archive path and r yields the dump's
	// SQL (decompressed if it was a .sql.gz), valid only during the call.
	SQL(name string, r io.Reader) error
}

// Summary tells the caller what Read found and handed on.
type Summary struct {
	Format      string // "tar", "tar.gz", "tar.zst" or "zip"
	Root        string // archive path of the WordPress root, "" if at the top
	WholeRoot   bool   // a wp-config.php was found at the root
	TablePrefix string // $table_prefix of that wp-config.php, "" if none
	DBCharset   string // DB_CHARSET of that wp-config.php, "" if none
	Files       int    // File calls
	Dirs        int    // Dir calls
	Links       int    // Symlink and Hardlink calls
	Bytes       int64  // bytes handed to the handler (files and dumps)
	Dumps       []string
	Skipped     int // entries outside wp-content that are neither dumps nor wp-config.php
}

// Errors that Read's errors wrap, for callers to tell the tenant what to
// fix.
var (
	// ErrUnsafe marks an entry that could reach outside the site or the
	// sandbox (a name or link that leaves it, a device) or a wp-config.php
	// value that is not a plain name.
	ErrUnsafe = errors.New("unsafe archive entry")
	// ErrTooLarge marks an archive over its Limits.
	ErrTooLarge = errors.New("archive too large")
	// ErrFormat marks an archive that is unreadable, not a kind we accept,
	// or not laid out as a WordPress site.
	ErrFormat = errors.New("unsupported archive")
)

// Read reads the archive from r, detecting its format from its first
// bytes, and hands wp-content's entries and the dumps to h. A ZIP is first
// spooled to a temporary file in spoolDir (os.TempDir() if ""), which is
// removed before Read returns. Errors wrap ErrUnsafe, ErrTooLarge or
// ErrFormat, h's error, or (spooling) the file system's; on an error the
// Summary is nil. Read does not close r; to cancel it, make r fail.
func Read(r io.Reader, spoolDir string, lim Limits, h Handler) (*Summary, error) {
	lim = lim.orDefaults()
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(blockSize)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, formatErr(err, "read archive")
	}
	f, err := detect(head)
	if err != nil {
		return nil, err
	}
	w := newWalker(lim, h, f == formatZip)
	w.sum.Format = f.String()
	switch f {
	case formatGzip:
		err = w.readGzip(br)
	case formatZstd:
		err = w.readZstd(br)
	case formatZip:
		err = w.readZip(br, spoolDir)
	default:
		err = w.readTar(br, false)
	}
	if err != nil {
		return nil, err
	}
	if err := w.finish(); err != nil {
		return nil, err
	}
	return &w.sum, nil
}

// kindError is a refusal: its message, the sentinel it belongs to and,
// for an archive that could not be read, the cause.
type kindError struct {
	kind  error
	msg   string
	cause error
}

func (e *kindError) Error() string {
	if e.cause != nil {
		return e.msg + ": " + e.cause.Error()
	}
	return e.msg
}

func (e *kindError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

func unsafe(format string, args ...any) error {
	return &kindError{kind: ErrUnsafe, msg: fmt.Sprintf(format, args...)}
}

func tooLarge(format string, args ...any) error {
	return &kindError{kind: ErrTooLarge, msg: fmt.Sprintf(format, args...)}
}

func badFormat(format string, args ...any) error {
	return &kindError{kind: ErrFormat, msg: fmt.Sprintf(format, args...)}
}

// formatErr reports an archive that could not be read; an error that is
// already one of ours passes through.
func formatErr(cause error, format string, args ...any) error {
	if isOurs(cause) {
		return cause
	}
	return &kindError{kind: ErrFormat, msg: fmt.Sprintf(format, args...), cause: cause}
}

func isOurs(err error) bool {
	return errors.Is(err, ErrUnsafe) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrFormat)
}

// entryErr names the entry an error is about. Names are quoted (a tenant
// chose them) and cut short, since a PAX name can be a megabyte long.
func entryErr(name string, err error) error {
	const max = 200
	if len(name) > max {
		name = name[:max] + "..."
	}
	return fmt.Errorf("archive entry %q: %w", name, err)
}
