package blueprint

import (
	"archive/zip"
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/wpzip"
)

const bundledSource = `{"steps":[{"step":"runSql","sql":{"resource":"bundled","path":"./db.sql"}},
	{"step":"importWxr","file":{"resource":"bundled","path":"content/site.xml"}}]}`

func TestReadBundle(t *testing.T) {
	symlink := func() []byte {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.Create("blueprint.json")
		w.Write([]byte(`{}`))
		h := &zip.FileHeader{Name: "link"}
		h.SetMode(os.ModeSymlink | 0o777)
		w, _ = zw.CreateHeader(h)
		w.Write([]byte("/etc/passwd"))
		zw.Close()
		return buf.Bytes()
	}
	for _, c := range []struct {
		name     string
		zip      []byte
		dir      string
		files    string
		refusal  string
		findings string // codes of Check over the bundle, comma-separated
	}{
		{"at the root", wpzip.BuildRaw([2]string{"blueprint.json", bundledSource}, [2]string{"db.sql", "SELECT 1;"}, [2]string{"content/site.xml", "<rss/>"}),
			"", "blueprint.json,content/site.xml,db.sql", "", ""},
		{"in one directory", wpzip.BuildRaw([2]string{"shop/blueprint.json", bundledSource}, [2]string{"shop/db.sql", "x"},
			[2]string{"shop/content/site.xml", "x"}, [2]string{"__MACOSX/shop/._db.sql", "junk"}),
			"shop", "blueprint.json,content/site.xml,db.sql", "", ""},
		{"a missing file", wpzip.BuildRaw([2]string{"blueprint.json", bundledSource}, [2]string{"db.sql", "x"}),
			"", "blueprint.json,db.sql", "", CodeBundledFileMissing},
		{"escaping resource", wpzip.BuildRaw([2]string{"blueprint.json", `{"steps":[{"step":"runSql","sql":{"resource":"bundled","path":"../../etc/passwd"}}]}`}),
			"", "blueprint.json", "", CodePathOutsideSite},
		{"two manifests", wpzip.BuildRaw([2]string{"blueprint.json", "{}"}, [2]string{"a/blueprint.json", "{}"}), "", "", "2 blueprint.json", ""},
		{"two directories", wpzip.BuildRaw([2]string{"a/blueprint.json", "{}"}, [2]string{"b/blueprint.json", "{}"}), "", "", "2 blueprint.json", ""},
		{"none", wpzip.BuildRaw([2]string{"a/b/blueprint.json", "{}"}), "", "", "no blueprint.json", ""},
		{"a file beside the directory", wpzip.BuildRaw([2]string{"a/blueprint.json", "{}"}, [2]string{"other.txt", "x"}), "", "", "outside it", ""},
		{"traversal entry", wpzip.BuildRaw([2]string{"blueprint.json", "{}"}, [2]string{"../evil.php", "x"}), "", "", "leaves", ""},
		{"absolute entry", wpzip.BuildRaw([2]string{"blueprint.json", "{}"}, [2]string{"/etc/cron.d/x", "x"}), "", "", "absolute", ""},
		{"symlink", symlink(), "", "", "symlink", ""},
		{"not a zip", []byte("{}"), "", "", "not a ZIP", ""},
		{"a BOM", wpzip.BuildRaw([2]string{"blueprint.json", "\xef\xbb\xbf{}"}), "", "blueprint.json", "", ""},
		{"a deeper blueprint.json is a file", wpzip.BuildRaw([2]string{"blueprint.json", "{}"}, [2]string{"a/b/blueprint.json", "{}"}),
			"", "a/b/blueprint.json,blueprint.json", "", ""},
		{"a duplicate entry", wpzip.BuildRaw([2]string{"blueprint.json", "{}"}, [2]string{"x", "1"}, [2]string{"x", "2"}), "", "", "twice", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := ReadBundle(c.zip)
			if c.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), c.refusal) {
					t.Fatalf("err %v, want %q", err, c.refusal)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.ManifestDirectory != c.dir || strings.Join(keysOf(b.Files), ",") != c.files {
				t.Fatalf("dir %q files %v", b.ManifestDirectory, keysOf(b.Files))
			}
			res := Check(b.Source, Env{Bundle: true, BundleFiles: b.Files})
			var codes []string
			for _, f := range res.Report {
				codes = append(codes, f.Code)
			}
			if strings.Join(codes, ",") != c.findings {
				t.Fatalf("findings %+v, want %s", res.Report, c.findings)
			}
		})
	}
}
