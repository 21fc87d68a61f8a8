package artifact

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

var lim = Limits{Entries: 100, Bytes: 1 << 20, Depth: 8, Record: 4 << 10, Database: 1 << 20}

type record struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// TestRoundTrip: a frozen tree (directories, modes, a setuid bit, links
// absolute and relative, an empty file) and a dump come back the same,
// owned by the uid asked for, the setuid bit dropped.
func TestRoundTrip(t *testing.T) {
	hosttest.Root(t)
	src := t.TempDir()
	files := filepath.Join(src, "files")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(files, "wp-content", "uploads"), 0o755))
	must(os.WriteFile(filepath.Join(files, "index.php"), []byte("<?php echo 1;"), 0o644))
	must(os.WriteFile(filepath.Join(files, "wp-content", "empty"), nil, 0o600))
	must(os.WriteFile(filepath.Join(files, "run.sh"), []byte("#!/bin/sh"), 0o755))
	must(os.Chmod(filepath.Join(files, "run.sh"), 0o755|os.ModeSetuid))
	must(os.Symlink("../index.php", filepath.Join(files, "wp-content", "rel")))
	must(os.Symlink("/etc/passwd", filepath.Join(files, "abs")))
	db := filepath.Join(src, "db.sql")
	must(os.WriteFile(db, []byte("27:INSERT INTO `x` VALUES (1)\n"), 0o600))

	var buf bytes.Buffer
	must(Write(&buf, record{ID: "tpl_abcd", URL: "http://a.test"}, db, files))
	dst := t.TempDir()
	var got record
	must(Read(bytes.NewReader(buf.Bytes()), dst, 4242, lim, &got))
	if got.ID != "tpl_abcd" || got.URL != "http://a.test" {
		t.Fatalf("record %+v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, DatabaseName)); string(b) != "27:INSERT INTO `x` VALUES (1)\n" {
		t.Fatalf("database %q", b)
	}
	out := filepath.Join(dst, FilesDir)
	for _, c := range []struct {
		rel, content, link string
		mode               os.FileMode
	}{
		{rel: "index.php", content: "<?php echo 1;", mode: 0o644},
		{rel: "wp-content/empty", mode: 0o600},
		{rel: "run.sh", content: "#!/bin/sh", mode: 0o755},
		{rel: "wp-content/rel", link: "../index.php"},
		{rel: "abs", link: "/etc/passwd"},
		{rel: "wp-content/uploads", mode: os.ModeDir | 0o755},
	} {
		p := filepath.Join(out, c.rel)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4242 || st.Gid != 4242 {
			t.Fatalf("%s owned by %d:%d", c.rel, st.Uid, st.Gid)
		}
		if c.link != "" {
			if l, _ := os.Readlink(p); l != c.link {
				t.Fatalf("%s -> %q", c.rel, l)
			}
			continue
		}
		if fi.Mode() != c.mode {
			t.Fatalf("%s mode %v, want %v", c.rel, fi.Mode(), c.mode)
		}
		if !fi.IsDir() {
			if b, _ := os.ReadFile(p); string(b) != c.content {
				t.Fatalf("%s: %q", c.rel, b)
			}
		}
	}
}

// entry is one hand-made tar entry of a hostile artifact.
type entry struct {
	name, body, link string
	typ              byte
}

func hostile(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range es {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body)), Typeflag: typ}); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			_, _ = tw.Write([]byte(e.body))
		}
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

// TestHostileArtifacts: names and links that lead out of the directory,
// duplicates, unknown entries and streams past a bound are refused, and
// nothing is written outside the directory.
func TestHostileArtifacts(t *testing.T) {
	rec := entry{name: RecordName, body: `{"id":"tpl_x"}`}
	db := entry{name: DatabaseName, body: ""}
	outside := t.TempDir()
	target := filepath.Join(outside, "pwned")
	tests := []struct {
		name    string
		entries []entry
	}{
		{"dot-dot", []entry{rec, db, {name: "files/../../pwned", body: "x"}}},
		{"absolute", []entry{rec, db, {name: "/files/x", body: "x"}}},
		{"outside files", []entry{rec, db, {name: "other/x", body: "x"}}},
		{"through a link", []entry{rec, db, {name: "files", typ: tar.TypeDir}, {name: "files/l", link: outside, typ: tar.TypeSymlink},
			{name: "files/l/pwned", body: "x"}}},
		{"through a relative link", []entry{rec, db, {name: "files", typ: tar.TypeDir}, {name: "files/l", link: "../../../../../../../../" + outside, typ: tar.TypeSymlink},
			{name: "files/l/pwned", body: "x"}}},
		{"a file twice", []entry{rec, db, {name: "files", typ: tar.TypeDir}, {name: "files/a", body: "1"}, {name: "files/a", body: "2"}}},
		{"a link replaced by a file", []entry{rec, db, {name: "files", typ: tar.TypeDir}, {name: "files/a", link: target, typ: tar.TypeSymlink}, {name: "files/a", body: "2"}}},
		{"two records", []entry{rec, rec, db}},
		{"no database", []entry{rec}},
		{"too deep", []entry{rec, db, {name: "files/a/b/c/d/e/f/g/h/i/j", body: "x"}}},
		{"too large", []entry{rec, db, {name: "files", typ: tar.TypeDir}, {name: "files/big", body: strings.Repeat("x", 2<<20)}}},
		{"big record", []entry{{name: RecordName, body: strings.Repeat(" ", 8<<10)}, db}},
	}
	many := []entry{rec, db, {name: "files", typ: tar.TypeDir}}
	for i := 0; i < 120; i++ {
		many = append(many, entry{name: "files/f" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26)), body: "x"})
	}
	tests = append(tests, struct {
		name    string
		entries []entry
	}{"too many entries", many})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := t.TempDir()
			var got record
			if err := Read(bytes.NewReader(hostile(t, tt.entries...)), dst, 4242, lim, &got); err == nil {
				t.Fatal("read")
			}
			if _, err := os.Lstat(target); !os.IsNotExist(err) {
				t.Fatalf("a file appeared outside: %v", err)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("outside holds %d entries", len(ents))
			}
		})
	}
	if err := Read(strings.NewReader("not zstd at all"), t.TempDir(), 1, lim, &record{}); err == nil {
		t.Fatal("garbage read")
	}
}
