// Package importarchive reads an uploaded archive of a WordPress site
// (tar, tar.gz, tar.zst or ZIP holding SQL dumps and wp-content/, or a
// whole WordPress root) and hands a handler its checked parts:
// wp-content's directories, files and links relative to wp-content, and
// the dumps. The archive is a tenant's and hostile: names that leave it,
// absolute names, links pointing out of wp-content, devices, and size or
// entry bombs are refused with an error naming the entry. It writes
// nothing but the spool file a ZIP needs.
package importarchive

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Errors wrapped by what Read returns.
var (
	// ErrUnsafe is an entry that would reach outside the site.
	ErrUnsafe = errors.New("unsafe archive entry")
	// ErrTooLarge is an archive past its Limits.
	ErrTooLarge = errors.New("archive too large")
	// ErrFormat is input that is not a supported archive of a site.
	ErrFormat = errors.New("not a usable site archive")
)

// Limits bound what one archive may unpack.
type Limits struct {
	MaxEntries      int
	MaxBytes        int64 // every file and dump, uncompressed
	MaxFileBytes    int64 // one file
	MaxArchiveBytes int64 // a spooled ZIP
}

// DefaultLimits suit a large WordPress site.
var DefaultLimits = Limits{MaxEntries: 1_000_000, MaxBytes: 32 << 30, MaxFileBytes: 4 << 30, MaxArchiveBytes: 32 << 30}

// Handler takes the archive's checked parts, in archive order. rel names
// are relative to wp-content, slash-separated and clean.
type Handler interface {
	Dir(rel string, mode fs.FileMode) error
	// File must read r, which yields exactly size bytes.
	File(rel string, mode fs.FileMode, size int64, r io.Reader) error
	// Symlink's target stays inside wp-content.
	Symlink(rel, target string) error
	// Hardlink's target is an earlier file's rel.
	Hardlink(rel, target string) error
	// SQL takes a dump, decompressed if it was .sql.gz.
	SQL(name string, r io.Reader) error
}

// Summary is what the archive held.
type Summary struct {
	Format      string
	Root        string
	WholeRoot   bool
	TablePrefix string
	DBCharset   string
	Files       int
	Dirs        int
	Links       int
	Bytes       int64
	Dumps       []string
	Skipped     int
}

// reader is one Read in progress.
type reader struct {
	lim      Limits
	h        Handler
	sum      Summary
	entries  int
	rootSet  bool
	files    map[string]bool
	configs  []config
	zipNames bool
	// unpacked is what has been decompressed, for MaxBytes.
	unpacked int64
}

// config is a wp-config.php seen in the archive.
type config struct {
	dir  string
	data []byte
}

// Read reads the archive r, spooling a ZIP in spoolDir, and hands its
// parts to h.
func Read(r io.Reader, spoolDir string, lim Limits, h Handler) (*Summary, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(512)
	rd := &reader{lim: lim, h: h, files: map[string]bool{}}
	var err error
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		rd.sum.Format = "tar.gz"
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(br); err != nil {
			return nil, fmt.Errorf("%w: bad gzip stream: %v", ErrFormat, err)
		}
		err = rd.tar(zr)
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		rd.sum.Format = "tar.zst"
		zr, zerr := zstd.NewReader(br, zstd.WithDecoderMaxMemory(1<<30), zstd.WithDecoderMaxWindow(1<<27), zstd.WithDecoderConcurrency(1))
		if zerr != nil {
			return nil, fmt.Errorf("%w: bad zstd stream: %v", ErrFormat, zerr)
		}
		defer zr.Close()
		err = rd.tar(zr)
	case bytes.HasPrefix(head, []byte("PK\x03\x04")) || bytes.HasPrefix(head, []byte("PK\x05\x06")):
		rd.sum.Format = "zip"
		err = rd.zip(br, spoolDir)
	case len(head) >= 262 && string(head[257:262]) == "ustar":
		rd.sum.Format = "tar"
		err = rd.tar(br)
	case bytes.HasPrefix(head, []byte("BZh")):
		return nil, fmt.Errorf("%w: bzip2 is not supported: send tar, tar.gz, tar.zst or ZIP", ErrFormat)
	case bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return nil, fmt.Errorf("%w: xz is not supported: send tar, tar.gz, tar.zst or ZIP", ErrFormat)
	case bytes.HasPrefix(head, []byte{'7', 'z', 0xbc, 0xaf}):
		return nil, fmt.Errorf("%w: 7z is not supported: send tar, tar.gz, tar.zst or ZIP", ErrFormat)
	case bytes.HasPrefix(head, []byte("Rar!")):
		return nil, fmt.Errorf("%w: RAR is not supported: send tar, tar.gz, tar.zst or ZIP", ErrFormat)
	case len(head) >= 512 && tarChecksumOK(head):
		rd.sum.Format = "tar" // an old (v7) tar
		err = rd.tar(br)
	default:
		return nil, fmt.Errorf("%w: not a tar, tar.gz, tar.zst or ZIP archive", ErrFormat)
	}
	if err != nil {
		return nil, err
	}
	return rd.finish()
}

// tarChecksumOK reports whether a 512-byte block is a tar header.
func tarChecksumOK(b []byte) bool {
	var sum int64
	for i, c := range b[:512] {
		if i >= 148 && i < 156 {
			c = ' '
		}
		sum += int64(c)
	}
	var want int64
	if _, err := fmt.Sscanf(strings.Trim(string(b[148:156]), " \x00"), "%o", &want); err != nil {
		return false
	}
	return sum == want
}

func (rd *reader) tar(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if rd.entries == 0 {
				return fmt.Errorf("%w: the stream does not hold a tar archive (%v)", ErrFormat, err)
			}
			return fmt.Errorf("%w: after %d entries: %v", ErrFormat, rd.entries, err)
		}
		var kind byte
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeGNUSparse:
			kind = 'f'
		case tar.TypeDir:
			kind = 'd'
		case tar.TypeSymlink:
			kind = 'l'
		case tar.TypeLink:
			kind = 'h'
		case tar.TypeXGlobalHeader:
			continue
		default:
			kind = '?'
		}
		if err := rd.entry(hdr.Name, kind, hdr.Linkname, fs.FileMode(hdr.Mode).Perm(), func() io.Reader { return tr }, hdr.Size); err != nil {
			return err
		}
	}
}

func (rd *reader) zip(r io.Reader, spoolDir string) error {
	f, err := os.CreateTemp(spoolDir, "import-*.zip")
	if err != nil {
		return fmt.Errorf("spool the ZIP: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(r, rd.lim.MaxArchiveBytes+1))
	if err != nil {
		return fmt.Errorf("spool the ZIP: %w", err)
	}
	if n > rd.lim.MaxArchiveBytes {
		return fmt.Errorf("%w: a ZIP may hold at most %d bytes", ErrTooLarge, rd.lim.MaxArchiveBytes)
	}
	zr, err := zip.NewReader(f, n)
	if err != nil {
		return fmt.Errorf("%w: bad ZIP: %v", ErrFormat, err)
	}
	if len(zr.File) > rd.lim.MaxEntries {
		return fmt.Errorf("%w: the ZIP has %d entries; at most %d", ErrTooLarge, len(zr.File), rd.lim.MaxEntries)
	}
	rd.zipNames = true
	for _, zf := range zr.File {
		mode := zf.Mode()
		kind := byte('f')
		switch {
		case mode.IsDir() || strings.HasSuffix(zf.Name, "/"):
			kind = 'd'
		case mode&fs.ModeSymlink != 0:
			kind = 'l'
		case !mode.IsRegular():
			kind = '?'
		}
		var rc io.ReadCloser
		open := func() io.Reader {
			var err error
			if rc, err = zf.Open(); err != nil {
				return errReader{fmt.Errorf("%w: entry %q: %v", ErrFormat, zf.Name, err)}
			}
			return rc
		}
		size := int64(zf.UncompressedSize64)
		if zf.UncompressedSize64 > 1<<62 {
			size = 1 << 62
		}
		link := ""
		if kind == 'l' {
			data, err := io.ReadAll(io.LimitReader(open(), 4097))
			if rc != nil {
				rc.Close()
				rc = nil
			}
			if err != nil || len(data) > 4096 {
				return fmt.Errorf("%w: archive entry %q: a bad symlink", ErrUnsafe, zf.Name)
			}
			link = string(data)
		}
		err := rd.entry(zf.Name, kind, link, mode.Perm(), open, size)
		if rc != nil {
			rc.Close()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// clean checks and normalises an entry name.
func (rd *reader) clean(name string) ([]string, error) {
	unsafe := func(why string) error { return fmt.Errorf("%w: archive entry %q: %s", ErrUnsafe, name, why) }
	n := name
	if rd.zipNames {
		n = strings.ReplaceAll(n, `\`, "/")
	}
	switch {
	case strings.ContainsRune(n, 0):
		return nil, unsafe("a NUL byte in its name")
	case len(n) > 4096:
		return nil, unsafe("name longer than 4096 bytes")
	case strings.HasPrefix(n, "/"):
		return nil, unsafe("an absolute name")
	case len(n) >= 2 && n[1] == ':' && ((n[0] >= 'a' && n[0] <= 'z') || (n[0] >= 'A' && n[0] <= 'Z')):
		return nil, unsafe("an absolute name (a drive)")
	}
	var parts []string
	for _, p := range strings.Split(n, "/") {
		switch {
		case p == "" || p == ".":
			continue
		case p == "..":
			return nil, unsafe("name leaves the archive (..)")
		case len(p) > 255:
			return nil, unsafe("a name component longer than 255 bytes")
		}
		parts = append(parts, p)
	}
	if len(parts) > 64 {
		return nil, unsafe("more than 64 levels deep")
	}
	return parts, nil
}

var sqlName = regexp.MustCompile(`(?i)\.sql(\.gz)?$`)

// entry takes one entry: kind f(ile), d(ir), l(symlink), h(ardlink) or
// ? (anything else), whose data open yields (declared bytes of it).
func (rd *reader) entry(name string, kind byte, link string, mode fs.FileMode, open func() io.Reader, declared int64) error {
	rd.entries++
	if rd.entries > rd.lim.MaxEntries {
		return fmt.Errorf("%w: more than %d entries", ErrTooLarge, rd.lim.MaxEntries)
	}
	parts, err := rd.clean(name)
	if err != nil || len(parts) == 0 {
		return err
	}
	if kind == 'f' {
		// Every file is decompressed, kept or not: its declared size
		// counts before a byte of it is read.
		if err := rd.budget(name, declared); err != nil {
			return err
		}
		rd.unpacked += declared
	}
	wc := -1
	for i, p := range parts {
		if p == "wp-content" {
			wc = i
			break
		}
	}
	if wc < 0 {
		base := parts[len(parts)-1]
		switch {
		case kind == 'f' && sqlName.MatchString(base):
			return rd.dump(name, open(), base, declared)
		case kind == 'f' && base == "wp-config.php":
			if declared <= 1<<20 {
				data, err := io.ReadAll(io.LimitReader(open(), 1<<20))
				if err != nil {
					return fmt.Errorf("%w: entry %q: %v", ErrFormat, name, err)
				}
				rd.configs = append(rd.configs, config{dir: strings.Join(parts[:len(parts)-1], "/"), data: data})
			}
			return nil
		case kind == '?':
			return fmt.Errorf("%w: archive entry %q: not a file, directory or link", ErrUnsafe, name)
		case kind == 'l' || kind == 'h':
			// Links outside wp-content are not kept; one that points out
			// is still named for what it is.
			rd.sum.Skipped++
			return nil
		}
		rd.sum.Skipped++
		return nil
	}
	root := strings.Join(parts[:wc], "/")
	if !rd.rootSet {
		rd.rootSet, rd.sum.Root = true, root
	} else if root != rd.sum.Root {
		return fmt.Errorf("%w: archive holds more than one WordPress root (%q and %q)", ErrFormat, rd.sum.Root+"/", root+"/")
	}
	rel := strings.Join(parts[wc+1:], "/")
	if rel == "" {
		return nil // wp-content itself
	}
	wrap := func(err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("archive entry %q: %w", name, err)
	}
	switch kind {
	case 'd':
		rd.sum.Dirs++
		return wrap(rd.h.Dir(rel, 0o755))
	case 'f':
		perm := fs.FileMode(0o644)
		if mode&0o111 != 0 {
			perm = 0o755
		}
		rd.sum.Files++
		rd.files[rel] = true
		cr := &exact{r: open(), left: declared, name: name}
		if err := rd.h.File(rel, perm, declared, cr); err != nil {
			return wrap(err)
		}
		if _, err := io.Copy(io.Discard, cr); err != nil {
			return err
		}
		rd.sum.Bytes += declared
		return nil
	case 'l':
		if link == "" || strings.HasPrefix(link, "/") || strings.ContainsRune(link, 0) ||
			(len(link) >= 2 && link[1] == ':') || strings.Contains(link, `\`) {
			return fmt.Errorf("%w: archive entry %q: symlink points outside the site (%q)", ErrUnsafe, name, link)
		}
		to := path.Clean(path.Join(path.Dir(rel), link))
		if to == ".." || strings.HasPrefix(to, "../") {
			return fmt.Errorf("%w: archive entry %q: symlink points outside the site (%q)", ErrUnsafe, name, link)
		}
		rd.sum.Links++
		return wrap(rd.h.Symlink(rel, link))
	case 'h':
		tparts, err := rd.clean(link)
		if err != nil {
			return fmt.Errorf("%w: archive entry %q: hardlink to %q points outside the site", ErrUnsafe, name, link)
		}
		ti := -1
		for i, p := range tparts {
			if p == "wp-content" {
				ti = i
				break
			}
		}
		if ti < 0 || strings.Join(tparts[:ti], "/") != root || !rd.files[strings.Join(tparts[ti+1:], "/")] {
			return fmt.Errorf("%w: archive entry %q: hardlink to %q points outside the site's files", ErrUnsafe, name, link)
		}
		rd.sum.Links++
		target := strings.Join(tparts[ti+1:], "/")
		rd.files[rel] = true
		return wrap(rd.h.Hardlink(rel, target))
	}
	return fmt.Errorf("%w: archive entry %q: not a file, directory or link", ErrUnsafe, name)
}

// budget checks a file's declared size before a byte of it is read.
func (rd *reader) budget(name string, size int64) error {
	if size > rd.lim.MaxFileBytes {
		return fmt.Errorf("%w: archive entry %q holds %d bytes; a file may hold at most %d", ErrTooLarge, name, size, rd.lim.MaxFileBytes)
	}
	if rd.unpacked+size > rd.lim.MaxBytes {
		return fmt.Errorf("%w: the archive unpacks to more than %d bytes (at %q)", ErrTooLarge, rd.lim.MaxBytes, name)
	}
	return nil
}

// dump hands a SQL dump on, decompressing .sql.gz within the budget.
func (rd *reader) dump(name string, r io.Reader, base string, declared int64) error {
	var src io.Reader = &exact{r: r, left: declared, name: name}
	if strings.HasSuffix(strings.ToLower(base), ".gz") {
		zr, err := gzip.NewReader(src)
		if err != nil {
			return fmt.Errorf("%w: archive entry %q: bad gzip: %v", ErrFormat, name, err)
		}
		src = zr
	}
	cr := &budgeted{r: src, left: rd.lim.MaxBytes - rd.unpacked + declared, name: name}
	err := rd.h.SQL(name, cr)
	rd.sum.Bytes += cr.read
	rd.unpacked += max(0, cr.read-declared)
	if err != nil {
		return fmt.Errorf("archive entry %q: %w", name, err)
	}
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return err
	}
	rd.sum.Dumps = append(rd.sum.Dumps, name)
	return nil
}

// exact yields exactly left bytes of r; an entry whose data runs past
// or short of what it declared is refused.
type exact struct {
	r    io.Reader
	left int64
	name string
}

func (e *exact) Read(p []byte) (int, error) {
	if e.left <= 0 {
		// The entry must end here: more bytes (or a checksum error) mean
		// its declared size lied.
		var one [1]byte
		if n, err := e.r.Read(one[:]); n > 0 || (err != nil && !errors.Is(err, io.EOF)) {
			return 0, fmt.Errorf("%w: archive entry %q holds more than it says", ErrTooLarge, e.name)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if errors.Is(err, io.EOF) && e.left > 0 {
		return n, fmt.Errorf("%w: archive entry %q is shorter than it says", ErrFormat, e.name)
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// budgeted fails once more than left bytes were read.
type budgeted struct {
	r    io.Reader
	left int64
	read int64
	name string
}

func (b *budgeted) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += int64(n)
	if b.read > b.left {
		return 0, fmt.Errorf("%w: the dump %q unpacks to more than the archive may", ErrTooLarge, b.name)
	}
	return n, err
}

var (
	prefixRE  = regexp.MustCompile(`\$table_prefix\s*=\s*(['"])([^'"]*)['"]\s*;`)
	charsetRE = regexp.MustCompile(`define\s*\(\s*['"]DB_CHARSET['"]\s*,\s*['"]([^'"]*)['"]\s*\)`)
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9_]{1,32}$`)
)

// finish picks the root's wp-config.php and checks the archive had a site.
func (rd *reader) finish() (*Summary, error) {
	var cfg *config
	for i := range rd.configs {
		c := &rd.configs[i]
		if rd.rootSet && c.dir == rd.sum.Root {
			cfg = c
			break
		}
		if !rd.rootSet && (cfg == nil || strings.Count(c.dir, "/") < strings.Count(cfg.dir, "/")) {
			cfg = c
		}
	}
	if cfg != nil {
		rd.sum.WholeRoot = true
		if m := prefixRE.FindSubmatch(cfg.data); m != nil {
			if !nameRE.Match(m[2]) {
				return nil, fmt.Errorf("%w: wp-config.php's $table_prefix is not a table prefix (letters, digits and _ only)", ErrFormat)
			}
			rd.sum.TablePrefix = string(m[2])
		}
		if m := charsetRE.FindSubmatch(cfg.data); m != nil && len(m[1]) > 0 {
			if !nameRE.Match(m[1]) {
				return nil, fmt.Errorf("%w: wp-config.php's DB_CHARSET is not a character set name", ErrFormat)
			}
			rd.sum.DBCharset = string(m[1])
		}
	}
	if !rd.rootSet && len(rd.sum.Dumps) == 0 {
		return nil, fmt.Errorf("%w: the archive holds neither wp-content/ nor a .sql dump", ErrFormat)
	}
	return &rd.sum, nil
}
