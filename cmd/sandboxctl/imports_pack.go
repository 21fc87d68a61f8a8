package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/klauspost/compress/gzip"
)

// importsSource is what `imports push PATH` names: a WordPress directory
// to pack, or an archive to send as it is.
type importsSource struct {
	// Abs is PATH made absolute.
	Abs string
	// Dir is true for a directory, false for an archive file.
	Dir bool
	// Dump is the database dump packed with a directory: --sql, or the
	// one .sql/.sql.gz file at its top ("" for an archive).
	Dump string
	// Config is what the directory's wp-config.php says (zero when it has
	// none, or for an archive).
	Config importsWPConfig
}

// importsDumpHint tells a person how to make the dump a push needs.
const importsDumpHint = "make one with `wp db export dump.sql` (WP-CLI) or " +
	"`mysqldump DBNAME > dump.sql` in the WordPress directory, or name one with --sql FILE"

// importsInspect checks PATH and --sql and says what will be sent. Its
// errors about the command line are usageErrors.
func importsInspect(p, sqlFile string) (*importsSource, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", p, err)}
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, usageError{fmt.Errorf("no such directory or archive: %w", err)}
	}
	src := &importsSource{Abs: abs, Dir: fi.IsDir()}
	if !src.Dir {
		if sqlFile != "" {
			return nil, usageError{errors.New("--sql goes with a directory: an archive carries its own dump")}
		}
		if _, err := importsArchiveKind(abs); err != nil {
			return nil, usageError{err}
		}
		return src, nil
	}
	wc, err := os.Lstat(filepath.Join(abs, "wp-content"))
	switch {
	case err != nil:
		return nil, usageError{fmt.Errorf("%s has no wp-content directory: give the WordPress directory (the one holding wp-content/) or an archive", p)}
	case wc.Mode()&fs.ModeSymlink != 0:
		return nil, usageError{fmt.Errorf("%s/wp-content is a symlink, which push does not follow: pack the real directory into an archive and push that", p)}
	case !wc.IsDir():
		return nil, usageError{fmt.Errorf("%s/wp-content is not a directory", p)}
	}
	if b, err := os.ReadFile(filepath.Join(abs, "wp-config.php")); err == nil {
		src.Config = importsParseWPConfig(b)
		if v := src.Config.Prefix; v != "" && !importsPlainName(v) {
			return nil, usageError{errors.New("wp-config.php sets $table_prefix to something other than letters, digits and underscores (at most 32)")}
		}
		if v := src.Config.Charset; v != "" && !importsPlainName(v) {
			return nil, usageError{errors.New("wp-config.php sets DB_CHARSET to something other than letters, digits and underscores (at most 32)")}
		}
	}
	if sqlFile != "" {
		dump, err := filepath.Abs(sqlFile)
		if err == nil {
			var dfi fs.FileInfo
			if dfi, err = os.Stat(dump); err == nil && !dfi.Mode().IsRegular() {
				err = errors.New("not a regular file")
			}
		}
		if err != nil {
			return nil, usageError{fmt.Errorf("--sql %s: %w", sqlFile, err)}
		}
		src.Dump = dump
		return src, nil
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	var dumps []string
	for _, de := range entries {
		if de.Type().IsRegular() && importsIsDump(de.Name()) {
			dumps = append(dumps, de.Name())
		}
	}
	switch len(dumps) {
	case 0:
		return nil, usageError{fmt.Errorf("%s holds no database dump (a .sql or .sql.gz file at its top): %s", p, importsDumpHint)}
	case 1:
		src.Dump = filepath.Join(abs, dumps[0])
	default:
		return nil, usageError{fmt.Errorf("%s holds several dumps (%s): name the one to send with --sql FILE", p, strings.Join(dumps, ", "))}
	}
	return src, nil
}

func importsIsDump(name string) bool {
	n := strings.ToLower(name)
	return strings.HasSuffix(n, ".sql") || strings.HasSuffix(n, ".sql.gz")
}

// importsPlainName is what the server accepts as a table prefix or charset.
func importsPlainName(v string) bool {
	if v == "" || len(v) > 32 {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// importsArchiveKind names an archive's format from its first bytes, or
// says it is none the server restores.
func importsArchiveKind(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return "tar.gz", nil
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "tar.zst", nil
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")):
		return "zip", nil
	case n >= 262 && bytes.HasPrefix(head[257:], []byte("ustar")):
		return "tar", nil
	}
	return "", fmt.Errorf("%s is neither a directory nor a tar, tar.gz, tar.zst or ZIP archive", p)
}

// importsWPConfig is what push reads in a wp-config.php: plain string
// literals only (a value computed in PHP is not found).
type importsWPConfig struct {
	Home, SiteURL, Prefix, Charset string
}

// importsPHPString is a PHP string literal.
const importsPHPString = `('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")`

var (
	importsPrefixRE = regexp.MustCompile(`\$table_prefix\s*=\s*` + importsPHPString + `\s*;`)
	importsDefineRE = regexp.MustCompile(`(?i:define)\s*\(\s*['"](WP_HOME|WP_SITEURL|DB_CHARSET)['"]\s*,\s*` + importsPHPString + `\s*[,)]`)
)

// importsParseWPConfig reads WP_HOME, WP_SITEURL, DB_CHARSET and
// $table_prefix, ignoring what is commented out. As PHP runs it, the last
// assignment to $table_prefix and the first define of a constant count.
func importsParseWPConfig(b []byte) importsWPConfig {
	code := importsStripPHPComments(b)
	var c importsWPConfig
	if m := importsPrefixRE.FindAllSubmatch(code, -1); m != nil {
		c.Prefix, _ = importsPHPLiteral(m[len(m)-1][1])
	}
	for _, m := range importsDefineRE.FindAllSubmatch(code, -1) {
		v, ok := importsPHPLiteral(m[2])
		if !ok {
			continue
		}
		switch string(m[1]) {
		case "WP_HOME":
			if c.Home == "" {
				c.Home = v
			}
		case "WP_SITEURL":
			if c.SiteURL == "" {
				c.SiteURL = v
			}
		case "DB_CHARSET":
			if c.Charset == "" {
				c.Charset = v
			}
		}
	}
	return c
}

// importsPHPLiteral is a literal's value when it has no escapes or
// interpolation that would need PHP to work out.
func importsPHPLiteral(lit []byte) (string, bool) {
	s := string(lit[1 : len(lit)-1])
	if strings.Contains(s, `\`) || (lit[0] == '"' && strings.Contains(s, "$")) {
		return "", false
	}
	return s, true
}

// importsStripPHPComments blanks //, # and /* */ comments outside string
// literals.
func importsStripPHPComments(b []byte) []byte {
	var out bytes.Buffer
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(b) && b[j] != c {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(b))
			out.Write(b[i:j])
			i = j
		case c == '#' || c == '/' && i+1 < len(b) && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				i++
			}
			out.WriteByte(' ')
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			if end := bytes.Index(b[i+2:], []byte("*/")); end < 0 {
				i = len(b)
			} else {
				i += end + 4
			}
			out.WriteByte(' ')
		default:
			out.WriteByte(c)
			i++
		}
	}
	return out.Bytes()
}

// importsPackStats is what a pack put in and left out.
type importsPackStats struct {
	Files, Dirs, Links int
	// Skipped are entries left out, each with the reason.
	Skipped []string
	// Bytes are the files' bytes before compression.
	Bytes int64
}

// importsPack writes src (a directory) as a tar.gz at dst: the dump at the
// top, a stub wp-config.php with only the table prefix and charset, and
// wp-content/. Symlinks are never followed: one under wp-content that
// stays inside wp-content is stored as a symlink, any other is left out
// (the server refuses links out of wp-content). It returns the archive's
// size and SHA-256; on an error or a cancelled ctx dst is not made.
func importsPack(ctx context.Context, src *importsSource, dst string) (int64, string, *importsPackStats, error) {
	tmp := dst + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, "", nil, fmt.Errorf("pack %s: %w", src.Abs, err)
	}
	defer os.Remove(tmp)
	sum := sha256.New()
	counted := &importsCountWriter{w: io.MultiWriter(f, sum)}
	zw := gzip.NewWriter(counted)
	tw := tar.NewWriter(zw)
	p := &importsPacker{ctx: ctx, tw: tw, stats: &importsPackStats{}}
	err = p.pack(src)
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		return 0, "", nil, fmt.Errorf("pack %s: %w", src.Abs, err)
	}
	return counted.n, hex.EncodeToString(sum.Sum(nil)), p.stats, nil
}

// importsCountWriter counts the bytes written through it.
type importsCountWriter struct {
	w io.Writer
	n int64
}

func (c *importsCountWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// importsPacker writes one directory's tar.
type importsPacker struct {
	ctx   context.Context
	tw    *tar.Writer
	stats *importsPackStats
}

func (p *importsPacker) pack(src *importsSource) error {
	name := "database.sql"
	if importsIsGzip(src.Dump) {
		name = "database.sql.gz"
	}
	if err := p.file(src.Dump, name, true); err != nil {
		return err
	}
	if stub := src.Config.stub(); stub != nil {
		hdr := &tar.Header{Name: "wp-config.php", Mode: 0o644, Size: int64(len(stub)), Typeflag: tar.TypeReg}
		if err := p.tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := p.tw.Write(stub); err != nil {
			return err
		}
	}
	root := filepath.Join(src.Abs, "wp-content")
	return filepath.WalkDir(root, func(full string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := p.ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src.Abs, full)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch t := de.Type(); {
		case t.IsDir():
			fi, err := de.Info()
			if err != nil {
				return err
			}
			p.stats.Dirs++
			return p.tw.WriteHeader(&tar.Header{Name: rel + "/", Mode: int64(fi.Mode().Perm()), Typeflag: tar.TypeDir, ModTime: fi.ModTime()})
		case t.IsRegular():
			return p.file(full, rel, false)
		case t&fs.ModeSymlink != 0:
			return p.symlink(full, rel)
		default:
			p.stats.Skipped = append(p.stats.Skipped, rel+" (not a file, directory or symlink)")
			return nil
		}
	})
}

// file adds a regular file (the dump is named by the user and may be
// reached through a symlink; everything under wp-content is walked
// without following any, and opened with O_NOFOLLOW in case a file was
// swapped for a symlink since the walk saw it).
func (p *importsPacker) file(full, name string, follow bool) error {
	flags := os.O_RDONLY
	if !follow {
		flags |= oNoFollow
	}
	f, err := os.OpenFile(full, flags, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		p.stats.Skipped = append(p.stats.Skipped, name+" (not a regular file)")
		return nil
	}
	hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), Size: fi.Size(), Typeflag: tar.TypeReg, ModTime: fi.ModTime()}
	if err := p.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(p.tw, io.LimitReader(f, fi.Size()))
	if err != nil {
		return fmt.Errorf("%s: %w", full, err)
	}
	if n != fi.Size() {
		return fmt.Errorf("%s shrank while it was packed", full)
	}
	p.stats.Files++
	p.stats.Bytes += n
	return nil
}

func (p *importsPacker) symlink(full, rel string) error {
	target, err := os.Readlink(full)
	if err != nil {
		return err
	}
	if !importsLinkInside(rel, target) {
		p.stats.Skipped = append(p.stats.Skipped, fmt.Sprintf("%s -> %s (points outside wp-content)", rel, target))
		return nil
	}
	p.stats.Links++
	return p.tw.WriteHeader(&tar.Header{Name: rel, Linkname: target, Mode: 0o777, Typeflag: tar.TypeSymlink})
}

// importsLinkInside reports whether a symlink at rel (under wp-content,
// slash-separated from the directory's top) to target stays inside
// wp-content the way the server checks it: a relative target whose ".."
// all come first and climb no higher than wp-content.
func importsLinkInside(rel, target string) bool {
	if target == "" || path.IsAbs(target) || filepath.IsAbs(target) || strings.ContainsRune(target, '\\') {
		return false
	}
	depth := strings.Count(rel, "/") - 1 // directories between wp-content and the link
	up, down := 0, 0
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if down > 0 {
				return false
			}
			up++
		default:
			down++
		}
	}
	return up <= depth
}

// stub is a wp-config.php holding only what the restore reads (the
// table prefix and charset), so the live site's passwords and keys stay
// here; nil when there is nothing to say.
func (c importsWPConfig) stub() []byte {
	if c.Prefix == "" && c.Charset == "" {
		return nil
	}
	var b strings.Builder
	b.WriteString("<?php\n// Made by sandboxctl: only what the restore reads from the live site's wp-config.php.\n")
	if c.Charset != "" {
		fmt.Fprintf(&b, "define('DB_CHARSET', '%s');\n", c.Charset)
	}
	if c.Prefix != "" {
		fmt.Fprintf(&b, "$table_prefix = '%s';\n", c.Prefix)
	}
	return []byte(b.String())
}

func importsIsGzip(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 2)
	n, _ := io.ReadFull(f, head)
	return n == 2 && head[0] == 0x1f && head[1] == 0x8b
}

// importsHashFile is a file's size and SHA-256.
func importsHashFile(ctx context.Context, p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, &importsCtxReader{ctx: ctx, r: f})
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", p, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// importsCtxReader stops reading once ctx is done.
type importsCtxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r *importsCtxReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(b)
}

// importsSortedSkips lists skipped entries for a warning, at most max.
func importsSortedSkips(s []string, max int) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("… and %d more", len(s)-max))
	}
	return out
}
