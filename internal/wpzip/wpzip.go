// Package wpzip inspects a WordPress plugin or theme ZIP before anything
// unpacks it: it refuses paths that leave the target directory, symlinks,
// and size or entry-count bombs (every entry is decompressed against the
// limits, so declared sizes cannot lie), and it reads the plugin's or
// theme's header to learn what the ZIP holds.
package wpzip

import (
	"archive/zip"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
)

// Limits bound what a ZIP may expand to.
type Limits struct {
	MaxEntries int
	// MaxBytes bounds the sum of the decompressed entries.
	MaxBytes int64
}

// MaxZipBytes bounds a plugin or theme ZIP itself, however it arrives
// (upload, repository release or URL).
const MaxZipBytes = 64 << 20

// DefaultLimits fit any real plugin or theme (the largest on the public
// directory are well under 100 MiB unpacked).
var DefaultLimits = Limits{MaxEntries: 20000, MaxBytes: 256 << 20}

// ErrInvalid marks every refusal; the message says why.
var ErrInvalid = errors.New("invalid plugin or theme ZIP")

// Info is what a checked ZIP holds.
type Info struct {
	// Kind is plugin or theme.
	Kind string
	// Name and Version come from the WordPress header.
	Name, Version string
	// Dir is the directory it installs as under wp-content/plugins or
	// wp-content/themes (for a single-file plugin, the file's base name).
	Dir string
	// MainFile is the header file relative to the ZIP root.
	MainFile string
	// Entries and Bytes are the counted totals.
	Entries int
	Bytes   int64
}

var dirRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// Inspect checks a ZIP and reads its header.
func Inspect(data []byte, lim Limits) (*Info, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, fmt.Errorf("%w: not a ZIP archive: %v", ErrInvalid, err)
	}
	if len(zr.File) == 0 {
		return nil, fmt.Errorf("%w: the archive is empty", ErrInvalid)
	}
	if len(zr.File) > lim.MaxEntries {
		return nil, fmt.Errorf("%w: %d entries; the limit is %d", ErrInvalid, len(zr.File), lim.MaxEntries)
	}
	info := &Info{Entries: len(zr.File)}
	tops := map[string]bool{}
	var rootFiles []string
	headers := map[string][]byte{} // candidate header files → first 8 KiB
	for _, f := range zr.File {
		name, err := entryName(f)
		if err != nil {
			return nil, err
		}
		if name == "" {
			continue
		}
		top, rest, nested := strings.Cut(name, "/")
		tops[top] = true
		if !nested && !f.Mode().IsDir() {
			rootFiles = append(rootFiles, top)
		}
		if f.Mode().IsDir() {
			continue
		}
		n, head, err := drain(f, lim.MaxBytes-info.Bytes)
		if err != nil {
			return nil, err
		}
		info.Bytes += n
		// Headers live in a top-level PHP file or style.css, or one
		// directory down.
		if (!nested || !strings.Contains(rest, "/")) && (strings.HasSuffix(name, ".php") || path.Base(name) == "style.css") {
			headers[name] = head
		}
	}
	switch {
	case len(tops) == 1 && len(rootFiles) == 0:
		for t := range tops {
			info.Dir = t
		}
	case len(tops) == 1 && len(rootFiles) == 1 && strings.HasSuffix(rootFiles[0], ".php"):
		info.Dir = strings.TrimSuffix(rootFiles[0], ".php")
	default:
		return nil, fmt.Errorf("%w: a plugin or theme ZIP holds one top-level directory (or a single plugin file); this one has %d top-level entries", ErrInvalid, len(tops))
	}
	if !dirRE.MatchString(info.Dir) {
		return nil, fmt.Errorf("%w: top-level directory %q is not a valid plugin or theme directory name", ErrInvalid, info.Dir)
	}
	if style, ok := headers[info.Dir+"/style.css"]; ok {
		if name := header(style, "Theme Name"); name != "" {
			info.Kind, info.Name, info.Version, info.MainFile = "theme", name, header(style, "Version"), info.Dir+"/style.css"
			return info, nil
		}
	}
	var best string
	for file, head := range headers {
		if !strings.HasSuffix(file, ".php") || header(head, "Plugin Name") == "" {
			continue
		}
		if best == "" || file < best {
			best = file
		}
	}
	if best == "" {
		return nil, fmt.Errorf("%w: no plugin file with a \"Plugin Name:\" header and no style.css with a \"Theme Name:\" header", ErrInvalid)
	}
	head := headers[best]
	info.Kind, info.Name, info.Version, info.MainFile = "plugin", header(head, "Plugin Name"), header(head, "Version"), best
	return info, nil
}

// entryName checks one entry's name and type and returns its clean path
// ("" for the root directory entry).
func entryName(f *zip.File) (string, error) {
	n := f.Name
	switch {
	case strings.ContainsRune(n, 0):
		return "", fmt.Errorf("%w: entry name with a NUL byte", ErrInvalid)
	case strings.Contains(n, `\`):
		return "", fmt.Errorf("%w: entry %q uses backslashes", ErrInvalid, n)
	case strings.HasPrefix(n, "/") || (len(n) > 1 && n[1] == ':'):
		return "", fmt.Errorf("%w: entry %q is an absolute path", ErrInvalid, n)
	}
	for _, seg := range strings.Split(n, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%w: entry %q leaves the archive's directory", ErrInvalid, n)
		}
	}
	if mode := f.Mode(); !mode.IsDir() && !mode.IsRegular() {
		return "", fmt.Errorf("%w: entry %q is a %s, not a file or directory", ErrInvalid, n, kindOf(mode.Type().String()))
	}
	return strings.Trim(path.Clean("/"+n), "/"), nil
}

func kindOf(s string) string {
	if strings.HasPrefix(s, "L") {
		return "symlink"
	}
	return "special file (" + s + ")"
}

// drain decompresses one entry with at most budget bytes and returns its
// size and first 8 KiB; a wrong checksum or size is an error.
func drain(f *zip.File, budget int64) (int64, []byte, error) {
	rc, err := f.Open()
	if err != nil {
		return 0, nil, fmt.Errorf("%w: entry %q: %v", ErrInvalid, f.Name, err)
	}
	defer rc.Close()
	head := make([]byte, 8192)
	hn, _ := io.ReadFull(rc, head)
	rest, err := io.Copy(io.Discard, io.LimitReader(rc, budget-int64(hn)+1))
	n := int64(hn) + rest
	if err != nil {
		return 0, nil, fmt.Errorf("%w: entry %q: %v", ErrInvalid, f.Name, err)
	}
	if n > budget {
		return 0, nil, fmt.Errorf("%w: unpacks to more than the limit", ErrInvalid)
	}
	return n, head[:hn], nil
}

// header reads a WordPress file header field ("Plugin Name: Foo").
func header(head []byte, field string) string {
	sc := bufio.NewScanner(bytes.NewReader(head))
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(strings.ToLower(line), strings.ToLower(field)+":")
		if i < 0 {
			continue
		}
		prefix := strings.TrimSpace(line[:i])
		if strings.Trim(prefix, "/*#@ \t") != "" {
			continue
		}
		v := strings.TrimSpace(line[i+len(field)+1:])
		v = strings.TrimSpace(strings.TrimSuffix(v, "*/"))
		return v
	}
	return ""
}

// Walk checks every entry of a ZIP by the same rules as Inspect (no
// absolute or escaping paths, no symlinks or special files, the entry
// count and the decompressed bytes bounded) and hands each file to fn
// with its clean path and a reader of at most the bytes left. Directory
// entries are checked but not handed over.
func Walk(data []byte, lim Limits, fn func(name string, r io.Reader) error) error {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return fmt.Errorf("%w: not a ZIP archive: %v", ErrInvalid, err)
	}
	if len(zr.File) == 0 {
		return fmt.Errorf("%w: the archive is empty", ErrInvalid)
	}
	if len(zr.File) > lim.MaxEntries {
		return fmt.Errorf("%w: %d entries; the limit is %d", ErrInvalid, len(zr.File), lim.MaxEntries)
	}
	var used int64
	for _, f := range zr.File {
		name, err := entryName(f)
		if err != nil {
			return err
		}
		if name == "" || f.Mode().IsDir() {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("%w: entry %q: %v", ErrInvalid, f.Name, err)
		}
		cr := &countingReader{r: io.LimitReader(rc, lim.MaxBytes-used+1)}
		err = fn(name, cr)
		if err == nil {
			_, err = io.Copy(io.Discard, cr) // what fn left is counted and its checksum checked too
		}
		rc.Close()
		used += cr.n
		if used > lim.MaxBytes {
			return fmt.Errorf("%w: unpacks to more than the limit", ErrInvalid)
		}
		if err != nil {
			if errors.Is(err, ErrInvalid) {
				return err
			}
			return fmt.Errorf("%w: entry %q: %v", ErrInvalid, f.Name, err)
		}
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
