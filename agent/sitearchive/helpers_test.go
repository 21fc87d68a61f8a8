package sitearchive

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// ent is one entry of a test archive.
type ent struct {
	name string
	body string
	typ  byte   // a tar type flag; 0 is a regular file
	link string // a link's target
	mode int64  // 0 is 0o644
}

func dir(name string) ent          { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func file(name, body string) ent   { return ent{name: name, body: body} }
func symlink(name, to string) ent  { return ent{name: name, typ: tar.TypeSymlink, link: to} }
func hardlink(name, to string) ent { return ent{name: name, typ: tar.TypeLink, link: to} }

// tarOf builds a tar archive; archive/tar switches to PAX for long names.
func tarOf(t testing.TB, es ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar %.80q: %v", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil && h.Size > 0 {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// zipOf builds a ZIP archive: links hold their target as data, tar type
// flags become file modes.
func zipOf(t testing.TB, es ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, e := range es {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.body == "" {
			h.Method = zip.Store // a deflate writer costs a megabyte
		}
		body := e.body
		switch e.typ {
		case tar.TypeSymlink:
			h.SetMode(fs.ModeSymlink | 0o777)
			body = e.link
		case tar.TypeDir:
			h.SetMode(fs.ModeDir | 0o755)
			if !strings.HasSuffix(h.Name, "/") {
				h.Name += "/"
			}
		case tar.TypeChar:
			h.SetMode(fs.ModeDevice | fs.ModeCharDevice | 0o644)
		case tar.TypeFifo:
			h.SetMode(fs.ModeNamedPipe | 0o644)
		default:
			if e.mode != 0 {
				h.SetMode(fs.FileMode(e.mode))
			}
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gzipOf(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func zstdOf(t testing.TB, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// recorder is a Handler that logs every call, one line each, and checks
// the promises Handler makes about names, links and readers.
type recorder struct {
	log      []string
	bytes    int64
	broken   []string // promises Read broke
	failOn   string   // a rel or dump name whose call fails with failErr
	failErr  error    //
	readNone bool     // read nothing from File and SQL readers
	files    map[string]bool
}

// checkRel checks that rel is clean. Unlike fs.ValidPath it allows
// names that are not UTF-8: Linux allows them, and old sites have them.
func (r *recorder) checkRel(rel string) {
	clean := rel != "" && strings.IndexByte(rel, 0) < 0
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." {
			clean = false
		}
	}
	if !clean {
		r.broken = append(r.broken, fmt.Sprintf("unclean rel %q", rel))
	}
}

func (r *recorder) fail(name string) error {
	if r.failOn != "" && name == r.failOn {
		return r.failErr
	}
	return nil
}

func (r *recorder) Dir(rel string, mode fs.FileMode) error {
	r.checkRel(rel)
	if mode != fs.ModeDir|0o755 {
		r.broken = append(r.broken, fmt.Sprintf("dir %q mode %v", rel, mode))
	}
	r.log = append(r.log, "dir "+rel)
	return r.fail(rel)
}

func (r *recorder) File(rel string, mode fs.FileMode, size int64, rd io.Reader) error {
	r.checkRel(rel)
	if mode != 0o644 && mode != 0o755 {
		r.broken = append(r.broken, fmt.Sprintf("file %q mode %v", rel, mode))
	}
	if err := r.fail(rel); err != nil {
		return err
	}
	if r.readNone {
		r.log = append(r.log, fmt.Sprintf("file %s %o", rel, mode))
		return nil
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	if int64(len(b)) != size {
		r.broken = append(r.broken, fmt.Sprintf("file %q: %d bytes, said %d", rel, len(b), size))
	}
	if r.files == nil {
		r.files = map[string]bool{}
	}
	r.files[rel] = true
	r.bytes += int64(len(b))
	r.log = append(r.log, fmt.Sprintf("file %s %o %s", rel, mode, b))
	return nil
}

func (r *recorder) Symlink(rel, target string) error {
	r.checkRel(rel)
	if to := path.Join(path.Dir(rel), target); path.IsAbs(target) || to == ".." || strings.HasPrefix(to, "../") {
		r.broken = append(r.broken, fmt.Sprintf("symlink %q -> %q leaves wp-content", rel, target))
	}
	r.log = append(r.log, "symlink "+rel+" -> "+target)
	return r.fail(rel)
}

func (r *recorder) Hardlink(rel, target string) error {
	r.checkRel(rel)
	if !r.readNone && !r.files[target] {
		r.broken = append(r.broken, fmt.Sprintf("hardlink %q -> %q: not an earlier file", rel, target))
	}
	if r.files == nil {
		r.files = map[string]bool{}
	}
	r.files[rel] = true
	r.log = append(r.log, "hardlink "+rel+" -> "+target)
	return r.fail(rel)
}

func (r *recorder) SQL(name string, rd io.Reader) error {
	if err := r.fail(name); err != nil {
		return err
	}
	if r.readNone {
		r.log = append(r.log, "sql "+name)
		return nil
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	r.bytes += int64(len(b))
	r.log = append(r.log, "sql "+name+" "+string(b))
	return nil
}

var _ Handler = (*recorder)(nil)

// counting counts the bytes read from r.
type counting struct {
	r io.Reader
	n int64
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
