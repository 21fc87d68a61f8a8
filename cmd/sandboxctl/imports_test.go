package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// wpDir makes a WordPress-like directory: core files, a wp-config.php
// (WP_HOME, a table prefix, a password), a dump at its top, wp-content
// with a plugin, an incompressible upload of uploadKiB KiB, a symlink that
// stays inside wp-content and two that leave it (one to a directory
// holding a secret). It returns the directory and the secret's text.
func wpDir(t *testing.T, uploadKiB int) (string, string) {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "public_html")
	outside := filepath.Join(base, "outside")
	secret := "outside-secret-" + time.Now().Format("150405.000000")
	files := map[string]string{
		"public_html/index.php":                            "<?php // core",
		"public_html/wp-includes/version.php":              "<?php $wp_version = '6.5';",
		"public_html/dump.sql":                             "CREATE TABLE shop_options (option_name varchar(191));\n",
		"public_html/wp-content/plugins/marker/marker.php": "<?php /* Plugin Name: Marker */",
		"public_html/wp-content/themes/t/style.css":        "/* Theme Name: T */",
		"public_html/wp-config.php": `<?php
// define('WP_HOME', 'http://old.example');
define( 'DB_PASSWORD', 'hunter2-live' );
define( 'DB_CHARSET', 'utf8mb4' );
/* $table_prefix = 'nope_'; */
$table_prefix = 'shop_';
define( 'WP_HOME', 'https://shop.example.com' );
define('WP_SITEURL', "https://shop.example.com/wp");
require_once ABSPATH . 'wp-settings.php';
`,
		"outside/secret.txt": secret,
	}
	for name, body := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, uploadKiB<<10)
	rand.Read(big)
	if err := os.MkdirAll(filepath.Join(dir, "wp-content/uploads/2024"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wp-content/uploads/2024/big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"wp-content/uploads/themes-link": "../themes",           // inside: kept as a symlink
		"wp-content/escape-dir":          outside,               // absolute, outside: left out
		"wp-content/plugins/escape-rel":  "../../../outside",    // relative, outside: left out
		"wp-content/uploads/up-to-root":  "../../wp-config.php", // inside PATH but outside wp-content: left out
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return dir, secret
}

// tarEntries reads a tar.gz into name → entry (body for files).
func tarEntries(t *testing.T, p string) map[string]*tar.Header {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tar.Header{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		h.PAXRecords = map[string]string{"body": string(body)}
		out[h.Name] = h
	}
}

func TestImportsPackDirectory(t *testing.T) {
	dir, secret := wpDir(t, 4)
	src, err := importsInspect(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if src.Dump != filepath.Join(dir, "dump.sql") || src.Config.Home != "https://shop.example.com" || src.Config.Prefix != "shop_" {
		t.Fatalf("inspect: %+v", src)
	}
	dst := filepath.Join(t.TempDir(), "a.tar.gz")
	size, sha, stats, err := importsPack(t.Context(), src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if n, h, _ := importsHashFile(t.Context(), dst); n != size || h != sha {
		t.Fatalf("size/sha %d %s, file %d %s", size, sha, n, h)
	}
	got := tarEntries(t, dst)
	body := func(name string) string {
		h := got[name]
		if h == nil {
			t.Fatalf("no %s in %v", name, keys(got))
		}
		return h.PAXRecords["body"]
	}
	if !strings.Contains(body("database.sql"), "shop_options") {
		t.Fatal("the dump is not at the archive's top")
	}
	stub := body("wp-config.php")
	if !strings.Contains(stub, "$table_prefix = 'shop_';") || !strings.Contains(stub, "'DB_CHARSET', 'utf8mb4'") || strings.Contains(stub, "hunter2") {
		t.Fatalf("wp-config.php stub: %s", stub)
	}
	body("wp-content/plugins/marker/marker.php")
	if h := got["wp-content/uploads/themes-link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "../themes" {
		t.Fatalf("the symlink inside wp-content: %+v", h)
	}
	for name, h := range got {
		if strings.Contains(h.PAXRecords["body"], secret) || strings.Contains(name, "escape") || strings.Contains(name, "up-to-root") ||
			name == "index.php" || strings.HasPrefix(name, "wp-includes") {
			t.Errorf("%s should not be in the archive", name)
		}
	}
	if len(stats.Skipped) != 3 || stats.Links != 1 || stats.Files != 4 {
		t.Fatalf("stats: %+v", stats)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestImportsLinkInside(t *testing.T) {
	for _, tc := range []struct {
		rel, target string
		ok          bool
	}{
		{"wp-content/a/link", "../b", true},
		{"wp-content/a/link", "b/c", true},
		{"wp-content/a/link", "./b", true},
		{"wp-content/link", "../x", false},
		{"wp-content/a/b/link", "../../x", true},
		{"wp-content/a/b/link", "../../../x", false},
		{"wp-content/a/link", "b/../../x", false},
		{"wp-content/a/link", "/etc/passwd", false},
		{"wp-content/a/link", "", false},
	} {
		if got := importsLinkInside(tc.rel, tc.target); got != tc.ok {
			t.Errorf("%s -> %s: %v, want %v", tc.rel, tc.target, got, tc.ok)
		}
	}
}

func TestImportsParseWPConfig(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want importsWPConfig
	}{
		{`<?php define('WP_HOME','https://a.example'); $table_prefix='wp_';`, importsWPConfig{Home: "https://a.example", Prefix: "wp_"}},
		{`<?php # define('WP_HOME','https://old');
define("WP_SITEURL", "http://b.example");`, importsWPConfig{SiteURL: "http://b.example"}},
		{`<?php define('WP_HOME', 'https://' . $_SERVER['HTTP_HOST']);`, importsWPConfig{}},
		{`<?php define("WP_HOME", "https://$host");`, importsWPConfig{}},
		{`<?php $table_prefix = 'a_'; $table_prefix = 'b_'; define('DB_CHARSET', 'latin1'); define('DB_CHARSET', 'x');`,
			importsWPConfig{Prefix: "b_", Charset: "latin1"}},
		{`<?php /* define('WP_HOME', 'https://c'); */ $s = "// not a comment"; define('WP_HOME', 'https://d');`, importsWPConfig{Home: "https://d"}},
	} {
		if got := importsParseWPConfig([]byte(tc.src)); got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.src, got, tc.want)
		}
	}
}

func TestImportsParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // 0: an error
	}{
		{"500K", 500 << 10}, {"500k", 500 << 10}, {"2M", 2 << 20}, {"2MB", 2 << 20}, {"2MiB", 2 << 20}, {"1G", 1 << 30},
		{"1048576", 1 << 20}, {"1.5K", 1536}, {" 64m ", 64 << 20}, {"100B", 100},
		{"0", 0}, {"0.1", 0}, {"-1K", 0}, {"", 0}, {"fast", 0}, {"5X", 0}, {"2 M B", 0}, {"1iB", 0}, {"9999999T", 0},
	} {
		got, err := importsParseSize(tc.in)
		if tc.want == 0 && err == nil {
			t.Errorf("%q: %d, want an error", tc.in, got)
		}
		if tc.want != 0 && (err != nil || got != tc.want) {
			t.Errorf("%q: %d %v, want %d", tc.in, got, err, tc.want)
		}
	}
}

// TestImportsProgressLines: without a terminal, a line after the first
// chunk and then one per 10% at most; restore lines per phase or 10%.
func TestImportsProgressLines(t *testing.T) {
	var b bytes.Buffer
	p := importsNewProgress(&b)
	for done := int64(1); done <= 100; done++ {
		p.Sending(done, 100)
		p.Uploaded(done, 100)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 11 || lines[0] != "uploaded 1 B of 100 B (1%)" || lines[10] != "uploaded 100 B of 100 B (100%)" {
		t.Fatalf("upload lines: %q", lines)
	}
	b.Reset()
	for _, s := range []struct {
		phase string
		pct   int
	}{{"creating_site", 0}, {"creating_site", 0}, {"restoring", 10}, {"restoring", 15}, {"restoring", 20}, {"finishing", 95}} {
		p.Restore(s.phase, s.pct)
	}
	if got := b.String(); got != "restore: creating_site 0%\nrestore: restoring 10%\nrestore: restoring 20%\nrestore: finishing 95%\n" {
		t.Fatalf("restore lines: %q", got)
	}
	if byteSize(4<<20) != "4.0 MiB" || byteSize(15_938_355) != "15.2 MiB" || byteSize(999) != "999 B" {
		t.Fatal(byteSize(4<<20), byteSize(15_938_355))
	}
}

// TestImportsBar: the terminal bar draws through progressbar.
func TestImportsBar(t *testing.T) {
	var b bytes.Buffer
	bars := &importsBars{w: &b}
	bars.Sending(0, 1<<20)
	bars.Uploaded(1<<20, 1<<20)
	bars.Restore("restoring", 40)
	bars.Restore("done", 100)
	bars.Stop()
	if out := b.String(); !strings.Contains(out, "uploading 100%") || !strings.Contains(out, "done") || !strings.Contains(out, "█") {
		t.Fatalf("bars: %q", out)
	}
}

// importsEnv points the CLI at a server and temp config and cache.
func importsEnv(t *testing.T, url, token string) string {
	t.Helper()
	cache := t.TempDir()
	t.Setenv("SANDBOXCTL_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	t.Setenv("SANDBOXCTL_CACHE", cache)
	t.Setenv("SANDBOX_URL", url)
	t.Setenv("SANDBOX_TOKEN", token)
	return filepath.Join(cache, "imports")
}

// cacheFiles lists what the imports cache holds.
func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*"))
	return m
}

// TestImportsPushResumeOnServer: against a real control plane, a push
// interrupted after two chunks exits 130 with a saved state and the
// server holding exactly those chunks; the same command goes on from
// there (it says so) and uploads the rest. Completing needs a node agent,
// which st.Single has not: the refusal exits 1 and keeps the state, so
// that running the command again asks again (from the last byte). A
// state whose import was cancelled is stale and a new import starts;
// --restart cancels the saved one; cancel and delete drop the state and
// the packed archive.
func TestImportsPushResumeOnServer(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	cache := importsEnv(t, s.URL(), alice.Token)
	dir, _ := wpDir(t, 24)
	api := st.NewClient(t, s.URL(), alice.Token)
	resumeID := regexp.MustCompile(`imports resume (imp_\w+)`)
	stopAfter := func(n int) {
		importsStopAfterChunksForTests = n
		t.Cleanup(func() { importsStopAfterChunksForTests = 0 })
	}

	stopAfter(2)
	code, out, errs := ctl(t, "", "imports", "push", dir, "--chunk-size", "4K")
	if code != 130 || !strings.Contains(errs, "interrupted") || !strings.Contains(errs, "run the same command again") ||
		!strings.Contains(errs, "uploaded 4.0 KiB of") || !strings.Contains(errs, "server holds 8.0 KiB") {
		t.Fatalf("interrupted push: %d %s %s", code, out, errs)
	}
	id := resumeID.FindStringSubmatch(errs)
	if id == nil {
		t.Fatalf("no resume hint: %s", errs)
	}
	imp := api.Do("GET", "/api/app/imports/"+id[1], nil).Must(t, 200)
	size, _ := importsNum(imp.Get("import.sizeBytes"))
	if imp.Str("import.status") != "uploading" || imp.Get("import.receivedBytes") != 8192.0 || size <= 8192 ||
		imp.Str("import.sourceUrl") != "https://shop.example.com" || imp.Str("import.sourceKind") != "archive" {
		t.Fatalf("the import after the interruption: %s", imp.Raw)
	}
	if n := len(cacheFiles(t, cache)); n != 2 {
		t.Fatalf("cache after the interruption: %v", cacheFiles(t, cache))
	}
	code, out, _ = ctl(t, "", "imports", "list")
	if code != 0 || !strings.Contains(out, id[1]) || !strings.Contains(out, "uploading") || !strings.Contains(out, "shop.example.com") {
		t.Fatalf("imports list: %d %s", code, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > 80 {
			t.Errorf("list line over 80 columns: %q", l)
		}
	}
	if code, out, _ = ctl(t, "", "imports", "get", id[1]); code != 0 || !strings.Contains(out, "uploading 32%") {
		t.Fatalf("imports get: %d %s", code, out)
	}

	stopAfter(0)
	code, out, errs = ctl(t, "", "imports", "push", dir, "--chunk-size", "4K")
	if code != 1 || !strings.Contains(errs, "resuming import "+id[1]+" from byte 8192") || !strings.Contains(errs, "(100%)") ||
		!strings.Contains(errs, "service_unavailable") || !strings.Contains(errs, "run the same command again") {
		t.Fatalf("resumed push: %d %s %s", code, out, errs)
	}
	if got := api.Do("GET", "/api/app/imports/"+id[1], nil).Must(t, 200).Get("import.receivedBytes"); got != float64(size) {
		t.Fatalf("received %v of %d", got, size)
	}
	code, _, errs = ctl(t, "", "imports", "push", dir, "--chunk-size", "4K")
	if code != 1 || !strings.Contains(errs, fmt.Sprintf("from byte %d", size)) || strings.Contains(errs, "\nuploaded ") {
		t.Fatalf("push of a whole upload: %d %s", code, errs)
	}
	if code, out, _ = ctl(t, "", "imports", "cancel", id[1]); code != 0 || !strings.Contains(out, "cancelled "+id[1]) {
		t.Fatalf("cancel: %d %s", code, out)
	}
	if left := cacheFiles(t, cache); len(left) != 0 {
		t.Fatalf("cancel left in the cache: %v", left)
	}

	// The server cancels an import behind our back: the state is stale
	// and the next push starts a new import.
	stopAfter(1)
	code, _, errs = ctl(t, "", "imports", "push", dir, "--chunk-size", "4K")
	id2 := resumeID.FindStringSubmatch(errs)
	if code != 130 || id2 == nil || id2[1] == id[1] || strings.Contains(errs, "resuming") {
		t.Fatalf("push after a cancel: %d %s", code, errs)
	}
	api.Do("DELETE", "/api/app/imports/"+id2[1], nil).Must(t, 200)
	code, _, errs = ctl(t, "", "imports", "push", dir, "--chunk-size", "4K")
	id3 := resumeID.FindStringSubmatch(errs)
	if code != 130 || !strings.Contains(errs, "stale") || !strings.Contains(errs, "cancelled already") || id3 == nil || id3[1] == id2[1] {
		t.Fatalf("push over a stale state: %d %s", code, errs)
	}
	// --restart drops the saved upload and cancels its import.
	code, _, errs = ctl(t, "", "imports", "push", dir, "--chunk-size", "4K", "--restart")
	id4 := resumeID.FindStringSubmatch(errs)
	if code != 130 || !strings.Contains(errs, "cancelled the earlier import "+id3[1]) || id4 == nil || id4[1] == id3[1] {
		t.Fatalf("push --restart: %d %s", code, errs)
	}
	if s := api.Do("GET", "/api/app/imports/"+id3[1], nil).Must(t, 200).Str("import.status"); s != "cancelled" {
		t.Fatalf("the restarted import is %s", s)
	}
	// A flag that differs from the saved upload's wants --restart.
	if code, _, errs = ctl(t, "", "imports", "push", dir, "--source-url", "https://other.example"); code != 2 || !strings.Contains(errs, "--restart") {
		t.Fatalf("push with another --source-url: %d %s", code, errs)
	}
	// delete removes the history row and the saved upload.
	if code, out, _ = ctl(t, "", "imports", "delete", id4[1]); code != 0 || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %d %s", code, out)
	}
	api.Do("GET", "/api/app/imports/"+id4[1], nil).Must(t, 404)
	if left := cacheFiles(t, cache); len(left) != 0 {
		t.Fatalf("delete left in the cache: %v", left)
	}
}

// TestImportsBadInput: wrong command lines exit 2 (with a hint where
// there is one), API refusals exit 1 with the code on stderr.
func TestImportsBadInput(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	importsEnv(t, s.URL(), alice.Token)
	dir, _ := wpDir(t, 1)
	noDump, _ := wpDir(t, 1)
	os.Remove(filepath.Join(noDump, "dump.sql"))
	twoDumps, _ := wpDir(t, 1)
	os.WriteFile(filepath.Join(twoDumps, "other.sql.gz"), []byte("x"), 0o644)
	noConfig, _ := wpDir(t, 1)
	os.Remove(filepath.Join(noConfig, "wp-config.php"))
	notWP := t.TempDir()
	archive := filepath.Join(t.TempDir(), "site.tar.gz")
	if _, _, _, err := importsPack(t.Context(), &importsSource{Abs: dir, Dir: true, Dump: filepath.Join(dir, "dump.sql")}, archive); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(junk, []byte("hello"), 0o644)

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"imports", "push"}, 2, "wants PATH"},
		{[]string{"imports", "push", dir, "extra"}, 2, "wants PATH"},
		{[]string{"imports", "push", noDump}, 2, "wp db export"},
		{[]string{"imports", "push", twoDumps}, 2, "--sql"},
		{[]string{"imports", "push", noConfig}, 2, "--source-url is required"},
		{[]string{"imports", "push", archive}, 2, "--source-url is required"},
		{[]string{"imports", "push", archive, "--source-url", "https://a.example", "--sql", "x.sql"}, 2, "--sql goes with a directory"},
		{[]string{"imports", "push", notWP}, 2, "no wp-content"},
		{[]string{"imports", "push", junk, "--source-url", "https://a.example"}, 2, "neither a directory nor"},
		{[]string{"imports", "push", filepath.Join(dir, "nope")}, 2, "no such"},
		{[]string{"imports", "push", dir, "--sql", filepath.Join(dir, "missing.sql")}, 2, "--sql"},
		{[]string{"imports", "push", dir, "--chunk-size", "100"}, 2, "between 1K and 64M"},
		{[]string{"imports", "push", dir, "--chunk-size", "65M"}, 2, "between 1K and 64M"},
		{[]string{"imports", "push", dir, "--chunk-size", "big"}, 2, "not a size"},
		{[]string{"imports", "push", dir, "--limit-rate", "0"}, 2, "less than one byte"},
		{[]string{"imports", "push", dir, "--limit-rate", "fast"}, 2, "not a size"},
		{[]string{"imports", "push", noConfig, "--source-url", "ftp://x"}, 1, "invalid_request"},
		{[]string{"imports", "push", dir, "--site", "site_nope"}, 1, "site_not_found"},
		{[]string{"imports", "get"}, 2, "wants IMPORT"},
		{[]string{"imports", "get", "imp_nope"}, 1, "import_not_found"},
		{[]string{"imports", "cancel", "imp_nope"}, 1, "import_not_found"},
		{[]string{"imports", "delete", "imp_nope"}, 1, "import_not_found"},
		{[]string{"imports", "resume", "imp_nope"}, 1, "import_not_found"},
		{[]string{"imports", "list", "x"}, 2, ""},
		{[]string{"imports", "frob"}, 2, ""},
	} {
		code, out, errs := ctl(t, "", tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tc.args, code, tc.code, tc.want, out, errs)
		}
	}
	// An archive is sent as it is, with --source-url (complete needs an
	// agent), and stays when its import is cancelled.
	code, _, errs := ctl(t, "", "imports", "push", archive, "--source-url", "https://a.example")
	id := regexp.MustCompile(`imports resume (imp_\w+)`).FindStringSubmatch(errs)
	if code != 1 || !strings.Contains(errs, "uploaded 1.") || id == nil {
		t.Fatalf("push an archive: %d %s", code, errs)
	}
	if code, _, _ := ctl(t, "", "imports", "cancel", id[1]); code != 0 {
		t.Fatalf("cancel: %d", code)
	}
	if _, err := os.Stat(archive); err != nil {
		t.Fatalf("the user's archive was removed: %v", err)
	}
}

// TestImportsHelp: every imports command has a summary and examples.
func TestImportsHelp(t *testing.T) {
	for _, sub := range []string{"push", "resume", "list", "get", "cancel", "delete"} {
		code, out, _ := ctl(t, "", "imports", sub, "--help")
		if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "sandboxctl imports "+sub) {
			t.Errorf("imports %s --help: %d %s", sub, code, out)
		}
	}
	if _, out, _ := ctl(t, "", "--help"); !strings.Contains(out, "130") {
		t.Errorf("root help does not document exit code 130: %s", out)
	}
}
