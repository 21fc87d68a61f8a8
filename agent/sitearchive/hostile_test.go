package sitearchive

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestReadRefuses: every hostile or unusable archive is refused with the
// right sentinel and a message naming the entry, and a ZIP's spool file
// is gone afterwards.
func TestReadRefuses(t *testing.T) {
	dump := file("db.sql", "x")
	for _, c := range []struct {
		name string
		data []byte
		want error
		msg  string // the error's text holds this
	}{
		// Names.
		{"traversal", tarOf(t, file("../../etc/passwd", "x")), ErrUnsafe, `archive entry "../../etc/passwd": name leaves the archive`},
		{"traversal in wp-content", tarOf(t, file("wp-content/../../x", "x")), ErrUnsafe, "name leaves the archive"},
		{"traversal that comes back", tarOf(t, file("wp-content/a/../b", "x")), ErrUnsafe, "name leaves the archive"},
		{"absolute", tarOf(t, file("/etc/passwd", "x")), ErrUnsafe, `"/etc/passwd": name is absolute`},
		{"double slash", tarOf(t, file("//host/wp-content/x", "x")), ErrUnsafe, "name is absolute"},
		{"drive", tarOf(t, file("C:/x", "x")), ErrUnsafe, "name is absolute"},
		{"zip drive", zipOf(t, file(`C:\wp-content\x`, "x")), ErrUnsafe, "name is absolute"},
		{"zip backslash traversal", zipOf(t, file(`wp-content\..\..\x`, "x")), ErrUnsafe, "name leaves the archive"},
		{"zip NUL", zipOf(t, file("wp-content/a\x00.php", "x")), ErrUnsafe, "NUL"},
		{"long component", tarOf(t, file("wp-content/"+strings.Repeat("a", 256), "x")), ErrUnsafe, "longer than 255"},
		{"deep", tarOf(t, file("wp-content/"+strings.Repeat("d/", 64)+"f", "x")), ErrUnsafe, "levels deep"},
		{"long name", tarOf(t, file("wp-content/"+strings.Repeat("abcdefgh/", 500)+"f", "x")), ErrUnsafe, "longer than 4096"},

		// Links.
		{"symlink absolute", tarOf(t, symlink("wp-content/l", "/etc")), ErrUnsafe, `"wp-content/l": symlink target is absolute`},
		{"symlink up", tarOf(t, symlink("wp-content/l", "../../..")), ErrUnsafe, "symlink points outside the site"},
		{"symlink one up", tarOf(t, symlink("wp-content/themes/l", "../..")), ErrUnsafe, "symlink points outside the site"},
		{"symlink to config", zipOf(t, symlink("wp-content/l", "../wp-config.php")), ErrUnsafe, "symlink points outside the site"},
		{"symlink down and up", tarOf(t, symlink("wp-content/themes/l", "x/../../..")), ErrUnsafe, ".. after a name"},
		{"through a symlink", tarOf(t, symlink("wp-content/l", "themes"), file("wp-content/l/x.php", "x")), ErrUnsafe,
			`"wp-content/l/x.php": path goes through the symlink "l"`},
		{"symlink over a directory", tarOf(t, file("wp-content/themes/a/f", "x"), symlink("wp-content/themes", "plugins")), ErrUnsafe,
			"symlink would replace a directory"},
		{"hardlink absolute", tarOf(t, hardlink("wp-content/h", "/etc/shadow")), ErrUnsafe, "hardlink target: name is absolute"},
		{"hardlink up", tarOf(t, hardlink("wp-content/h", "../wp-config.php")), ErrUnsafe, "hardlink target: name leaves the archive"},
		{"hardlink to config", tarOf(t, file("wp-config.php", "<?php"), hardlink("wp-content/h", "wp-config.php")), ErrUnsafe,
			"hardlink points outside the site's wp-content"},
		{"hardlink to other root", tarOf(t, file("a/wp-content/f", "x"), hardlink("a/wp-content/h", "b/wp-content/f")), ErrUnsafe,
			"hardlink points outside"},
		{"hardlink forward", tarOf(t, hardlink("wp-content/h", "wp-content/f"), file("wp-content/f", "x")), ErrUnsafe,
			"is not an earlier file"},
		{"hardlink to symlink", tarOf(t, symlink("wp-content/l", "f"), hardlink("wp-content/h", "wp-content/l")), ErrUnsafe,
			"is not an earlier file"},
		{"hardlink to dir", tarOf(t, dir("wp-content/d/"), hardlink("wp-content/h", "wp-content/d")), ErrUnsafe, "is not an earlier file"},

		// Entry types.
		{"char device", tarOf(t, ent{name: "wp-content/null", typ: tar.TypeChar}), ErrUnsafe, "character device"},
		{"block device", tarOf(t, ent{name: "wp-content/sda", typ: tar.TypeBlock}), ErrUnsafe, "block device"},
		{"fifo", tarOf(t, ent{name: "wp-content/fifo", typ: tar.TypeFifo}), ErrUnsafe, "FIFO"},
		{"device outside", tarOf(t, dump, ent{name: "dev/null", typ: tar.TypeChar}), ErrUnsafe, "character device"},
		{"unknown type", tarOf(t, ent{name: "wp-content/v", typ: 'V'}), ErrUnsafe, "unknown type"},
		{"zip device", zipOf(t, ent{name: "wp-content/null", typ: tar.TypeChar}), ErrUnsafe, "character device"},
		{"zip fifo", zipOf(t, ent{name: "wp-content/p", typ: tar.TypeFifo}), ErrUnsafe, "FIFO"},
		{"wp-content a file", tarOf(t, file("wp-content", "x")), ErrUnsafe, "wp-content is not a directory"},
		{"wp-content a symlink", tarOf(t, symlink("wp-content", "/var/www")), ErrUnsafe, "wp-content is not a directory"},

		// Layout.
		{"two roots", tarOf(t, file("a/wp-content/x", "1"), file("b/wp-content/y", "2")), ErrFormat,
			`archive entry "b/wp-content/y": archive holds more than one WordPress root (a/ and b/)`},
		{"top and nested roots", zipOf(t, file("wp-content/x", "1"), file("old/wp-content/y", "2")), ErrFormat, "(./ and old/)"},
		{"nothing useful", tarOf(t, file("readme.txt", "x"), dir("wp-admin/")), ErrFormat, "neither a wp-content directory nor"},
		{"hostile prefix", tarOf(t, dump, file("wp-config.php", `<?php $table_prefix = 'wp\'; drop';`)), ErrUnsafe,
			`archive entry "wp-config.php": wp-config.php sets $table_prefix to something other than`},
		{"hostile prefix double quotes", tarOf(t, dump, file("wp-config.php", `<?php $table_prefix = "wp'; drop";`)), ErrUnsafe, "$table_prefix"},
		{"hostile charset", tarOf(t, dump, file("wp-config.php", `<?php define('DB_CHARSET', 'utf8; drop');`)), ErrUnsafe, "DB_CHARSET"},

		// Formats.
		{"empty", nil, ErrFormat, "archive is empty"},
		{"bzip2", []byte("BZh91AY&SY\x00\x01"), ErrFormat, "archive is bzip2-compressed"},
		{"xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0, 0, 4}, ErrFormat, "archive is xz-compressed"},
		{"7z", []byte{'7', 'z', 0xbc, 0xaf, 0x27, 0x1c, 0, 4}, ErrFormat, "archive is 7z-compressed"},
		{"rar", []byte("Rar!\x1a\x07\x01\x00"), ErrFormat, "archive is RAR-compressed"},
		{"random", randomBytes(4096), ErrFormat, "not a tar, tar.gz, tar.zst or ZIP archive"},
		{"text", []byte("hello"), ErrFormat, "not a tar, tar.gz, tar.zst or ZIP archive"},
		{"gzip of a dump", gzipOf(t, []byte("CREATE TABLE x (i int);")), ErrFormat, "the gzip stream does not hold a tar archive"},
		{"zstd of junk", zstdOf(t, randomBytes(2048)), ErrFormat, "the zstd stream does not hold a tar archive"},
		{"truncated gzip", truncate(gzipOf(t, tarOf(t, site(true)...)), 200), ErrFormat, "unexpected EOF"},
		{"truncated tar", truncate(tarOf(t, file("wp-content/a", strings.Repeat("x", 2000))), 1200), ErrFormat, "archive ends inside the entry"},
		{"gzip checksum", badCRC(gzipOf(t, tarOf(t, site(true)...))), ErrFormat, "after the tar's end: gzip: invalid checksum"},
		{"gzip without trailer", truncate(gzipOf(t, tarOf(t, site(true)...)), len(gzipOf(t, tarOf(t, site(true)...)))-8), ErrFormat, "unexpected EOF"},
		{"corrupt zip", truncate(zipOf(t, dump), 10), ErrFormat, "read ZIP directory"},
		{"dump not gzip", tarOf(t, file("db.sql.gz", "plain text")), ErrFormat, `"db.sql.gz": dump is not gzip-compressed`},
		{"zip method", zipMethod(t), ErrFormat, "compression method 12"},
		{"zip shorter than declared", zipLiar(t, 1000, 10), ErrFormat, "fewer bytes than the 1000 it declares"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spool := t.TempDir()
			rec := &recorder{}
			sum, err := Read(bytes.NewReader(c.data), spool, small, rec)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v\nwant %v holding %q", err, c.want, c.msg)
			}
			t.Log(err)
			if sum != nil {
				t.Errorf("summary %+v with an error", sum)
			}
			if strings.Contains(err.Error(), "drop") {
				t.Errorf("message quotes wp-config.php: %v", err)
			}
			if len(rec.broken) > 0 {
				t.Errorf("broken promises: %q", rec.broken)
			}
			if left, _ := os.ReadDir(spool); len(left) > 0 {
				t.Errorf("spool left %v", left)
			}
		})
	}
}

// TestReadLimits: bombs and oversized archives stop at their limit,
// before the data behind the limit is decompressed.
func TestReadLimits(t *testing.T) {
	many := func(n int) []ent {
		var es []ent
		for i := range n {
			es = append(es, file(fmt.Sprintf("wp-content/f%d", i), ""))
		}
		return es
	}
	lim := Limits{MaxEntries: 50, MaxBytes: 1 << 20, MaxFileBytes: 300 << 10, MaxArchiveBytes: 1 << 20}
	for _, c := range []struct {
		name string
		data []byte
		msg  string
		read int64 // at most this much input read, if not 0
	}{
		{"zstd bomb", zstdBomb(t), `"wp-content/big": file is larger than 307200 bytes`, 2 << 20},
		{"gzip of many entries", gzipOf(t, tarOf(t, many(51)...)), `"wp-content/f50": archive holds more than 50 entries`, 0},
		{"zip of many entries", zipOf(t, many(51)...), "archive holds more than 50 entries", 0},
		{"zip directory too large", zipOf(t, many(5000)...), "archive holds more than 50 entries", 0},
		{"one file too large", tarOf(t, file("wp-content/a", strings.Repeat("x", 300<<10+1))), "file is larger than", 0},
		{"all files too large", gzipOf(t, tarOf(t, file("wp-content/a", strings.Repeat("x", 300<<10)),
			file("wp-content/b", strings.Repeat("x", 300<<10)), file("wp-content/c", strings.Repeat("x", 300<<10)),
			file("wp-content/d", strings.Repeat("x", 300<<10)))), `"wp-content/d": archive holds more than 1048576 bytes`, 0},
		{"skipped entries count", gzipOf(t, tarOf(t, file("backup.zip", strings.Repeat("x", 1<<20)), file("x.zip", "y"))),
			`"x.zip": archive holds more than 1048576 bytes`, 0},
		{"zip more than declared", zipLiar(t, 10, 10<<20), `"wp-content/x": entry holds more than the 10 bytes it declares`, 0},
		{"zip declares huge", zipLiar(t, 1<<40, 10), "file is larger than", 0},
		{"zip too large to spool", zipOf(t, file("db.sql", string(randomBytes(1100<<10)))), "ZIP archive is larger than 1048576 bytes", 0},
		{"sql.gz bomb", gzipOf(t, tarOf(t, file("db.sql.gz", string(gzipOf(t, make([]byte, 1<<20)))))),
			`"db.sql.gz": dump is larger than 307200 bytes decompressed`, 0},
		{"pax headers only", zstdOf(t, paxJunk(20<<20)), "tar headers take more than", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			spool := t.TempDir()
			in := &counting{r: bytes.NewReader(c.data)}
			_, err := Read(in, spool, lim, &recorder{})
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v\nwant ErrTooLarge holding %q", err, c.msg)
			}
			t.Logf("%v (read %d)", err, in.n)
			if c.read > 0 && in.n > c.read {
				t.Errorf("read %d bytes of input before refusing it", in.n)
			}
			if left, _ := os.ReadDir(spool); len(left) > 0 {
				t.Errorf("spool left %v", left)
			}
		})
	}
}

// zstdBomb is a tar.zst whose first entry declares a terabyte, followed by
// 8 MiB of incompressible data: refusing it early reads little.
func zstdBomb(t testing.TB) []byte {
	var b bytes.Buffer
	zw, err := zstd.NewWriter(&b, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "wp-content/big", Mode: 0o644, Size: 1 << 40, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(randomBytes(8 << 20)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if b.Len() < 8<<20 {
		t.Fatalf("bomb compressed to %d bytes; the test needs it incompressible", b.Len())
	}
	return b.Bytes()
}

// zipLiar is a ZIP with one entry that declares size bytes and holds n.
func zipLiar(t testing.TB, size uint64, n int) []byte {
	var raw bytes.Buffer
	fw, err := flate.NewWriter(&raw, flate.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(make([]byte, n))
	fw.Close()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, err := zw.CreateRaw(&zip.FileHeader{Name: "wp-content/x", Method: zip.Deflate,
		UncompressedSize64: size, CompressedSize64: uint64(raw.Len())})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(raw.Bytes())
	zw.Close()
	return b.Bytes()
}

// zipMethod is a ZIP whose file uses bzip2 (method 12).
func zipMethod(t testing.TB) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, err := zw.CreateRaw(&zip.FileHeader{Name: "wp-content/x", Method: 12, UncompressedSize64: 3, CompressedSize64: 3})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("abc"))
	zw.Close()
	return b.Bytes()
}

// paxJunk is a tar stream of n bytes of PAX extended headers and no
// entry: archive/tar reads them all before it returns anything.
func paxJunk(n int) []byte {
	rec := "20 comment=xxxxxxxx\n"
	var pair [2 * blockSize]byte
	hdr := pair[:blockSize]
	copy(hdr, "PaxHeaders/x")
	copy(hdr[100:], "0000644\x00")
	copy(hdr[124:], fmt.Sprintf("%011o\x00", len(rec)))
	copy(hdr[136:], "00000000000\x00")
	hdr[156] = tar.TypeXHeader
	copy(hdr[257:], "ustar\x0000")
	copy(hdr[148:], "        ")
	var sum int
	for _, c := range hdr {
		sum += int(c)
	}
	copy(hdr[148:], fmt.Sprintf("%06o\x00 ", sum))
	copy(pair[blockSize:], rec)
	return bytes.Repeat(pair[:], n/len(pair))
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(b)
	return b
}

// badCRC spoils the CRC-32 in a gzip member's trailer.
func badCRC(b []byte) []byte {
	b = bytes.Clone(b)
	b[len(b)-8] ^= 0xff
	return b
}

func truncate(b []byte, n int) []byte {
	return b[:min(n, len(b))]
}

// TestReadSpoolRemoved: the ZIP spool file is gone after Read returns,
// whether it succeeded, the archive was refused or the handler failed.
func TestReadSpoolRemoved(t *testing.T) {
	good := zipOf(t, site(false)...)
	for _, c := range []struct {
		name string
		data []byte
		rec  *recorder
		ok   bool
	}{
		{"success", good, &recorder{}, true},
		{"refused", zipOf(t, file("../x", "x")), &recorder{}, false},
		{"handler fails", good, &recorder{failOn: "themes/x/run.sh", failErr: io.ErrShortWrite}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			spool := t.TempDir()
			in := &spoolWatcher{r: bytes.NewReader(c.data), dir: spool}
			_, err := Read(in, spool, small, c.rec)
			if (err == nil) != c.ok {
				t.Fatalf("err %v", err)
			}
			if !in.sawSpool {
				t.Error("no spool file while reading")
			}
			if left, _ := os.ReadDir(spool); len(left) > 0 {
				t.Errorf("spool left %v", left)
			}
		})
	}
	if _, err := Read(bytes.NewReader(good), "/nonexistent/spool", small, &recorder{}); err == nil || isOurs(err) {
		t.Errorf("missing spool directory: %v", err)
	}
}

// spoolWatcher notes whether a spool file exists while Read reads.
type spoolWatcher struct {
	r        io.Reader
	dir      string
	sawSpool bool
}

func (s *spoolWatcher) Read(p []byte) (int, error) {
	if left, _ := os.ReadDir(s.dir); len(left) > 0 {
		s.sawSpool = true
	}
	return s.r.Read(p)
}
