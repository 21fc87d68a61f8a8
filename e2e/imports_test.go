package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/klauspost/compress/zstd"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// importSetup gives a site what a live site has: a post that links its
// own URL and shows an image, the image as an attachment, an active
// plugin and theme (files put in place beside it), and options holding
// serialized data with the URL inside.
const importSetup = `<?php require __DIR__.'/wp-load.php';
$home = home_url();
$id = wp_insert_post(array('post_title' => 'Imported post', 'post_status' => 'publish',
  'post_content' => '<p>See <a href="'.$home.'/?p=1">the first post</a> and <img src="'.$home.'/wp-content/uploads/2024/01/pic.png"></p>'));
$att = wp_insert_attachment(array('post_title' => 'pic', 'post_mime_type' => 'image/png', 'post_status' => 'inherit',
  'guid' => $home.'/wp-content/uploads/2024/01/pic.png'), '2024/01/pic.png', $id);
update_post_meta($att, '_wp_attached_file', '2024/01/pic.png');
update_option('sbx_import_test', array('home' => $home.'/', 'list' => array($home.'/a', 'ünï ✓'), 'n' => 7));
update_option('active_plugins', array('import-marker/import-marker.php'));
update_option('template', 'import-theme'); update_option('stylesheet', 'import-theme');
update_option('blogname', 'The live site');
echo json_encode(array('post' => $id, 'attachment' => $att));`

// importCheck reads back what importSetup made, and whether a client
// command of a hostile dump ran inside the site.
const importCheck = `<?php require __DIR__.'/wp-load.php';
$p = get_posts(array('title' => 'Imported post', 'numberposts' => 1));
echo json_encode(array('home' => home_url(), 'blogname' => get_option('blogname'), 'opt' => get_option('sbx_import_test'),
  'content' => $p ? $p[0]->post_content : null, 'plugins' => get_option('active_plugins'), 'theme' => get_option('stylesheet'),
  'pic' => file_exists(WP_CONTENT_DIR.'/uploads/2024/01/pic.png'), 'pwned_inside' => file_exists('/tmp/sbx-import-pwned'),
  'mu' => file_exists(WPMU_PLUGIN_DIR.'/sandbox.php'), 'marker' => file_exists(WP_CONTENT_DIR.'/keep-me.txt')));`

var importTheme = map[string]string{
	"wp-content/themes/import-theme/style.css": "/*\nTheme Name: Import theme\n*/\n",
	"wp-content/themes/import-theme/index.php": "<?php while (have_posts()) { the_post(); echo '<h2>' . get_the_title() . '</h2>'; the_content(); } wp_footer();\n",
	"wp-content/plugins/import-marker/import-marker.php": "<?php\n/* Plugin Name: Import marker */\nadd_action('wp_footer', function () { " +
		"$o = get_option('sbx_import_test'); echo '<!-- import-marker ' . esc_html($o['home']) . ' -->'; });\n",
}

// pngBytes is a 1×1 PNG.
var pngBytes = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89" +
	"\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7\x35\x81\x84\x00\x00\x00\x00IEND\xaeB`\x82")

// dbAccess is a site's database credentials from the API.
func (d *devSystem) dbAccess(t *testing.T, siteID string) *sql.DB {
	t.Helper()
	r := d.owner.Do("GET", "/api/app/sites/"+siteID+"/database", nil).Must(t, 200)
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.DBName = r.Str("database.user"), r.Str("database.password"), "tcp", r.Str("database.name")
	c.Addr = fmt.Sprintf("%s:%v", r.Str("database.host"), r.Get("database.port"))
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// adminDB connects to the node's MariaDB as its administrator, to check
// from outside every site what a hostile dump could have changed.
func (d *devSystem) adminDB(t *testing.T, port string) *sql.DB {
	t.Helper()
	pw, err := os.ReadFile(filepath.Join(d.dir, "agent", "mariadb", "admin-password"))
	if err != nil {
		t.Fatal(err)
	}
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr = "sandboxd", strings.TrimSpace(string(pw)), "tcp", "127.0.0.1:"+port
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// sqlQuote writes a value as mysqldump does.
func sqlQuote(b []byte) string {
	var s strings.Builder
	s.WriteByte('\'')
	for _, c := range b {
		switch c {
		case 0:
			s.WriteString(`\0`)
		case '\n':
			s.WriteString(`\n`)
		case '\r':
			s.WriteString(`\r`)
		case '\\':
			s.WriteString(`\\`)
		case '\'':
			s.WriteString(`\'`)
		case '"':
			s.WriteString(`\"`)
		case 0x1a:
			s.WriteString(`\Z`)
		default:
			s.WriteByte(c)
		}
	}
	s.WriteByte('\'')
	return s.String()
}

// dump writes a site's database as mysqldump would (structure, then
// extended INSERTs), read over the site's own credentials.
func dump(t *testing.T, db *sql.DB) []byte {
	t.Helper()
	var out bytes.Buffer
	out.WriteString("-- MariaDB dump of a live site\n/*!40101 SET NAMES utf8mb4 */;\n/*!40014 SET FOREIGN_KEY_CHECKS=0 */;\n\n")
	rows, err := db.Query("SHOW FULL TABLES WHERE Table_type = 'BASE TABLE'")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	for _, tbl := range tables {
		var name, create string
		if err := db.QueryRow("SHOW CREATE TABLE `"+tbl+"`").Scan(&name, &create); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "DROP TABLE IF EXISTS `%s`;\n%s;\n/*!40000 ALTER TABLE `%s` DISABLE KEYS */;\n", tbl, create, tbl)
		rows, err := db.Query("SELECT * FROM `" + tbl + "`")
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		var values []string
		for rows.Next() {
			raw := make([]sql.RawBytes, len(cols))
			ptrs := make([]any, len(cols))
			for i := range raw {
				ptrs[i] = &raw[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			vals := make([]string, len(cols))
			for i, v := range raw {
				if v == nil {
					vals[i] = "NULL"
				} else {
					vals[i] = sqlQuote(v)
				}
			}
			values = append(values, "("+strings.Join(vals, ",")+")")
		}
		rows.Close()
		for len(values) > 0 {
			n := min(len(values), 50)
			fmt.Fprintf(&out, "INSERT INTO `%s` VALUES %s;\n", tbl, strings.Join(values[:n], ","))
			values = values[n:]
		}
		fmt.Fprintf(&out, "/*!40000 ALTER TABLE `%s` ENABLE KEYS */;\n\n", tbl)
	}
	return out.Bytes()
}

// entry is one member of a test archive.
type entry struct {
	name, body, link string
	typ              byte
}

func tarOf(t *testing.T, entries []entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: e.typ, Linkname: e.link, ModTime: time.Now()}
		if e.typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return b.Bytes()
}

func gzipOf(data []byte) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(data)
	zw.Close()
	return b.Bytes()
}

func zipArchive(t *testing.T, entries []entry) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, e := range entries {
		w, err := zw.Create(e.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(e.body))
	}
	zw.Close()
	return b.Bytes()
}

// liveEntries is a live site's archive: its dump, the theme and plugin
// it uses, its upload.
func liveEntries(sqlDump []byte, root string) []entry {
	es := []entry{{name: root + "backup.sql", body: string(sqlDump)}}
	for name, body := range importTheme {
		es = append(es, entry{name: root + name, body: body})
	}
	return append(es, entry{name: root + "wp-content/uploads/2024/01/pic.png", body: string(pngBytes)})
}

// importArchive uploads an archive in chunks into a new sandbox (siteID
// "") or in place, and waits for the import to end.
func (d *devSystem) importArchive(t *testing.T, siteID, sourceURL string, archive []byte, chunk int) *st.Response {
	t.Helper()
	body := map[string]any{"sourceUrl": sourceURL, "sizeBytes": len(archive)}
	if siteID != "" {
		body["siteId"] = siteID
	}
	id := d.owner.Do("POST", "/api/app/imports", body).Must(t, 201).Str("import.id")
	for off := 0; off < len(archive); off += chunk {
		end := min(len(archive), off+chunk)
		d.owner.Do("PUT", "/api/app/imports/"+id+"/upload", archive[off:end], "Content-Type", "application/octet-stream",
			"X-Service-Offset", strconv.Itoa(off)).Must(t, 200)
	}
	d.owner.Do("POST", "/api/app/imports/"+id+"/complete", nil).Must(t, 202)
	var r *st.Response
	st.WaitFor(t, 3*time.Minute, "import "+id, func() bool {
		r = d.owner.Do("GET", "/api/app/imports/"+id, nil).Must(t, 200)
		s := r.Str("import.status")
		return s == "ready" || s == "failed"
	})
	return r
}

func (d *devSystem) importState(t *testing.T, siteID, url string) map[string]any {
	t.Helper()
	d.putFile(t, siteID, "import-check.php", importCheck)
	code, body := served(t, url+"/import-check.php")
	var out map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("import check: %d %s", code, body)
	}
	return out
}

// unserialized has the host's PHP unserialize a value, as WordPress would.
func unserialized(t *testing.T, v string) map[string]any {
	t.Helper()
	cmd := exec.Command("php", "-r", `echo json_encode(unserialize(stream_get_contents(STDIN), ['allowed_classes' => false]));`)
	cmd.Stdin = strings.NewReader(v)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("php unserialize: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("unserialize gave %s", out)
	}
	return m
}

// TestImportsOnRealSites: a live WordPress (a sandbox set up as one) is
// dumped and archived as tar.gz; uploaded in chunks it becomes a new
// sandbox serving the same content at its own URL, serialized options
// intact; as a ZIP with a whole WordPress root (another table prefix in
// its wp-config.php) it replaces an existing sandbox's content in place.
// Hostile archives and dumps are refused, with the host, MariaDB and the
// target site checked afterwards: nothing outside the site changed and
// the site itself is as it was.
func TestImportsOnRealSites(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)

	// The live site.
	live := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Live"}).Must(t, 202)
	liveID, liveURL := live.Str("site.id"), live.Str("site.url")
	if job := d.waitJob(t, live.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("live site: %v", job)
	}
	for name, body := range importTheme {
		d.putFile(t, liveID, name, body)
	}
	d.putFile(t, liveID, "import-setup.php", importSetup)
	if code, body := served(t, liveURL+"/import-setup.php"); code != 200 || !strings.Contains(body, `"attachment"`) {
		t.Fatalf("setup: %d %s", code, body)
	}
	liveDB := d.dbAccess(t, liveID)
	sqlDump := dump(t, liveDB)
	if !bytes.Contains(sqlDump, []byte(liveURL)) {
		t.Fatal("the dump does not hold the live URL")
	}

	// 1. tar.gz of dump + wp-content into a new sandbox, in 256 KiB chunks.
	archive := gzipOf(tarOf(t, liveEntries(sqlDump, "")))
	res := d.importArchive(t, "", liveURL, archive, 256<<10)
	if res.Str("import.status") != "ready" {
		t.Fatalf("import: %s", res.Raw)
	}
	newID, newURL := res.Str("import.siteId"), res.Str("siteUrl")
	if newURL == "" || newURL == liveURL || res.Str("loginUrl") == "" {
		t.Fatalf("ready import: %s", res.Raw)
	}
	got := d.importState(t, newID, newURL)
	opt, _ := got["opt"].(map[string]any)
	if got["home"] != newURL || got["blogname"] != "The live site" || got["theme"] != "import-theme" || got["pic"] != true || got["mu"] != true ||
		opt["home"] != newURL+"/" || fmt.Sprint(opt["list"]) != fmt.Sprint([]any{newURL + "/a", "ünï ✓"}) || opt["n"] != 7.0 {
		t.Fatalf("imported site: %v", got)
	}
	content, _ := got["content"].(string)
	if !strings.Contains(content, newURL+"/wp-content/uploads/2024/01/pic.png") || strings.Contains(content, liveURL) {
		t.Fatalf("content not moved to the new URL: %s", content)
	}
	// The serialized option as stored: PHP reads it back whole.
	var raw string
	if err := d.dbAccess(t, newID).QueryRow("SELECT option_value FROM wp_options WHERE option_name = 'sbx_import_test'").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if u := unserialized(t, raw); u["home"] != newURL+"/" {
		t.Fatalf("serialized option: %s", raw)
	}
	code, page := served(t, newURL+"/")
	if code != 200 || !strings.Contains(page, "<h2>Imported post</h2>") || !strings.Contains(page, "import-marker "+newURL+"/") {
		t.Fatalf("the new sandbox's front page: %d %.600s", code, page)
	}
	if code, img := fetch(t, newURL+"/wp-content/uploads/2024/01/pic.png"); code != 200 || img != string(pngBytes) {
		t.Fatalf("the image: %d", code)
	}
	// The one-time login signs in as the imported administrator.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Transport: localhostClient.Transport, Timeout: 30 * time.Second}
	resp, err := browser.Get(res.Str("loginUrl"))
	if err != nil {
		t.Fatal(err)
	}
	adminPage, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Request.URL.Path, "/wp-admin") || !strings.Contains(string(adminPage), "wp-admin-bar") {
		t.Fatalf("login link: %d %s %.300s", resp.StatusCode, resp.Request.URL, adminPage)
	}
	// The live site is untouched.
	if l := d.importState(t, liveID, liveURL); l["home"] != liveURL {
		t.Fatalf("live site changed: %v", l)
	}

	// 2. A ZIP of a whole WordPress root (table prefix wpx_ in its
	// wp-config.php, core files beside it) pushed into an existing
	// sandbox in place.
	target := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Target"}).Must(t, 202)
	targetID, targetURL := target.Str("site.id"), target.Str("site.url")
	d.waitJob(t, target.Str("jobId"))
	prefixed := bytes.ReplaceAll(sqlDump, []byte("`wp_"), []byte("`wpx_"))
	prefixed = bytes.ReplaceAll(prefixed, []byte("'wp_user_roles'"), []byte("'wpx_user_roles'"))
	prefixed = bytes.ReplaceAll(prefixed, []byte("'wp_capabilities'"), []byte("'wpx_capabilities'"))
	root := append(liveEntries(prefixed, "public_html/"),
		entry{name: "public_html/wp-config.php", body: "<?php\ndefine( 'DB_NAME', 'live' );\ndefine( 'DB_PASSWORD', 'live-secret' );\n" +
			"define( 'DB_CHARSET', 'utf8mb4' );\n$table_prefix  = 'wpx_';\nrequire_once ABSPATH . 'wp-settings.php';\n"},
		entry{name: "public_html/wp-includes/version.php", body: "<?php $wp_version = '6.0';"},
		entry{name: "public_html/index.php", body: "<?php // core"})
	res = d.importArchive(t, targetID, liveURL, zipArchive(t, root), 1<<20)
	if res.Str("import.status") != "ready" || res.Str("import.siteId") != targetID {
		t.Fatalf("in-place import: %s", res.Raw)
	}
	got = d.importState(t, targetID, targetURL)
	if opt, _ := got["opt"].(map[string]any); got["home"] != targetURL || opt["home"] != targetURL+"/" || got["theme"] != "import-theme" {
		t.Fatalf("in-place import: %v", got)
	}
	// The imported administrator (renamed keys of prefix wpx_) signs in.
	if code, _ := served(t, targetURL+"/"); code != 200 {
		t.Fatalf("target front page: %d", code)
	}

	// 3. Hostile archives and dumps against the target, each refused.
	d.putFile(t, targetID, "wp-content/keep-me.txt", "still here")
	before := d.importState(t, targetID, targetURL)
	tdb := d.dbAccess(t, targetID)
	var siteUser, port string
	r := d.owner.Do("GET", "/api/app/sites/"+targetID+"/database", nil).Must(t, 200)
	siteUser, port = r.Str("database.user"), fmt.Sprint(r.Get("database.port"))
	siteDB := r.Str("database.name")
	admin := d.adminDB(t, port)
	grants := func() string {
		rows, err := admin.Query("SHOW GRANTS FOR '" + siteUser + "'@'127.0.0.1'")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var all []string
		for rows.Next() {
			var g string
			rows.Scan(&g)
			all = append(all, g)
		}
		return strings.Join(all, "\n")
	}
	count := func(q string) int {
		var n int
		if err := admin.QueryRow(q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The node's MariaDB is the shared dev system's: other tests add and
	// drop sites' users and databases meanwhile, so what is checked is
	// what these archives tried.
	grantsBefore := grants()
	passwdBefore, _ := os.ReadFile("/etc/passwd")
	os.Remove("/tmp/sbx-import-pwned")
	os.Remove("/tmp/sbx-import-abs")

	tinyDump := "CREATE TABLE wp_options (option_id int);\n"
	bomb := func() []byte { // a tar declaring a 64 GiB file, compressed to a few MB
		var b bytes.Buffer
		zw, _ := zstd.NewWriter(&b, zstd.WithEncoderLevel(zstd.SpeedFastest))
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: "wp-content/big.bin", Mode: 0o644, Size: 64 << 30, Typeflag: tar.TypeReg})
		zeros := make([]byte, 1<<20)
		for range 64 { // the first 64 MiB of it are enough to be sent
			tw.Write(zeros)
		}
		zw.Close()
		return b.Bytes()
	}
	for _, c := range []struct {
		name    string
		archive []byte
		reason  string
	}{
		{"traversal", gzipOf(tarOf(t, []entry{{name: "db.sql", body: tinyDump}, {name: "wp-content/../../../../tmp/sbx-import-pwned", body: "x"}})), "leaves"},
		{"absolute", gzipOf(tarOf(t, []entry{{name: "db.sql", body: tinyDump}, {name: "/tmp/sbx-import-abs", body: "x"}})), "absolute"},
		{"symlink out", tarOf(t, []entry{{name: "db.sql", body: tinyDump}, {name: "wp-content/etc", typ: tar.TypeSymlink, link: "/etc"},
			{name: "wp-content/etc/passwd", body: "root::0:0::/:/bin/sh\n"}}), "symlink"},
		{"hardlink out", tarOf(t, []entry{{name: "db.sql", body: tinyDump}, {name: "wp-content/pw", typ: tar.TypeLink, link: "/etc/passwd"}}), "link"},
		{"bomb", bomb(), "large"},
		{"shell escape", tarOf(t, []entry{{name: "db.sql", body: tinyDump + "\\! touch /tmp/sbx-import-pwned\n"}}), "client command"},
		{"system", tarOf(t, []entry{{name: "db.sql", body: "system touch /tmp/sbx-import-pwned\n" + tinyDump}}), "client command"},
		{"grant", tarOf(t, []entry{{name: "db.sql", body: tinyDump + "GRANT ALL PRIVILEGES ON *.* TO '" + siteUser + "'@'127.0.0.1';\n"}}), "GRANT"},
		{"other database", tarOf(t, []entry{{name: "db.sql", body: "USE mysql;\nDROP TABLE IF EXISTS user;\nCREATE DATABASE evil;\n" +
			"INSERT INTO mysql.user (Host, User) VALUES ('%', 'evil');\n"}}), "denied"},
		{"no dump", gzipOf(tarOf(t, []entry{{name: "wp-content/x.txt", body: "x"}})), "dump"},
		{"not an archive", []byte("just some bytes, not an archive at all"), "archive"},
	} {
		res := d.importArchive(t, targetID, liveURL, c.archive, 4<<20)
		if res.Str("import.status") != "failed" || !strings.Contains(strings.ToLower(res.Str("import.failureReason")), strings.ToLower(c.reason)) {
			t.Errorf("%s: %s %s", c.name, res.Str("import.status"), res.Str("import.failureReason"))
		}
	}
	for _, p := range []string{"/tmp/sbx-import-pwned", "/tmp/sbx-import-abs"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists on the host", p)
		}
	}
	if passwd, _ := os.ReadFile("/etc/passwd"); !bytes.Equal(passwd, passwdBefore) {
		t.Error("/etc/passwd changed")
	}
	if g := grants(); g != grantsBefore {
		t.Errorf("the site user's grants changed:\n%s\nwas\n%s", g, grantsBefore)
	}
	if n := count("SELECT COUNT(*) FROM mysql.user WHERE User = 'evil'"); n != 0 {
		t.Errorf("an archive added a MariaDB user")
	}
	if n := count("SELECT COUNT(*) FROM mysql.user WHERE User = 'sandboxd'"); n == 0 {
		t.Errorf("the administrator is gone from mysql.user")
	}
	if n := count("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'evil' OR SCHEMA_NAME = '" + siteDB + "_i'"); n != 0 {
		t.Errorf("a database evil or a staging database is left")
	}
	after := d.importState(t, targetID, targetURL)
	if fmt.Sprint(after) != fmt.Sprint(before) || after["marker"] != true || after["pwned_inside"] != false {
		t.Errorf("the target changed under failed imports:\n%v\nwas\n%v", after, before)
	}
	var tables int
	if err := tdb.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").Scan(&tables); err != nil || tables < 10 {
		t.Errorf("the target's tables: %d %v", tables, err)
	}
}
