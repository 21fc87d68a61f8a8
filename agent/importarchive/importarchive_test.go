package importarchive

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// record keeps what a Read handed on.
type record struct {
	got []string
}

func (r *record) Dir(rel string, mode fs.FileMode) error {
	r.got = append(r.got, "dir "+rel)
	return nil
}
func (r *record) File(rel string, mode fs.FileMode, size int64, rd io.Reader) error {
	b, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	if int64(len(b)) != size {
		return fmt.Errorf("%s: %d bytes, said %d", rel, len(b), size)
	}
	r.got = append(r.got, fmt.Sprintf("file %s %o %s", rel, mode, b))
	return nil
}
func (r *record) Symlink(rel, target string) error {
	r.got = append(r.got, "symlink "+rel+" -> "+target)
	return nil
}
func (r *record) Hardlink(rel, target string) error {
	r.got = append(r.got, "hardlink "+rel+" -> "+target)
	return nil
}
func (r *record) SQL(name string, rd io.Reader) error {
	b, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	r.got = append(r.got, "sql "+name+" "+string(b))
	return nil
}

type ent struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarBytes(t testing.TB, es []ent) []byte {
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
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return b.Bytes()
}

func gz(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

func zst(b []byte) []byte {
	var out bytes.Buffer
	w, _ := zstd.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

func zipBytes(t testing.TB, es []ent) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, e := range es {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.typ == tar.TypeSymlink {
			h.SetMode(fs.ModeSymlink | 0o777)
			e.body = e.link
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(e.body))
	}
	zw.Close()
	return b.Bytes()
}

var site = []ent{
	{name: "db.sql", body: "CREATE TABLE wp_options (i int);"},
	{name: "wp-content/", typ: tar.TypeDir},
	{name: "wp-content/themes/", typ: tar.TypeDir},
	{name: "wp-content/themes/y/style.css", body: "css"},
	{name: "wp-content/themes/x/run.sh", body: "#!/bin/sh", mode: 0o750},
	{name: "wp-content/themes/x/link", typ: tar.TypeSymlink, link: "../y/style.css"},
	{name: "wp-content/themes/x/hard", typ: tar.TypeLink, link: "wp-content/themes/y/style.css"},
}

var want = []string{
	"sql db.sql CREATE TABLE wp_options (i int);", "dir themes", "file themes/y/style.css 644 css",
	"file themes/x/run.sh 755 #!/bin/sh", "symlink themes/x/link -> ../y/style.css", "hardlink themes/x/hard -> themes/y/style.css",
}

func TestRead(t *testing.T) {
	small := Limits{MaxEntries: 100, MaxBytes: 1 << 20, MaxFileBytes: 1 << 20, MaxArchiveBytes: 1 << 20}
	whole := []ent{
		{name: "public_html/wp-config.php", body: "<?php\ndefine( 'DB_PASSWORD', 'secret' );\ndefine( 'DB_CHARSET', 'utf8' );\n$table_prefix  = \"wpx_\";\n"},
		{name: "public_html/index.php", body: "<?php"},
		{name: "public_html/wp-includes/version.php", body: "<?php"},
		{name: "public_html/wp-content/plugins/a/a.php", body: "<?php // a"},
		{name: "backup.sql.gz", body: string(gz([]byte("INSERT INTO t VALUES (1);")))},
	}
	for _, c := range []struct {
		name    string
		data    []byte
		format  string
		want    []string
		prefix  string
		root    string
		skipped int
	}{
		{"tar", tarBytes(t, site), "tar", want, "", "", 0},
		{"tar.gz", gz(tarBytes(t, site)), "tar.gz", want, "", "", 0},
		{"two gzip members", append(gz(tarBytes(t, site)[:1024]), gz(tarBytes(t, site)[1024:])...), "tar.gz", want, "", "", 0},
		{"tar.zst", zst(tarBytes(t, site)), "tar.zst", want, "", "", 0},
		{"zip", zipBytes(t, []ent{{name: "db.sql", body: "SELECT 1;"}, {name: `wp-content\uploads\a.txt`, body: "a"},
			{name: "wp-content/l", typ: tar.TypeSymlink, link: "uploads/a.txt"}}), "zip",
			[]string{"sql db.sql SELECT 1;", "file uploads/a.txt 644 a", "symlink l -> uploads/a.txt"}, "", "", 0},
		{"whole root", gz(tarBytes(t, whole)), "tar.gz",
			[]string{"file plugins/a/a.php 644 <?php // a", "sql backup.sql.gz INSERT INTO t VALUES (1);"}, "wpx_", "public_html", 2},
		{"only a dump", tarBytes(t, []ent{{name: "site.SQL", body: "x"}}), "tar", []string{"sql site.SQL x"}, "", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &record{}
			sum, err := Read(bytes.NewReader(c.data), t.TempDir(), small, rec)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(rec.got) != fmt.Sprint(c.want) {
				t.Errorf("got\n%q\nwant\n%q", rec.got, c.want)
			}
			if sum.Format != c.format || sum.TablePrefix != c.prefix || sum.Root != c.root || sum.Skipped != c.skipped {
				t.Errorf("summary %+v", sum)
			}
			if c.prefix != "" && (!sum.WholeRoot || sum.DBCharset != "utf8") {
				t.Errorf("wp-config not read: %+v", sum)
			}
			for _, g := range rec.got {
				if strings.Contains(g, "secret") {
					t.Error("wp-config.php was handed on")
				}
			}
		})
	}
}

// counting counts what was read of the input.
type counting struct {
	r io.Reader
	n int64
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestReadRefuses(t *testing.T) {
	small := Limits{MaxEntries: 50, MaxBytes: 1 << 20, MaxFileBytes: 512 << 10, MaxArchiveBytes: 4 << 20}
	bomb := func() []byte {
		var b bytes.Buffer
		zw, _ := zstd.NewWriter(&b)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: "wp-content/big", Mode: 0o644, Size: 1 << 40, Typeflag: tar.TypeReg})
		zeros := make([]byte, 1<<20)
		for range 32 {
			tw.Write(zeros)
		}
		zw.Close()
		return b.Bytes()
	}()
	many := func() []byte {
		var es []ent
		for i := range 60 {
			es = append(es, ent{name: fmt.Sprintf("wp-content/f%d", i), body: ""})
		}
		return gz(tarBytes(t, es))
	}()
	liar := func() []byte { // a ZIP entry stored as 10 bytes that inflates to 10 MB
		var b bytes.Buffer
		zw := zip.NewWriter(&b)
		w, _ := zw.CreateRaw(&zip.FileHeader{Name: "wp-content/x", Method: zip.Deflate, UncompressedSize64: 10,
			CompressedSize64: uint64(len(deflated(10 << 20))), CRC32: 0})
		w.Write(deflated(10 << 20))
		zw.Close()
		return b.Bytes()
	}()
	for _, c := range []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"traversal", tarBytes(t, []ent{{name: "../../etc/passwd", body: "x"}}), ErrUnsafe, "leaves"},
		{"traversal inside", tarBytes(t, []ent{{name: "wp-content/../../x", body: "x"}}), ErrUnsafe, "leaves"},
		{"absolute", tarBytes(t, []ent{{name: "/etc/passwd", body: "x"}}), ErrUnsafe, "absolute"},
		{"drive", zipBytes(t, []ent{{name: "C:/x", body: "x"}}), ErrUnsafe, "absolute"},
		{"symlink absolute", tarBytes(t, []ent{{name: "wp-content/l", typ: tar.TypeSymlink, link: "/etc"}}), ErrUnsafe, "symlink"},
		{"symlink up", tarBytes(t, []ent{{name: "wp-content/a/l", typ: tar.TypeSymlink, link: "../../.."}}), ErrUnsafe, "symlink"},
		{"zip symlink up", zipBytes(t, []ent{{name: "wp-content/l", typ: tar.TypeSymlink, link: "../wp-config.php"}}), ErrUnsafe, "symlink"},
		{"hardlink out", tarBytes(t, []ent{{name: "wp-content/h", typ: tar.TypeLink, link: "/etc/shadow"}}), ErrUnsafe, "hardlink"},
		{"hardlink config", tarBytes(t, []ent{{name: "wp-config.php", body: "<?php"}, {name: "wp-content/h", typ: tar.TypeLink, link: "wp-config.php"}}), ErrUnsafe, "hardlink"},
		{"device", tarBytes(t, []ent{{name: "wp-content/d", typ: tar.TypeChar}}), ErrUnsafe, "not a file"},
		{"fifo", tarBytes(t, []ent{{name: "wp-content/f", typ: tar.TypeFifo}}), ErrUnsafe, "not a file"},
		{"bomb", bomb, ErrTooLarge, "at most"},
		{"many entries", many, ErrTooLarge, "entries"},
		{"lying zip", liar, ErrTooLarge, ""},
		{"two roots", tarBytes(t, []ent{{name: "a/wp-content/x", body: "1"}, {name: "b/wp-content/y", body: "2"}}), ErrFormat, "more than one"},
		{"bzip2", []byte("BZh91AY&SY"), ErrFormat, "bzip2"},
		{"xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0, 0}, ErrFormat, "xz"},
		{"random", []byte("hello, this is not an archive"), ErrFormat, "not a tar"},
		{"nothing useful", tarBytes(t, []ent{{name: "readme.txt", body: "x"}}), ErrFormat, "neither"},
		{"hostile prefix", tarBytes(t, []ent{{name: "db.sql", body: "x"}, {name: "wp-config.php", body: "<?php $table_prefix = 'wp; drop';"}}), ErrFormat, "prefix"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spool := t.TempDir()
			in := &counting{r: bytes.NewReader(c.data)}
			_, err := Read(in, spool, small, &record{})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want %v (%q)", err, c.want, c.msg)
			}
			if c.name == "bomb" && in.n > 2<<20 {
				t.Errorf("the bomb was read %d bytes in before it was refused", in.n)
			}
			if left, _ := os.ReadDir(spool); len(left) != 0 {
				t.Errorf("spool left %v", left)
			}
		})
	}
}

func deflated(n int) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "x", Method: zip.Deflate})
	w.Write(make([]byte, n))
	zw.Close()
	r, _ := zip.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()))
	raw, _ := r.File[0].OpenRaw()
	out, _ := io.ReadAll(raw)
	return out
}

func FuzzRead(f *testing.F) {
	f.Add(tarBytes(f, site))
	f.Add(gz(tarBytes(f, site)))
	f.Add(zipBytes(f, []ent{{name: "db.sql", body: "x"}, {name: "wp-content/a", body: "b"}}))
	small := Limits{MaxEntries: 20, MaxBytes: 1 << 16, MaxFileBytes: 1 << 14, MaxArchiveBytes: 1 << 16}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Read(bytes.NewReader(data), t.TempDir(), small, &record{})
	})
}
