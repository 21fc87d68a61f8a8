package sitearchive

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// small keeps tests quick; Read takes DefaultLimits for zero fields.
var small = Limits{MaxEntries: 200, MaxBytes: 1 << 20, MaxFileBytes: 256 << 10, MaxArchiveBytes: 4 << 20}

// longName makes archive/tar write a PAX header.
var longName = "wp-content/uploads/" + strings.Repeat("long-", 30) + "name.txt"

// site is a dump beside wp-content, as a backup plugin makes it.
func site(withHardlink bool) []ent {
	es := []ent{
		file("db.sql", "CREATE TABLE wp_options (id int);"),
		dir("wp-content/"),
		dir("wp-content/themes/"),
		file("wp-content/themes/y/style.css", "body{}"),
		dir("wp-content/themes/x/"),
		{name: "wp-content/themes/x/run.sh", body: "#!/bin/sh", mode: 0o750},
		symlink("wp-content/themes/x/link", "../y/style.css"),
		file("wp-content/uploads/dump.sql", "just a file"),
		file(longName, "pax"),
	}
	if withHardlink {
		es = append(es, hardlink("wp-content/themes/x/copy", "wp-content/themes/y/style.css"))
	}
	return es
}

var siteLog = []string{
	"sql db.sql CREATE TABLE wp_options (id int);",
	"dir themes",
	"file themes/y/style.css 644 body{}",
	"dir themes/x",
	"file themes/x/run.sh 755 #!/bin/sh",
	"symlink themes/x/link -> ../y/style.css",
	"file uploads/dump.sql 644 just a file",
	"file " + strings.TrimPrefix(longName, "wp-content/") + " 644 pax",
}

var siteSum = Summary{Files: 4, Dirs: 2, Links: 1, Dumps: []string{"db.sql"}}

// wholeRoot is a whole WordPress root under public_html, with a decoy
// wp-config.php elsewhere and the dump beside wp-config.php.
func wholeRoot(t testing.TB) []ent {
	return []ent{
		dir("public_html/"),
		file("public_html/index.php", "<?php require 'wp-blog-header.php';"),
		file("public_html/.htaccess", "RewriteEngine On"),
		dir("public_html/wp-admin/"),
		file("public_html/wp-admin/admin.php", "<?php"),
		file("public_html/wp-includes/version.php", "<?php $wp_version = '6.5';"),
		file("old/wp-config.php", "<?php $table_prefix = 'old_';"),
		file("public_html/wp-config.php", "<?php\n"+
			"define( 'DB_PASSWORD', 'hunter2-secret' );\n"+
			"define( 'DB_CHARSET', 'utf8' );\n"+
			"// $table_prefix = 'commented_';\n"+
			"$table_prefix  = \"wpx_\";\n"),
		dir("public_html/wp-content/"),
		file("public_html/wp-content/plugins/akismet/akismet.php", "<?php // akismet"),
		file("public_html/db.sql.gz", string(gzipOf(t, []byte("INSERT INTO wpx_posts VALUES (1);")))),
	}
}

// TestRead: each accepted kind of archive hands on wp-content and the
// dumps, and nothing else, and says what it found.
func TestRead(t *testing.T) {
	siteTar := tarOf(t, site(true)...)
	withLink := append(slices.Clone(siteLog), "hardlink themes/x/copy -> themes/y/style.css")
	withLinkSum := siteSum
	withLinkSum.Links = 2
	third := len(siteTar) / 3 / 512 * 512
	multi := append(append(gzipOf(t, siteTar[:third]), gzipOf(t, siteTar[third:2*third])...), gzipOf(t, siteTar[2*third:])...)
	rootSum := Summary{Root: "public_html", WholeRoot: true, TablePrefix: "wpx_", DBCharset: "utf8",
		Files: 1, Dumps: []string{"public_html/db.sql.gz"}, Skipped: 6}
	rootLog := []string{"file plugins/akismet/akismet.php 644 <?php // akismet", "sql public_html/db.sql.gz INSERT INTO wpx_posts VALUES (1);"}

	for _, c := range []struct {
		name   string
		data   []byte
		format string
		log    []string
		sum    Summary
	}{
		{"tar", siteTar, "tar", withLink, withLinkSum},
		{"tar.gz", gzipOf(t, siteTar), "tar.gz", withLink, withLinkSum},
		{"tar.zst", zstdOf(t, siteTar), "tar.zst", withLink, withLinkSum},
		{"zip", zipOf(t, site(false)...), "zip", siteLog, siteSum},
		{"gzip members", multi, "tar.gz", withLink, withLinkSum},
		{"gzip trailing zeros", append(gzipOf(t, siteTar), make([]byte, 100)...), "tar.gz", withLink, withLinkSum},
		{"whole root", gzipOf(t, tarOf(t, wholeRoot(t)...)), "tar.gz", rootLog, rootSum},
		{"whole root zip", zipOf(t, wholeRoot(t)...), "zip", rootLog, rootSum},
		{"dot slash", tarOf(t, dir("./"), dir("./wp-content/"), file("./wp-content/a", "a"), file("./db.sql", "x")), "tar",
			[]string{"file a 644 a", "sql db.sql x"}, Summary{Files: 1, Dumps: []string{"db.sql"}, Skipped: 1}},
		{"zip backslashes", zipOf(t, file(`backup\db.sql`, "x"), file(`wp-content\plugins\a\a.php`, "<?php"),
			symlink(`wp-content\plugins\l`, `a\a.php`)), "zip",
			[]string{"sql backup/db.sql x", "file plugins/a/a.php 644 <?php", "symlink plugins/l -> a/a.php"},
			Summary{Files: 1, Links: 1, Dumps: []string{"backup/db.sql"}}},
		{"only a dump", tarOf(t, file("site.SQL", "x")), "tar", []string{"sql site.SQL x"}, Summary{Dumps: []string{"site.SQL"}}},
		{"only a dump zip", zipOf(t, file("site.sql", "x")), "zip", []string{"sql site.sql x"}, Summary{Dumps: []string{"site.sql"}}},
		{"only wp-content", tarOf(t, dir("site/wp-content/")), "tar", nil, Summary{Root: "site"}},
		{"duplicates", tarOf(t, file("wp-content/a", "1"), file("wp-content/a", "2")), "tar",
			[]string{"file a 644 1", "file a 644 2"}, Summary{Files: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spool := t.TempDir()
			rec := &recorder{}
			sum, err := Read(bytes.NewReader(c.data), spool, small, rec)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rec.log, c.log) {
				t.Errorf("handed on\n%q\nwant\n%q", rec.log, c.log)
			}
			if len(rec.broken) > 0 {
				t.Errorf("broken promises: %q", rec.broken)
			}
			want := c.sum
			want.Format, want.Bytes = c.format, rec.bytes
			if !summaryEqual(*sum, want) {
				t.Errorf("summary\n%+v\nwant\n%+v", *sum, want)
			}
			for _, l := range rec.log {
				if strings.Contains(l, "hunter2") {
					t.Errorf("wp-config.php was handed on: %q", l)
				}
			}
			if left, _ := os.ReadDir(spool); len(left) > 0 {
				t.Errorf("spool left %v", left)
			}
		})
	}
}

func summaryEqual(a, b Summary) bool {
	return slices.Equal(a.Dumps, b.Dumps) && fmt.Sprint(a) == fmt.Sprint(b)
}

// TestReadHandler: the handler's error stops Read and comes back naming
// the entry; a handler that reads nothing leaves the stream in step.
func TestReadHandler(t *testing.T) {
	errDisk := errors.New("disk full")
	for _, c := range []struct {
		name    string
		data    []byte
		rec     *recorder
		wantErr string
		log     []string
	}{
		{"file fails", gzipOf(t, tarOf(t, site(true)...)), &recorder{failOn: "themes/x/run.sh", failErr: errDisk},
			`archive entry "wp-content/themes/x/run.sh": disk full`, siteLog[:4]},
		{"dump fails", zipOf(t, site(false)...), &recorder{failOn: "db.sql", failErr: errDisk},
			`archive entry "db.sql": disk full`, nil},
		{"reads nothing", gzipOf(t, tarOf(t, append(site(true), wholeRoot(t)[10])...)), &recorder{readNone: true}, "", []string{
			"sql db.sql", "dir themes", "file themes/y/style.css 644", "dir themes/x", "file themes/x/run.sh 755",
			"symlink themes/x/link -> ../y/style.css", "file uploads/dump.sql 644",
			"file " + strings.TrimPrefix(longName, "wp-content/") + " 644",
			"hardlink themes/x/copy -> themes/y/style.css", "sql public_html/db.sql.gz"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spool := t.TempDir()
			_, err := Read(bytes.NewReader(c.data), spool, small, c.rec)
			if c.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if c.wantErr != "" && (!errors.Is(err, errDisk) || err.Error() != c.wantErr) {
				t.Fatalf("got %v, want %s", err, c.wantErr)
			}
			if !slices.Equal(c.rec.log, c.log) {
				t.Errorf("handed on\n%q\nwant\n%q", c.rec.log, c.log)
			}
			if left, _ := os.ReadDir(spool); len(left) > 0 {
				t.Errorf("spool left %v", left)
			}
		})
	}
}
