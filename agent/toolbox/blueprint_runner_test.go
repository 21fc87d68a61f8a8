package toolbox_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sites/sitestest"
	"github.com/sandboxd/sandboxd/agent/toolbox"
	"github.com/sandboxd/sandboxd/blueprint"
)

// galleryDir holds Blueprints of Playground's gallery and the files they
// fetch (WXR exports, images), as the control plane would hand them over.
const galleryDir = "../../blueprint/testdata/gallery"

// bpSite runs Blueprint steps in one site and reads WordPress back.
type bpSite struct {
	e   *sitestest.Env
	s   *sites.Site
	ctx context.Context
}

// run runs a step: its result, or the step's own failure. Any other
// error (the agent's) fails the test.
func (b bpSite) run(t *testing.T, req toolbox.StepRequest) (*toolbox.StepResult, *toolbox.StepError) {
	t.Helper()
	res, err := b.e.Box.RunBlueprintStep(b.ctx, b.s.ID, req)
	if err == nil {
		return res, nil
	}
	var se *toolbox.StepError
	if errors.As(err, &se) {
		return nil, se
	}
	t.Fatalf("%s: %v", req.Step, err)
	return nil, nil
}

func (b bpSite) ok(t *testing.T, req toolbox.StepRequest) *toolbox.StepResult {
	t.Helper()
	res, se := b.run(t, req)
	if se != nil {
		t.Fatalf("%s failed: %s: %s\nlog: %s", req.Step, se.Code, se.Message, se.Log)
	}
	return res
}

func (b bpSite) fails(t *testing.T, req toolbox.StepRequest, code string) *toolbox.StepError {
	t.Helper()
	res, se := b.run(t, req)
	if se == nil {
		t.Fatalf("%s succeeded, want %s\nlog: %s", req.Step, code, res.Log)
	}
	if se.Code != code {
		t.Fatalf("%s failed with %s (%s), want %s", req.Step, se.Code, se.Message, code)
	}
	return se
}

// php runs PHP in the site with WordPress loaded and answers its output.
func (b bpSite) php(t *testing.T, code string) string {
	t.Helper()
	res, err := b.e.Sites.Exec(b.ctx, b.s.ID, []string{"php", "-r", `require "/srv/site/wordpress/wp-load.php"; require_once ABSPATH . "wp-admin/includes/plugin.php"; ` + code}, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("php: %v %s %s", err, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// phpJSON runs PHP that echoes JSON into v.
func (b bpSite) phpJSON(t *testing.T, code string, v any) {
	t.Helper()
	out := b.php(t, code)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("php answered %q: %v", out, err)
	}
}

func (b bpSite) sh(t *testing.T, cmd string) {
	t.Helper()
	res, err := b.e.Sites.Exec(b.ctx, b.s.ID, []string{"sh", "-c", cmd}, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %v %s %s", cmd, err, res.Stdout, res.Stderr)
	}
}

// host is a path of the site's WordPress directory seen from the host.
func (b bpSite) host(rel string) string {
	return filepath.Join(b.e.Sites.Data(b.s.ID), "wordpress", rel)
}

func step(name string, args map[string]any, blobs ...[]byte) toolbox.StepRequest {
	return toolbox.StepRequest{Step: name, Args: args, Blobs: blobs}
}

func fileRef(i int, name string) map[string]any { return map[string]any{"$file": i, "name": name} }

// cli is a wp-cli step as the control plane sends it: the command split,
// without its leading "wp".
func cli(t *testing.T, command string) toolbox.StepRequest {
	t.Helper()
	argv, err := blueprint.SplitCommand(command)
	if err != nil {
		t.Fatal(err)
	}
	if len(argv) > 0 && argv[0] == "wp" {
		argv = argv[1:]
	}
	return step("wp-cli", map[string]any{"command": command, "argv": argv})
}

type zipEntry struct {
	name, body string
	link       bool // a symbolic link to body
}

func zipOf(t *testing.T, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.link {
			h.SetMode(fs.ModeSymlink | 0o777)
		}
		f, err := w.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// manyEntries is a ZIP of n empty files.
func manyEntries(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for i := 0; i < n; i++ {
		if _, err := w.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("f/%d", i), Method: zip.Store}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hugeEntry is a small ZIP whose one entry says it unpacks to 2 GiB: it
// must be refused before anything is unpacked.
func hugeEntry(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	f, err := w.CreateRaw(&zip.FileHeader{Name: "bomb.bin", Method: zip.Deflate, CompressedSize64: 4, UncompressedSize64: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{3, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readGallery(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(galleryDir, rel))
	if err != nil {
		t.Fatalf("the Blueprint gallery is needed: %v", err)
	}
	return b
}

func wantLog(t *testing.T, res *toolbox.StepResult, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(res.Log, s) {
			t.Fatalf("log lacks %q:\n%s", s, res.Log)
		}
	}
}

func mustNotExist(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s exists (%v)", p, err)
		}
	}
}

// TestBlueprintRunner runs every Blueprint step through the agent and the
// runner (conf/blueprint/run.php) in one real site, checking what each
// did to WordPress, and that hostile steps (paths out of the site, links,
// unsafe ZIPs, other databases) are refused without effect.
func TestBlueprintRunner(t *testing.T) {
	if _, err := os.Stat(galleryDir); err != nil {
		t.Fatalf("the Blueprint gallery is needed: %v", err)
	}
	e := sitestest.SetUp(t)
	ctx := context.Background()
	t0 := time.Now()
	s, err := e.Templates.Create(ctx, sitestest.Req("site_bprun001", "bprun", "Runner Site"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("site ready in %s", time.Since(t0))
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), s.ID) })
	b := bpSite{e: e, s: s, ctx: ctx}

	t.Run("refused and unknown steps", func(t *testing.T) {
		for _, name := range []string{"enableMultisite", "importWordPressFiles", "defineSiteUrl", "runWpInstallationWizard", "noSuchStep"} {
			se := b.fails(t, step(name, map[string]any{}), "unsupported")
			if !strings.Contains(se.Message, name) {
				t.Fatalf("%s: %q does not name the step", name, se.Message)
			}
		}
	})

	t.Run("file steps", func(t *testing.T) {
		b.ok(t, step("writeFile", map[string]any{"path": "/wordpress/wp-content/mu-plugins/bp-note.php", "data": "<?php // note\n"}))
		b.ok(t, step("writeFile", map[string]any{"path": "wp-content/bp/blob.bin", "data": fileRef(0, "blob.bin")}, []byte{0, 1, 2, 255}))
		b.ok(t, step("mkdir", map[string]any{"path": "/wordpress/bp/a/b"}))
		b.ok(t, step("writeFiles", map[string]any{"writeToPath": "/wordpress/bp/tree",
			"filesTree": map[string]any{"$dir": map[string]any{"name": "tree", "files": map[string]any{"one.txt": 0, "sub/two.txt": 1}}}},
			[]byte("one"), []byte("two")))
		b.ok(t, step("cp", map[string]any{"fromPath": "/wordpress/bp/tree/one.txt", "toPath": "/wordpress/bp/a/copy.txt"}))
		b.ok(t, step("mv", map[string]any{"fromPath": "/wordpress/bp/tree/sub/two.txt", "toPath": "/wordpress/bp/a/b/moved.txt"}))
		b.ok(t, step("unzip", map[string]any{"zipFile": fileRef(0, "content.zip"), "extractToPath": "/wordpress/bp/unzipped"},
			zipOf(t, zipEntry{name: "top.txt", body: "top"}, zipEntry{name: "d/deep.txt", body: "deep"})))
		// unzip merges into an existing directory.
		b.ok(t, step("unzip", map[string]any{"zipFile": fileRef(0, "more.zip"), "extractToPath": "/wordpress/bp/unzipped"},
			zipOf(t, zipEntry{name: "d/more.txt", body: "more"})))
		for rel, want := range map[string]string{
			"wp-content/mu-plugins/bp-note.php": "<?php // note\n",
			"wp-content/bp/blob.bin":            "\x00\x01\x02\xff",
			"bp/tree/one.txt":                   "one",
			"bp/a/copy.txt":                     "one",
			"bp/a/b/moved.txt":                  "two",
			"bp/unzipped/top.txt":               "top",
			"bp/unzipped/d/deep.txt":            "deep",
			"bp/unzipped/d/more.txt":            "more",
		} {
			if got, err := os.ReadFile(b.host(rel)); err != nil || string(got) != want {
				t.Fatalf("%s: %q %v, want %q", rel, got, err, want)
			}
		}
		mustNotExist(t, b.host("bp/tree/sub/two.txt"))
		b.fails(t, step("rm", map[string]any{"path": "/wordpress/bp/a"}), "invalid") // a directory
		b.ok(t, step("rm", map[string]any{"path": "/wordpress/bp/a/copy.txt"}))
		b.fails(t, step("rm", map[string]any{"path": "/wordpress/bp/a/copy.txt"}), "not_found")
		b.ok(t, step("rmdir", map[string]any{"path": "/wordpress/bp/a"}))
		mustNotExist(t, b.host("bp/a"))
		// No staging directory is left behind.
		if m, _ := filepath.Glob(b.host(".bp-*")); len(m) != 0 {
			t.Fatalf("left behind: %v", m)
		}
	})

	t.Run("paths stay in the site", func(t *testing.T) {
		// Links the site made itself, to read-only and to writable places
		// outside its WordPress directory.
		b.sh(t, "ln -s /srv/site/conf /srv/site/wordpress/conflink && ln -s /srv/site/state /srv/site/wordpress/statelink && ln -s /srv/site/state/evil.php /srv/site/wordpress/evillink.php")
		state := filepath.Join(e.Sites.Data(s.ID), "state")
		conf := filepath.Join(e.Sites.FS(s.ID), "conf")
		for _, tc := range []struct {
			name string
			req  toolbox.StepRequest
		}{
			{"dot-dot", step("writeFile", map[string]any{"path": "/wordpress/../../etc/x", "data": "x"})},
			{"relative dot-dot", step("writeFile", map[string]any{"path": "../state/evil.php", "data": "x"})},
			{"absolute elsewhere", step("writeFile", map[string]any{"path": "/srv/site/state/evil.php", "data": "x"})},
			{"NUL", step("writeFile", map[string]any{"path": "/wordpress/a\x00b", "data": "x"})},
			{"link to conf", step("writeFile", map[string]any{"path": "/wordpress/conflink/evil.php", "data": "x"})},
			{"link to state", step("writeFile", map[string]any{"path": "/wordpress/statelink/evil.php", "data": "x"})},
			{"link as the file", step("writeFile", map[string]any{"path": "/wordpress/evillink.php", "data": "x"})},
			{"mkdir through a link", step("mkdir", map[string]any{"path": "/wordpress/statelink/dir"})},
			{"cp out", step("cp", map[string]any{"fromPath": "/wordpress/index.php", "toPath": "/wordpress/statelink/evil.php"})},
			{"cp in", step("cp", map[string]any{"fromPath": "/wordpress/statelink/installed", "toPath": "/wordpress/stolen"})},
			{"mv out", step("mv", map[string]any{"fromPath": "/wordpress/bp/tree/one.txt", "toPath": "/wordpress/statelink/evil.php"})},
			{"rmdir through a link", step("rmdir", map[string]any{"path": "/wordpress/statelink/used-tokens"})},
			{"writeFiles dot-dot", step("writeFiles", map[string]any{"writeToPath": "/wordpress/bp",
				"filesTree": map[string]any{"$dir": map[string]any{"name": "x", "files": map[string]any{"../../state/evil.php": 0}}}}, []byte("x"))},
			{"unzip through a link", step("unzip", map[string]any{"zipFile": fileRef(0, "x.zip"), "extractToPath": "/wordpress/statelink"},
				zipOf(t, zipEntry{name: "evil.php", body: "x"}))},
			{"vfs out", step("writeFile", map[string]any{"path": "/wordpress/stolen", "data": map[string]any{"$vfs": "/srv/site/secrets/wp-config.php"}})},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b.fails(t, tc.req, "path_outside_site")
			})
		}
		mustNotExist(t, filepath.Join(state, "evil.php"), filepath.Join(state, "dir"), filepath.Join(conf, "evil.php"), b.host("stolen"))
		if _, err := os.Stat(b.host("bp/tree/one.txt")); err != nil {
			t.Fatalf("a refused mv moved the file: %v", err)
		}
		// A link planted where a copied directory goes is replaced, not
		// followed.
		b.ok(t, step("writeFiles", map[string]any{"writeToPath": "/wordpress/bp/cpsrc",
			"filesTree": map[string]any{"$dir": map[string]any{"name": "cpsrc", "files": map[string]any{"sub/evil.php": 0}}}}, []byte("x")))
		b.sh(t, "mkdir -p /srv/site/wordpress/bp/cpdst && ln -s /srv/site/state /srv/site/wordpress/bp/cpdst/sub")
		b.ok(t, step("cp", map[string]any{"fromPath": "/wordpress/bp/cpsrc", "toPath": "/wordpress/bp/cpdst"}))
		mustNotExist(t, filepath.Join(state, "evil.php"))
		if fi, err := os.Lstat(b.host("bp/cpdst/sub")); err != nil || !fi.IsDir() {
			t.Fatalf("bp/cpdst/sub: %v %v", fi, err)
		}

		// The link itself is the site's: removing it is fine, and leaves
		// what it pointed at.
		b.ok(t, step("rm", map[string]any{"path": "/wordpress/conflink"}))
		mustNotExist(t, b.host("conflink"))
		if _, err := os.Stat(filepath.Join(conf, "start.sh")); err != nil {
			t.Fatal(err)
		}

		// ZIPs are checked before anything is unpacked.
		for _, tc := range []struct {
			name, why string
			zip       []byte
		}{
			{"dot-dot entry", "unsafe entry: ../evil.txt", zipOf(t, zipEntry{name: "ok.txt", body: "x"}, zipEntry{name: "../evil.txt", body: "x"})},
			{"absolute entry", "unsafe entry: /evil.txt", zipOf(t, zipEntry{name: "ok.txt", body: "x"}, zipEntry{name: "/evil.txt", body: "x"})},
			{"symlink entry", "symbolic link: l", zipOf(t, zipEntry{name: "ok.txt", body: "x"}, zipEntry{name: "l", body: "/srv/site/state", link: true})},
			{"too many entries", "50001 entries", manyEntries(t, 50001)},
			{"too big", "more than 1 GiB", hugeEntry(t)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				for _, req := range []toolbox.StepRequest{
					step("unzip", map[string]any{"zipFile": fileRef(0, "bad.zip"), "extractToPath": "/wordpress/badzip"}, tc.zip),
					step("installPlugin", map[string]any{"pluginData": fileRef(0, "bad.zip")}, tc.zip),
				} {
					if se := b.fails(t, req, "invalid"); !strings.Contains(se.Message, tc.why) {
						t.Fatalf("%s: %q, want %q", req.Step, se.Message, tc.why)
					}
				}
				mustNotExist(t, b.host("badzip"), b.host("evil.txt"), b.host("wp-content/plugins/bad"), b.host("wp-content/plugins/ok.txt"))
			})
		}
	})

	t.Run("runPHP", func(t *testing.T) {
		// As Playground's gallery writes it: WordPress under /wordpress,
		// and relative to / as the working directory.
		res := b.ok(t, step("runPHP", map[string]any{"code": `<?php require '/wordpress/wp-load.php'; update_option('bp_runphp', 'yes'); echo 'host=', $_SERVER['HTTP_HOST'];`}))
		wantLog(t, res, "host=bprun.localhost:8081")
		res = b.ok(t, step("runPHP", map[string]any{"code": `<?php include 'wordpress/wp-load.php'; echo get_option('bp_runphp');`}))
		wantLog(t, res, "yes")
		// Code as a file resource.
		res = b.ok(t, step("runPHP", map[string]any{"code": fileRef(0, "code.php")}, []byte(`<?php echo 6 * 7;`)))
		wantLog(t, res, "42")
		se := b.fails(t, step("runPHP", map[string]any{"code": `<?php echo "partial"; no_such_function();`}), "php_error")
		if !strings.Contains(se.Message, "no_such_function") || !strings.Contains(se.Log, "partial") {
			t.Fatalf("fatal error: %q, log %q", se.Message, se.Log)
		}
		b.fails(t, step("runPHP", map[string]any{"code": `<?php this is not php`}), "php_error")
		res = b.ok(t, step("runPHPWithOptions", map[string]any{"options": map[string]any{
			"code":     `<?php echo $_SERVER['REQUEST_METHOD'], ' ', $_SERVER['REQUEST_URI'], ' ', json_encode($_GET), json_encode($_POST), ' ', $_SERVER['HTTP_X_TEST'], ' ', getenv('BP_ENV'), ' ', $_SERVER['BP_SERVER'];`,
			"method":   "POST",
			"url":      "/form.php?a=1",
			"headers":  map[string]any{"Content-Type": "application/x-www-form-urlencoded", "X-Test": "hdr"},
			"body":     "b=2",
			"env":      map[string]any{"BP_ENV": "env"},
			"$_SERVER": map[string]any{"BP_SERVER": "srv"},
		}}))
		wantLog(t, res, `POST /form.php?a=1 {"a":"1"}{"b":"2"} hdr env srv`)
	})

	t.Run("runSql", func(t *testing.T) {
		sql := "-- made by a Blueprint\nCREATE TABLE wp_bp_books (id INT PRIMARY KEY, title TEXT);\nINSERT INTO wp_bp_books VALUES\n  (1, 'A; B'),\n  (2, 'C');\n\nUPDATE wp_options SET option_value = 'From SQL' WHERE option_name = 'blogdescription';\n"
		res := b.ok(t, step("runSql", map[string]any{"sql": fileRef(0, "schema.sql")}, []byte(sql)))
		wantLog(t, res, "ran 3 SQL statements")
		if got := b.php(t, `global $wpdb; echo $wpdb->get_var("SELECT GROUP_CONCAT(title ORDER BY id SEPARATOR '|') FROM wp_bp_books"), "/", get_option("blogdescription");`); got != "A; B|C/From SQL" {
			t.Fatalf("after runSql: %q", got)
		}
		// The site's database user has no rights elsewhere: the database
		// refuses, and the step names the statement.
		se := b.fails(t, step("runSql", map[string]any{"sql": "SELECT 1;\nDROP TABLE other_db.x;\nSELECT 2;"}), "sql_error")
		if !strings.Contains(se.Message, "statement 2") || !strings.Contains(se.Message, "DROP TABLE other_db.x") {
			t.Fatalf("message %q", se.Message)
		}
		b.fails(t, step("runSql", map[string]any{"sql": "USE mysql;"}), "sql_error")
		b.fails(t, step("runSql", map[string]any{"sql": "SELECT * FROM mysql.user;"}), "sql_error")
	})

	t.Run("options, user meta and constants", func(t *testing.T) {
		b.ok(t, step("setSiteOptions", map[string]any{"options": map[string]any{
			"blogname": "Stylish Press", "page_on_front": 6, "woocommerce_onboarding_profile": map[string]any{"skipped": true},
		}}))
		var opts struct {
			Name    string          `json:"name"`
			Front   string          `json:"front"`
			Profile map[string]bool `json:"profile"`
		}
		b.phpJSON(t, `echo json_encode(array("name" => get_option("blogname"), "front" => (string) get_option("page_on_front"), "profile" => get_option("woocommerce_onboarding_profile")));`, &opts)
		if opts.Name != "Stylish Press" || opts.Front != "6" || !opts.Profile["skipped"] {
			t.Fatalf("options %+v", opts)
		}

		b.ok(t, step("updateUserMeta", map[string]any{"userId": 1, "meta": map[string]any{"admin_color": "modern", "first_name": "Rich"}}))
		if got := b.php(t, `echo get_user_meta(1, "admin_color", true), "/", get_user_meta(1, "first_name", true);`); got != "modern/Rich" {
			t.Fatalf("user meta %q", got)
		}
		b.fails(t, step("updateUserMeta", map[string]any{"userId": 99, "meta": map[string]any{"a": "b"}}), "not_found")

		// Two steps: the second merges with the first. WP_DEBUG goes to the
		// site's debug settings (the agent's side), the rest to constants.php.
		b.ok(t, step("defineWpConfigConsts", map[string]any{"consts": map[string]any{"BP_FLAG": true, "BP_NAME": "it's"}}))
		res := b.ok(t, step("defineWpConfigConsts", map[string]any{"consts": map[string]any{"BP_LIST": []any{1, 2}, "WP_DEBUG": true}, "method": "rewrite-wp-config"}))
		wantLog(t, res, "WP_DEBUG set to true", "defined BP_LIST")
		if d, _ := e.Box.GetDebug(s.ID); !d.WPDebug {
			t.Fatal("WP_DEBUG did not reach the debug settings")
		}
		b.ok(t, step("defineWpConfigConsts", map[string]any{"consts": map[string]any{"WP_DEBUG": false}}))
		if got := b.php(t, `echo json_encode(array(BP_FLAG, BP_NAME, BP_LIST, WP_DEBUG));`); got != `[true,"it's",[1,2],false]` {
			t.Fatalf("constants %q", got)
		}
		php, err := os.ReadFile(filepath.Join(e.Sites.Data(s.ID), "state", "constants.php"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"if (!defined('BP_FLAG')) define('BP_FLAG', true);", "if (!defined('BP_NAME')) define('BP_NAME', 'it\\'s');", "define('BP_LIST', array ("} {
			if !strings.Contains(string(php), want) {
				t.Fatalf("constants.php lacks %q:\n%s", want, php)
			}
		}
		if strings.Contains(string(php), "WP_DEBUG") {
			t.Fatalf("constants.php defines WP_DEBUG:\n%s", php)
		}
		for _, name := range []string{"DB_PASSWORD", "AUTH_KEY", "WP_HOME", "ABSPATH", "FS_METHOD"} {
			b.fails(t, step("defineWpConfigConsts", map[string]any{"consts": map[string]any{name: "x"}}), "reserved_constant")
		}
		b.fails(t, step("defineWpConfigConsts", map[string]any{"consts": map[string]any{"1BAD": "x"}}), "invalid")
		b.fails(t, step("defineWpConfigConsts", map[string]any{"consts": map[string]any{"A'B": "x"}}), "invalid")
	})

	t.Run("plugins", func(t *testing.T) {
		hello := zipOf(t,
			zipEntry{name: "hello-bp/hello-bp.php", body: "<?php\n/*\nPlugin Name: Hello BP\n*/\nregister_activation_hook(__FILE__, function () { update_option('hello_bp_activated', 'yes'); });\n"},
			zipEntry{name: "hello-bp/readme.txt", body: "readme"},
			zipEntry{name: "__MACOSX/hello-bp/._hello-bp.php", body: "junk"})
		res := b.ok(t, step("installPlugin", map[string]any{"pluginData": fileRef(0, "hello-bp.1.0.zip")}, hello))
		wantLog(t, res, "activated the plugin hello-bp")
		// A single PHP file at the ZIP's root installs as that file.
		b.ok(t, step("installPlugin", map[string]any{"pluginZipFile": fileRef(0, "single.zip"), "options": map[string]any{"activate": true}},
			zipOf(t, zipEntry{name: "single-bp.php", body: "<?php\n/*\nPlugin Name: Single BP\n*/\n"})))
		// Files at the root: the folder is the ZIP's name; targetFolderName wins.
		b.ok(t, step("installPlugin", map[string]any{"pluginData": fileRef(0, "flat.zip"), "options": map[string]any{"targetFolderName": "renamed-bp"}},
			zipOf(t, zipEntry{name: "main.php", body: "<?php\n/*\nPlugin Name: Flat BP\n*/\n"}, zipEntry{name: "inc/x.php", body: "<?php"})))
		// A directory resource, not activated; then activated by folder name.
		b.ok(t, step("installPlugin", map[string]any{"pluginData": map[string]any{"$dir": map[string]any{"name": "dir-bp",
			"files": map[string]any{"dir-bp.php": 0, "lib/x.php": 1}}}, "options": map[string]any{"activate": false}},
			[]byte("<?php\n/*\nPlugin Name: Dir BP\n*/\n"), []byte("<?php")))
		var st struct {
			Active    []string `json:"active"`
			Activated string   `json:"activated"`
		}
		b.phpJSON(t, `echo json_encode(array("active" => get_option("active_plugins"), "activated" => get_option("hello_bp_activated")));`, &st)
		if strings.Join(st.Active, ",") != "hello-bp/hello-bp.php,renamed-bp/main.php,single-bp.php" || st.Activated != "yes" {
			t.Fatalf("after installs: %+v", st)
		}
		mustNotExist(t, b.host("wp-content/plugins/__MACOSX"))
		if _, err := os.Stat(b.host("wp-content/plugins/dir-bp/lib/x.php")); err != nil {
			t.Fatal(err)
		}
		b.ok(t, step("activatePlugin", map[string]any{"pluginPath": "dir-bp", "pluginName": "Dir BP"}))
		b.ok(t, step("activatePlugin", map[string]any{"pluginPath": "/wordpress/wp-content/plugins/dir-bp/dir-bp.php"})) // already active
		if got := b.php(t, `echo is_plugin_active("dir-bp/dir-bp.php") ? "on" : "off";`); got != "on" {
			t.Fatalf("dir-bp %s", got)
		}
		// ifAlreadyInstalled.
		b.fails(t, step("installPlugin", map[string]any{"pluginData": fileRef(0, "hello-bp.zip"), "ifAlreadyInstalled": "error"}, hello), "already_installed")
		newer := zipOf(t, zipEntry{name: "hello-bp/hello-bp.php", body: "<?php\n/*\nPlugin Name: Hello BP\nVersion: 2\n*/\n"})
		b.ok(t, step("installPlugin", map[string]any{"pluginData": fileRef(0, "hello-bp.zip"), "ifAlreadyInstalled": "skip"}, newer))
		if got, _ := os.ReadFile(b.host("wp-content/plugins/hello-bp/readme.txt")); string(got) != "readme" {
			t.Fatal("skip replaced the plugin")
		}
		b.ok(t, step("installPlugin", map[string]any{"pluginData": fileRef(0, "hello-bp.zip")}, newer))
		mustNotExist(t, b.host("wp-content/plugins/hello-bp/readme.txt"))

		// Failing activations: a plugin WordPress refuses, a missing one,
		// a path out of the plugins directory.
		se := b.fails(t, step("installPlugin", map[string]any{"pluginData": fileRef(0, "needs-php.zip")},
			zipOf(t, zipEntry{name: "needs-php/needs-php.php", body: "<?php\n/*\nPlugin Name: Needs PHP\nRequires PHP: 99.0\n*/\n"})), "activation_failed")
		if !strings.Contains(se.Message, "needs-php") || !strings.Contains(se.Message, "99.0") {
			t.Fatalf("message %q", se.Message)
		}
		se = b.fails(t, step("installPlugin", map[string]any{"pluginData": fileRef(0, "fatal.zip")},
			zipOf(t, zipEntry{name: "fatal-bp/fatal-bp.php", body: "<?php\n/*\nPlugin Name: Fatal BP\n*/\nbp_undefined_function();\n"})), "activation_failed")
		if !strings.Contains(se.Message, "bp_undefined_function") {
			t.Fatalf("message %q", se.Message)
		}
		b.fails(t, step("activatePlugin", map[string]any{"pluginPath": "no-such/plugin.php"}), "not_found")
		b.fails(t, step("activatePlugin", map[string]any{"pluginPath": "../../wp-config.php"}), "path_outside_site")
		b.fails(t, step("activatePlugin", map[string]any{"pluginPath": "/wordpress/wp-content/themes/twentytwentythree/functions.php"}), "invalid")
		if got := b.php(t, `echo is_plugin_active("needs-php/needs-php.php") || is_plugin_active("fatal-bp/fatal-bp.php") ? "active" : "inactive";`); got != "inactive" {
			t.Fatalf("a failed activation left the plugin %s", got)
		}
		// The fatal plugin would break every later step: it goes.
		b.ok(t, step("rmdir", map[string]any{"path": "/wordpress/wp-content/plugins/fatal-bp"}))
	})

	t.Run("themes", func(t *testing.T) {
		theme := zipOf(t,
			zipEntry{name: "bp-theme/style.css", body: "/*\nTheme Name: BP Theme\n*/\n"},
			zipEntry{name: "bp-theme/index.php", body: "<?php echo 'bp-theme';"},
			zipEntry{name: "bp-theme/functions.php", body: "<?php add_action('after_setup_theme', function () { add_theme_support('starter-content', array('posts' => array('about', 'contact'), 'options' => array('blogdescription' => 'Starter tagline'))); });"})
		res := b.ok(t, step("installTheme", map[string]any{"themeData": fileRef(0, "bp-theme.zip"), "options": map[string]any{"importStarterContent": true}}, theme))
		wantLog(t, res, "activated the theme bp-theme", "imported the starter content of bp-theme")
		var st struct {
			Theme string   `json:"theme"`
			Desc  string   `json:"desc"`
			Pages []string `json:"pages"`
		}
		b.phpJSON(t, `echo json_encode(array("theme" => get_option("stylesheet"), "desc" => get_option("blogdescription"),
			"pages" => wp_list_pluck(get_posts(array("post_type" => "page", "post_status" => "publish", "numberposts" => -1, "orderby" => "title", "order" => "ASC")), "post_title")));`, &st)
		if st.Theme != "bp-theme" || st.Desc != "Starter tagline" || !strings.Contains(strings.Join(st.Pages, ","), "About,Contact") {
			t.Fatalf("after installTheme: %+v", st)
		}
		b.ok(t, step("activateTheme", map[string]any{"themeFolderName": "twentytwentythree"}))
		if got := b.php(t, `echo get_option("stylesheet");`); got != "twentytwentythree" {
			t.Fatalf("theme %q", got)
		}
		// Starter content is the active theme's.
		b.fails(t, step("importThemeStarterContent", map[string]any{"themeSlug": "bp-theme"}), "invalid")
		res = b.ok(t, step("importThemeStarterContent", map[string]any{}))
		wantLog(t, res, "no starter content")
		b.fails(t, step("activateTheme", map[string]any{"themeFolderName": "no-such-theme"}), "not_found")
		b.fails(t, step("activateTheme", map[string]any{"themeFolderName": "../plugins"}), "invalid")
		// A theme without its parent cannot be activated.
		b.fails(t, step("installTheme", map[string]any{"themeData": map[string]any{"$dir": map[string]any{"name": "orphan-child",
			"files": map[string]any{"style.css": 0}}}}, []byte("/*\nTheme Name: Orphan\nTemplate: no-such-parent\n*/\n")), "activation_failed")
		if got := b.php(t, `echo get_option("stylesheet");`); got != "twentytwentythree" {
			t.Fatalf("theme after a failed activation %q", got)
		}
		// A theme written without templates yet is switched to, as
		// Playground does (stylish-press writes its parts one by one),
		// with a warning; then the previous theme comes back.
		b.ok(t, step("writeFile", map[string]any{"path": "/wordpress/wp-content/themes/bare/style.css", "data": "/*\nTheme Name: Bare\n*/\n"}))
		res = b.ok(t, step("activateTheme", map[string]any{"themeFolderName": "bare"}))
		wantLog(t, res, "warning: WordPress finds the theme bare incomplete")
		if got := b.php(t, `echo get_option("stylesheet");`); got != "bare" {
			t.Fatalf("theme %q", got)
		}
		b.ok(t, step("activateTheme", map[string]any{"themeFolderName": "twentytwentythree"}))
	})

	t.Run("setSiteLanguage", func(t *testing.T) {
		core := zipOf(t, zipEntry{name: "ja.mo", body: "mo"}, zipEntry{name: "admin-ja.mo", body: "mo"}, zipEntry{name: "ja.l10n.php", body: "<?php return array();"},
			zipEntry{name: "not-a-translation.php", body: "<?php"})
		plugin := zipOf(t, zipEntry{name: "hello-bp-ja.mo", body: "mo"})
		req := step("setSiteLanguage", map[string]any{"language": "ja"}, core, plugin)
		req.LanguagePacks = []toolbox.LanguagePack{{Type: "core", File: 0, Name: "ja.zip"}, {Type: "plugin", File: 1, Name: "hello-bp-ja.zip"}}
		res := b.ok(t, req)
		wantLog(t, res, "installed the core translation", "installed the plugin translation")
		for _, rel := range []string{"wp-content/languages/ja.mo", "wp-content/languages/admin-ja.mo", "wp-content/languages/ja.l10n.php", "wp-content/languages/plugins/hello-bp-ja.mo"} {
			if _, err := os.Stat(b.host(rel)); err != nil {
				t.Fatal(err)
			}
		}
		mustNotExist(t, b.host("wp-content/languages/not-a-translation.php"))
		if got := b.php(t, `echo get_option("WPLANG");`); got != "ja" {
			t.Fatalf("WPLANG %q", got)
		}
		b.fails(t, step("setSiteLanguage", map[string]any{"language": "de_DE"}), "not_found")
		b.ok(t, step("setSiteLanguage", map[string]any{"language": "en_US"}))
		if got := b.php(t, `echo get_option("WPLANG"), "|", get_locale();`); got != "|en_US" {
			t.Fatalf("back to English: %q", got)
		}
	})

	t.Run("login and request", func(t *testing.T) {
		res := b.ok(t, step("login", map[string]any{"username": "admin", "password": "password"}))
		if res.User != "admin" {
			t.Fatalf("login user %q", res.User)
		}
		if res := b.ok(t, step("login", map[string]any{})); res.User != "admin" {
			t.Fatalf("default login user %q", res.User)
		}
		b.fails(t, step("login", map[string]any{"username": "nobody"}), "not_found")

		res = b.ok(t, step("request", map[string]any{"request": map[string]any{"url": "/"}}))
		wantLog(t, res, "GET / → HTTP 200", "<title>")
		res = b.ok(t, step("request", map[string]any{"request": map[string]any{"method": "POST", "url": "http://bprun.localhost:8081/wp-login.php",
			"body": map[string]any{"log": "nobody", "pwd": "x"}}}))
		wantLog(t, res, "POST /wp-login.php → HTTP 200", "not registered")
		b.fails(t, step("request", map[string]any{"request": map[string]any{"url": "http://example.com/"}}), "invalid")
		b.ok(t, step("writeFile", map[string]any{"path": "/wordpress/bp-503.php", "data": `<?php http_response_code(503); echo "down";`}))
		se := b.fails(t, step("request", map[string]any{"request": map[string]any{"url": "/bp-503.php"}}), "request_failed")
		if !strings.Contains(se.Message, "503") {
			t.Fatalf("message %q", se.Message)
		}
	})

	t.Run("output of WordPress stays out of the answer", func(t *testing.T) {
		b.ok(t, step("writeFile", map[string]any{"path": "/wordpress/wp-content/mu-plugins/noisy.php", "data": `<?php echo "{noise}"; add_action('init', function () { echo "more noise"; });`}))
		res := b.ok(t, step("setSiteOptions", map[string]any{"options": map[string]any{"bp_quiet": "1"}}))
		wantLog(t, res, "set the option bp_quiet", "{noise}")
		b.ok(t, step("rm", map[string]any{"path": "/wordpress/wp-content/mu-plugins/noisy.php"}))
	})

	t.Run("a broken WordPress", func(t *testing.T) {
		// A step that loads WordPress reports the fatal error, naming the
		// file; file steps still work, and mend it.
		b.ok(t, step("writeFile", map[string]any{"path": "/wordpress/wp-content/mu-plugins/broken.php", "data": "<?php bp_broken_call();\n"}))
		se := b.fails(t, step("setSiteOptions", map[string]any{"options": map[string]any{"a": "b"}}), "php_error")
		if !strings.Contains(se.Message, "bp_broken_call") || !strings.Contains(se.Message, "/wordpress/wp-content/mu-plugins/broken.php") {
			t.Fatalf("message %q", se.Message)
		}
		b.ok(t, step("rm", map[string]any{"path": "/wordpress/wp-content/mu-plugins/broken.php"}))
		b.ok(t, step("setSiteOptions", map[string]any{"options": map[string]any{"a": "b"}}))
	})

	t.Run("resetData", func(t *testing.T) {
		b.php(t, `$p = wp_insert_post(array("post_title" => "to go", "post_status" => "publish")); wp_insert_comment(array("comment_post_ID" => $p, "comment_content" => "c"));`)
		b.ok(t, step("resetData", map[string]any{}))
		if got := b.php(t, `global $wpdb; echo $wpdb->get_var("SELECT COUNT(*) FROM $wpdb->posts"), $wpdb->get_var("SELECT COUNT(*) FROM $wpdb->comments"), $wpdb->get_var("SELECT COUNT(*) FROM $wpdb->postmeta"), "/", wp_insert_post(array("post_title" => "first", "post_status" => "publish"));`); got != "000/1" {
			t.Fatalf("after resetData: %q", got)
		}
	})

	t.Run("importWxr of the gallery", func(t *testing.T) {
		// install-activate-setup-theme-from-gh-repo: resetData, then its
		// content, whose page 6 the Blueprint makes the front page.
		b.ok(t, step("resetData", map[string]any{}))
		res := b.ok(t, step("importWxr", map[string]any{"file": fileRef(0, "blueprint-content.xml")}, readGallery(t, "install-activate-setup-theme-from-gh-repo/blueprint-content.xml")))
		wantLog(t, res, "imported 15 posts")
		var rt struct {
			Types    map[string]string `json:"types"`
			Styles   bool              `json:"styles"`
			Template string            `json:"template"`
			Tags     int               `json:"tags"`
			Cats     string            `json:"cats"`
			Page     string            `json:"page"`
		}
		b.phpJSON(t, `global $wpdb; $g = get_page_by_path("wp-global-styles-kanso", OBJECT, "wp_global_styles"); $tpl = get_page_by_path("index", OBJECT, "wp_template");
			$p = get_page_by_path("why-wordpress", OBJECT, "post");
			echo json_encode(array("types" => wp_list_pluck($wpdb->get_results("SELECT post_type, COUNT(*) AS n FROM $wpdb->posts GROUP BY post_type", OBJECT_K), "n"),
				"styles" => is_array(json_decode($g->post_content, true)), "template" => implode(",", wp_list_pluck(wp_get_post_terms($tpl->ID, "wp_theme"), "slug")),
				"tags" => count(wp_get_post_tags($p->ID)), "cats" => implode(",", wp_list_pluck(wp_get_post_categories($p->ID, array("fields" => "all")), "slug")),
				"page" => get_post(6) ? get_post(6)->post_type : ""));`, &rt)
		// Global styles keep their JSON (backslashes and all), templates
		// their theme, posts their terms, page 6 its ID.
		if rt.Types["page"] != "4" || rt.Types["post"] != "3" || rt.Types["wp_global_styles"] != "5" || !rt.Styles || rt.Template != "kanso" ||
			rt.Tags != 8 || rt.Cats != "favorites" || rt.Page != "page" {
			t.Fatalf("after blueprint-content.xml: %+v", rt)
		}

		// reset-data-and-import-content.
		b.ok(t, step("resetData", map[string]any{}))
		res = b.ok(t, step("importWxr", map[string]any{"file": fileRef(0, "starter-content.xml")}, readGallery(t, "reset-data-and-import-content/starter-content.xml")))
		wantLog(t, res, "imported 1 posts")
		if got := b.php(t, `echo get_posts(array("title" => "\"The Road Not Taken\" by Robert Frost"))[0]->post_status;`); got != "publish" {
			t.Fatalf("starter content post %q", got)
		}
		// Imported again, nothing is duplicated.
		res = b.ok(t, step("importWxr", map[string]any{"file": fileRef(0, "starter-content.xml")}, readGallery(t, "reset-data-and-import-content/starter-content.xml")))
		wantLog(t, res, "imported 0 posts", "1 already there")

		// stylish-press: resetData, the products (two of their images were
		// fetched, the others were not), then the pages.
		b.ok(t, step("resetData", map[string]any{}))
		const imgs = "https://raw.githubusercontent.com/wordpress/blueprints/stylish-press/blueprints/stylish-press/woo-product-images/"
		req := step("importWxr", map[string]any{"file": fileRef(0, "woo-products.wxr")}, readGallery(t, "stylish-press/woo-products.wxr"),
			readGallery(t, "stylish-press/woo-product-images/vneck-tee-2.jpg"), readGallery(t, "stylish-press/woo-product-images/hoodie-2.jpg"))
		req.Attachments = map[string]int{imgs + "vneck-tee-2.jpg": 1, imgs + "hoodie-2.jpg": 2}
		res = b.ok(t, req)
		wantLog(t, res, "imported 25 posts", "22 attachments (20 without files)", "product_cat", "vnech-tee-green-1.jpg")
		var woo struct {
			Types    map[string]string `json:"types"`
			Thumb    string            `json:"thumb"`
			ThumbURL string            `json:"thumbUrl"`
			Sizes    int               `json:"sizes"`
			NoFile   string            `json:"nofile"`
			Price    string            `json:"price"`
			Parent   string            `json:"parent"`
		}
		b.phpJSON(t, `global $wpdb; $p = get_page_by_path("v-neck-t-shirt", OBJECT, "product"); $t = (int) get_post_meta($p->ID, "_thumbnail_id", true);
			$m = wp_get_attachment_metadata($t); $n = $wpdb->get_var("SELECT ID FROM $wpdb->posts WHERE post_type = 'attachment' AND post_title = 'vnech-tee-green-1.jpg'");
			$v = get_posts(array("post_type" => "product_variation", "post_status" => "any", "numberposts" => 1, "post_parent" => $p->ID));
			echo json_encode(array("types" => wp_list_pluck($wpdb->get_results("SELECT post_type, COUNT(*) AS n FROM $wpdb->posts GROUP BY post_type", OBJECT_K), "n"),
				"thumb" => get_attached_file($t), "thumbUrl" => wp_get_attachment_url($t), "sizes" => count($m["sizes"]),
				"nofile" => wp_get_attachment_url($n) . "|" . get_post_meta($n, "_wp_attached_file", true),
				"price" => get_post_meta($p->ID, "_price", true), "parent" => $v ? "ok" : "none"));`, &woo)
		if woo.Types["product"] != "18" || woo.Types["product_variation"] != "7" || woo.Types["attachment"] != "22" {
			t.Fatalf("post types %v", woo.Types)
		}
		if woo.Thumb != "/srv/site/wordpress/wp-content/uploads/2019/01/vneck-tee-2.jpg" || woo.ThumbURL != s.URL+"/wp-content/uploads/2019/01/vneck-tee-2.jpg" || woo.Sizes == 0 {
			t.Fatalf("the fetched image: %+v", woo)
		}
		if woo.NoFile != imgs+"vnech-tee-green-1.jpg|" || woo.Price != "15" || woo.Parent != "ok" {
			t.Fatalf("products: %+v", woo)
		}
		for _, f := range []string{"vneck-tee-2.jpg", "hoodie-2.jpg"} {
			want := readGallery(t, "stylish-press/woo-product-images/"+f)
			got, err := os.ReadFile(b.host("wp-content/uploads/2019/01/" + f))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s in the uploads: %d bytes, %v", f, len(got), err)
			}
			if _, err := os.Stat(b.host("wp-content/uploads/2019/01/" + strings.TrimSuffix(f, ".jpg") + "-150x150.jpg")); err != nil {
				t.Fatalf("%s has no thumbnail: %v", f, err)
			}
		}
		res = b.ok(t, step("importWxr", map[string]any{"file": fileRef(0, "site-content.wxr")}, readGallery(t, "stylish-press/site-content.wxr")))
		wantLog(t, res, "imported 3 posts")
		if got := b.php(t, `echo implode(",", wp_list_pluck(get_posts(array("post_type" => "page", "numberposts" => -1, "orderby" => "name", "order" => "ASC")), "post_name"));`); got != "contact-us,home,the-stylish-story" {
			t.Fatalf("pages %q", got)
		}
	})

	t.Run("importWxr remaps", func(t *testing.T) {
		// Posts holding the file's IDs 100-103 force new IDs: parents,
		// featured images and menu items must follow.
		b.php(t, `foreach (array(100, 101, 102, 103) as $i) wp_insert_post(array("import_id" => $i, "post_title" => "Placeholder $i", "post_status" => "draft"));`)
		req := step("importWxr", map[string]any{"file": fileRef(0, "old-site.xml"), "importUsers": true}, []byte(customWXR),
			readGallery(t, "stylish-press/woo-product-images/belt-2.jpg"))
		req.Attachments = map[string]int{"https://old.example.com/wp-content/uploads/2020/05/pic.jpg": 1}
		res := b.ok(t, req)
		wantLog(t, res, "imported 6 posts, 5 terms, 2 comments, 1 attachments (0 without files)", "created the user jane", "genre (2)")
		var got struct {
			PostID   int      `json:"postId"`
			Author   string   `json:"author"`
			Content  string   `json:"content"`
			Cats     []string `json:"cats"`
			Tags     []string `json:"tags"`
			Nested   bool     `json:"nested"`
			Color    string   `json:"color"`
			Sticky   bool     `json:"sticky"`
			Thumb    string   `json:"thumb"`
			ThumbOf  bool     `json:"thumbOf"`
			Links    any      `json:"links"`
			Object   string   `json:"object"`
			Comments []string `json:"comments"`
			Child    bool     `json:"child"`
			Menu     []string `json:"menu"`
			Book     string   `json:"book"`
		}
		b.phpJSON(t, `global $wpdb; $p = get_posts(array("title" => "Imported Post"))[0]; $t = (int) get_post_meta($p->ID, "_thumbnail_id", true);
			$local = get_term_by("slug", "local", "category"); $news = get_term_by("slug", "news", "category");
			$parent = get_posts(array("title" => "Parent Page", "post_type" => "page"))[0]; $child = get_posts(array("title" => "Child Page", "post_type" => "page"))[0];
			$c = array(); foreach (get_comments(array("post_id" => $p->ID, "orderby" => "comment_date", "order" => "ASC")) as $x)
				$c[] = $x->comment_author . ":" . $x->comment_content . ":" . ($x->comment_parent ? get_comment($x->comment_parent)->comment_author : "-") . ":" . get_comment_meta($x->comment_ID, "rating", true) . ":" . ($x->user_id ? get_userdata($x->user_id)->user_login : "-");
			$m = array(); foreach (wp_get_nav_menu_items("main-menu") as $it) $m[] = $it->title . ":" . $it->object . ":" . ($it->object_id == ($it->object == "page" ? $parent->ID : $local->term_id) ? "ok" : "bad") . ":" . ($it->menu_item_parent ? get_post_meta($it->menu_item_parent, "_menu_item_object", true) : "-");
			echo json_encode(array("postId" => $p->ID, "author" => get_userdata($p->post_author)->user_login, "content" => $p->post_content,
				"cats" => wp_list_pluck(wp_get_post_terms($p->ID, "category"), "slug"), "tags" => wp_list_pluck(wp_get_post_terms($p->ID, "post_tag"), "slug"),
				"nested" => $local->parent == $news->term_id, "color" => get_term_meta($news->term_id, "color", true), "sticky" => is_sticky($p->ID),
				"thumb" => get_attached_file($t), "thumbOf" => get_post($t)->post_parent == $p->ID, "links" => get_post_meta($p->ID, "links", true),
				"object" => $wpdb->get_var($wpdb->prepare("SELECT meta_value FROM $wpdb->postmeta WHERE post_id = %d AND meta_key = 'object'", $p->ID)),
				"comments" => $c, "child" => $child->post_parent == $parent->ID, "menu" => $m,
				"book" => $wpdb->get_var("SELECT CONCAT(post_status, ':', post_author) FROM $wpdb->posts WHERE post_type = 'book'")));`, &got)
		u := s.URL
		for _, want := range []string{`<a href="` + u + `/about/">`, `{"href":"` + strings.ReplaceAll(u, "/", `\/`) + `\/x"}`, "https://old.example.com.au/",
			`src="` + u + `/wp-content/uploads/2020/05/pic-300x200.jpg"`, `C:\path`} {
			if !strings.Contains(got.Content, want) {
				t.Fatalf("content lacks %q: %s", want, got.Content)
			}
		}
		if got.PostID == 100 || got.Author != "jane" || strings.Join(got.Cats, ",") != "local" || strings.Join(got.Tags, ",") != "fun,lazy-tag" ||
			!got.Nested || got.Color != "red" || !got.Sticky || !got.ThumbOf || !got.Child || got.Book != "publish:1" {
			t.Fatalf("imported: %+v", got)
		}
		if got.Thumb != "/srv/site/wordpress/wp-content/uploads/2020/05/pic.jpg" {
			t.Fatalf("featured image %q", got.Thumb)
		}
		if l, _ := got.Links.(map[string]any); l["url"] != u+"/p" {
			t.Fatalf("serialized meta %v", got.Links)
		}
		// An object in meta is kept as exported, never built from a class.
		if got.Object != `O:8:"stdClass":1:{s:1:"a";s:1:"b";}` {
			t.Fatalf("object meta %q", got.Object)
		}
		if strings.Join(got.Comments, "|") != "Jane Doe:First! "+u+"/about/:-:5:jane|Replier:A reply:Jane Doe::-" {
			t.Fatalf("comments %q", got.Comments)
		}
		if strings.Join(got.Menu, "|") != "Parent Page:page:ok:-|Local:category:ok:page" {
			t.Fatalf("menu %q", got.Menu)
		}

		se := b.fails(t, step("importWxr", map[string]any{"file": fileRef(0, "broken.xml")}, []byte("<rss><channel><item></channel></rss>")), "invalid")
		if !strings.Contains(se.Message, "line 1") {
			t.Fatalf("message %q", se.Message)
		}
		b.fails(t, step("importWxr", map[string]any{"file": fileRef(0, "feed.xml")}, []byte(`<rss version="2.0"><channel><title>x</title></channel></rss>`)), "invalid")
	})

	t.Run("wp-cli commands of the gallery", func(t *testing.T) {
		res := b.ok(t, cli(t, "wp site empty --yes"))
		wantLog(t, res, "Success: The site at '"+s.URL+"' was emptied.")
		res = b.ok(t, cli(t, "wp post generate --count=12 --post_type=post --post_date=1999-01-04"))
		if got := b.php(t, `global $wpdb; echo $wpdb->get_var("SELECT COUNT(*) FROM $wpdb->posts WHERE post_type = 'post' AND post_status = 'publish' AND post_date = '1999-01-04 00:00:00'"), "/", get_post(1)->post_title;`); got != "12/Post 0" {
			t.Fatalf("generated posts %q\n%s", got, res.Log)
		}

		// wpcli-post-with-image, on a fresh site's three posts.
		b.ok(t, cli(t, "wp site empty --yes"))
		b.php(t, `foreach (array("Hello world!", "Sample Page", "Privacy Policy") as $t) wp_insert_post(array("post_title" => $t, "post_status" => "publish"));`)
		md := "<!-- wp:paragraph -->\n<p>Welcome to <strong>Playground</strong> \\o/</p>\n<!-- /wp:paragraph -->\n"
		b.ok(t, step("writeFile", map[string]any{"path": "/wordpress/wp-content/postcontent.md", "data": md}))
		res = b.ok(t, cli(t, "wp post create --post_title='Welcome to Playground' --post_status='published' /wordpress/wp-content/postcontent.md"))
		wantLog(t, res, "Success: Created post 4.")
		b.ok(t, step("writeFile", map[string]any{"path": "/wordpress/wp-content/Select-storage-method.png", "data": fileRef(0, "Select-storage-method.png")},
			readGallery(t, "wpcli-post-with-image/Select-storage-method.png")))
		res = b.ok(t, cli(t, "wp media import wordpress/wp-content/Select-storage-method.png --post_id=4 --title='Select your storage method' --featured_image"))
		wantLog(t, res, "and attached to post 4 as featured image.", "Success: Imported 1 of 1 item.")
		var post struct {
			Title, Status, Content, Thumb, ThumbTitle string
		}
		b.phpJSON(t, `$p = get_post(4); $t = get_post_thumbnail_id(4); echo json_encode(array("Title" => $p->post_title, "Status" => $p->post_status, "Content" => $p->post_content,
			"Thumb" => get_attached_file($t), "ThumbTitle" => get_the_title($t)));`, &post)
		if post.Title != "Welcome to Playground" || post.Status != "published" || post.Content != md || post.ThumbTitle != "Select your storage method" ||
			!regexp.MustCompile(`^/srv/site/wordpress/wp-content/uploads/\d{4}/\d{2}/Select-storage-method\.png$`).MatchString(post.Thumb) {
			t.Fatalf("post 4: %+v", post)
		}
	})

	t.Run("wp-cli", func(t *testing.T) {
		b.ok(t, cli(t, `wp option update bp_cli '{"a":[1,2]}' --format=json`))
		res := b.ok(t, cli(t, "wp option get bp_cli --format=json"))
		wantLog(t, res, `{"a":[1,2]}`)
		b.fails(t, cli(t, "wp option add bp_cli x"), "invalid")
		b.ok(t, cli(t, "wp option delete bp_cli"))
		b.fails(t, cli(t, "wp option get bp_cli"), "not_found")

		res = b.ok(t, cli(t, "wp user create bob bob@example.com --role=editor --first_name=Bob --porcelain"))
		id := strings.TrimSpace(res.Log)
		b.ok(t, cli(t, "wp user update bob --display_name='Bobby B' --role=author"))
		b.ok(t, cli(t, "wp user meta update bob favourite blue"))
		res = b.ok(t, cli(t, "wp user meta get "+id+" favourite"))
		wantLog(t, res, "blue")
		if got := b.php(t, `$u = get_user_by("login", "bob"); echo $u->display_name, "/", implode(",", $u->roles), "/", $u->first_name;`); got != "Bobby B/author/Bob" {
			t.Fatalf("bob %q", got)
		}
		b.fails(t, cli(t, "wp user create bob other@example.com"), "invalid")

		// Plugins and themes by slug and URL, as the control plane fetched them.
		req := cli(t, "wp plugin install cli-bp --activate")
		req.Fetched = map[string]any{"cli-bp": fileRef(0, "cli-bp.zip")}
		req.Blobs = [][]byte{zipOf(t, zipEntry{name: "cli-bp/cli-bp.php", body: "<?php\n/*\nPlugin Name: CLI BP\n*/\n"})}
		res = b.ok(t, req)
		wantLog(t, res, "Plugin installed successfully.", "Plugin 'cli-bp' activated.", "Success: Installed 1 of 1 plugins.")
		b.ok(t, cli(t, "wp plugin deactivate cli-bp"))
		if got := b.php(t, `echo is_plugin_active("cli-bp/cli-bp.php") ? "on" : "off";`); got != "off" {
			t.Fatalf("cli-bp %s", got)
		}
		b.ok(t, cli(t, "wp plugin activate cli-bp"))
		b.fails(t, cli(t, "wp plugin activate no-such-plugin"), "not_found")
		b.fails(t, cli(t, "wp plugin install not-fetched"), "not_found")
		req = cli(t, "wp theme install https://example.com/cli-theme.zip --activate")
		req.Fetched = map[string]any{"https://example.com/cli-theme.zip": fileRef(0, "cli-theme.zip")}
		req.Blobs = [][]byte{zipOf(t, zipEntry{name: "cli-theme/style.css", body: "/*\nTheme Name: CLI Theme\n*/\n"}, zipEntry{name: "cli-theme/index.php", body: "<?php echo 'cli';"})}
		res = b.ok(t, req)
		wantLog(t, res, "Success: Switched to 'CLI Theme' theme.")
		res = b.ok(t, cli(t, "wp theme activate twentytwentythree"))
		wantLog(t, res, "Success: Switched to 'Twenty Twenty-Three' theme.")
		b.fails(t, cli(t, "wp theme activate no-such-theme"), "not_found")

		// A URL the control plane fetched.
		req = cli(t, "wp media import https://example.com/logo-1.jpg --porcelain --alt='A logo'")
		req.Fetched = map[string]any{"https://example.com/logo-1.jpg": fileRef(0, "logo-1.jpg")}
		req.Blobs = [][]byte{readGallery(t, "stylish-press/woo-product-images/logo-1.jpg")}
		res = b.ok(t, req)
		if got := b.php(t, `$id = `+strings.TrimSpace(res.Log)+`; echo basename(get_attached_file($id)), "|", get_post_meta($id, "_wp_attachment_image_alt", true);`); got != "logo-1.jpg|A logo" {
			t.Fatalf("media import of a URL: %q (log %q)", got, res.Log)
		}
		b.fails(t, cli(t, "wp media import https://example.com/not-fetched.jpg"), "not_found")

		// Pretty permalinks work through the site's Apache.
		res = b.ok(t, cli(t, "wp rewrite structure '/%postname%/'"))
		wantLog(t, res, "Success: Rewrite structure set.", "Success: Rewrite rules flushed.")
		if _, err := os.Stat(b.host(".htaccess")); err != nil {
			t.Fatal(err)
		}
		res = b.ok(t, step("request", map[string]any{"request": map[string]any{"url": "/hello-world/"}}))
		wantLog(t, res, "HTTP 200", "Hello world!")

		// search-replace keeps serialized data valid.
		b.php(t, `update_option("bp_sr", array("url" => "https://old.example.org/x", "n" => 1)); wp_insert_post(array("post_title" => "SR", "post_content" => "see https://old.example.org/y", "post_status" => "publish"));`)
		res = b.ok(t, cli(t, "wp search-replace https://old.example.org https://new.example.org --dry-run"))
		wantLog(t, res, "Success: 2 replacements to be made.")
		res = b.ok(t, cli(t, "wp search-replace https://old.example.org https://new.example.org wp_options wp_posts --precise"))
		wantLog(t, res, "Success: Made 2 replacements.")
		if got := b.php(t, `$o = get_option("bp_sr"); echo $o["url"], "|", get_posts(array("title" => "SR"))[0]->post_content;`); got != "https://new.example.org/x|see https://new.example.org/y" {
			t.Fatalf("after search-replace %q", got)
		}

		b.fails(t, cli(t, "wp post list"), "unsupported")
		b.fails(t, cli(t, "wp post create --bogus=1"), "unsupported")
		b.fails(t, cli(t, "wp cache flush"), "unsupported")
		b.fails(t, cli(t, "wp eval 'echo 1;'"), "unsupported")
		b.fails(t, cli(t, "wp site empty"), "invalid") // no --yes: WP-CLI would ask
	})

	// The oldest image (PHP 7.4, WordPress 5.7) runs the same runner.
	t.Run("PHP 7.4", func(t *testing.T) {
		r := sitestest.Req("site_bprun074", "bprun74", "Old Runner Site")
		r.PHPVersion = "7.4"
		old, err := e.Templates.Create(ctx, r, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), old.ID) })
		o := bpSite{e: e, s: old, ctx: ctx}
		o.ok(t, step("installPlugin", map[string]any{"pluginData": fileRef(0, "p.zip")},
			zipOf(t, zipEntry{name: "old-bp/old-bp.php", body: "<?php\n/*\nPlugin Name: Old BP\n*/\n"})))
		o.ok(t, step("runSql", map[string]any{"sql": "UPDATE wp_options SET option_value = 'Old SQL' WHERE option_name = 'blogdescription';"}))
		o.ok(t, step("defineWpConfigConsts", map[string]any{"consts": map[string]any{"BP_OLD": 74}}))
		res := o.ok(t, step("importWxr", map[string]any{"file": fileRef(0, "starter-content.xml")}, readGallery(t, "reset-data-and-import-content/starter-content.xml")))
		wantLog(t, res, "imported 1 posts")
		o.ok(t, cli(t, "wp post generate --count=3 --post_date=1999-01-04"))
		if got := o.php(t, `global $wpdb; echo is_plugin_active("old-bp/old-bp.php") ? "on" : "off", "/", get_option("blogdescription"), "/", BP_OLD, "/", $wpdb->get_var("SELECT COUNT(*) FROM $wpdb->posts WHERE post_date = '1999-01-04 00:00:00'");`); got != "on/Old SQL/74/3" {
			t.Fatalf("PHP 7.4 site: %q", got)
		}
		o.fails(t, step("writeFile", map[string]any{"path": "/wordpress/../state/x", "data": "x"}), "path_outside_site")
	})
}

// customWXR is an export whose IDs collide with the site's posts, with
// an orphan page (its parent comes later), a menu pointing at a page and
// a category, comments listed reply first, serialized and object meta,
// URLs of the old site in block attributes, and a term of a taxonomy the
// site does not have.
const customWXR = `<?xml version="1.0" encoding="UTF-8" ?>
<rss version="2.0" xmlns:excerpt="http://wordpress.org/export/1.2/excerpt/" xmlns:content="http://purl.org/rss/1.0/modules/content/" xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:wp="http://wordpress.org/export/1.2/">
<channel>
<title>Old Site</title>
<wp:wxr_version>1.2</wp:wxr_version>
<wp:base_site_url>https://old.example.com</wp:base_site_url>
<wp:base_blog_url>https://old.example.com</wp:base_blog_url>
<wp:author><wp:author_id>1</wp:author_id><wp:author_login>admin</wp:author_login><wp:author_email>a@old.example.com</wp:author_email><wp:author_display_name>Admin</wp:author_display_name></wp:author>
<wp:author><wp:author_id>7</wp:author_id><wp:author_login>jane</wp:author_login><wp:author_email>jane@old.example.com</wp:author_email><wp:author_display_name>Jane Doe</wp:author_display_name><wp:author_first_name>Jane</wp:author_first_name><wp:author_last_name>Doe</wp:author_last_name></wp:author>
<wp:category><wp:term_id>51</wp:term_id><wp:category_nicename>local</wp:category_nicename><wp:category_parent>news</wp:category_parent><wp:cat_name>Local</wp:cat_name></wp:category>
<wp:category><wp:term_id>50</wp:term_id><wp:category_nicename>news</wp:category_nicename><wp:category_parent></wp:category_parent><wp:cat_name>News</wp:cat_name><wp:termmeta><wp:meta_key>color</wp:meta_key><wp:meta_value>red</wp:meta_value></wp:termmeta></wp:category>
<wp:tag><wp:term_id>60</wp:term_id><wp:tag_slug>fun</wp:tag_slug><wp:tag_name>Fun</wp:tag_name></wp:tag>
<wp:term><wp:term_id>70</wp:term_id><wp:term_taxonomy>nav_menu</wp:term_taxonomy><wp:term_slug>main-menu</wp:term_slug><wp:term_name>Main Menu</wp:term_name></wp:term>
<wp:term><wp:term_id>80</wp:term_id><wp:term_taxonomy>genre</wp:term_taxonomy><wp:term_slug>scifi</wp:term_slug><wp:term_name>Sci-Fi</wp:term_name></wp:term>
<item>
<title>Imported Post</title>
<dc:creator>jane</dc:creator>
<guid isPermaLink="false">https://old.example.com/?p=100</guid>
<content:encoded><![CDATA[<!-- wp:paragraph {"href":"https:\/\/old.example.com\/x"} --><p>See <a href="https://old.example.com/about/">about</a>, not https://old.example.com.au/ <img src="https://old.example.com/wp-content/uploads/2020/05/pic-300x200.jpg"> C:\path</p><!-- /wp:paragraph -->]]></content:encoded>
<excerpt:encoded>Short</excerpt:encoded>
<wp:post_id>100</wp:post_id>
<wp:post_date>2020-05-01 10:00:00</wp:post_date>
<wp:post_date_gmt>2020-05-01 10:00:00</wp:post_date_gmt>
<wp:comment_status>open</wp:comment_status>
<wp:post_name>imported-post</wp:post_name>
<wp:status>publish</wp:status>
<wp:post_parent>0</wp:post_parent>
<wp:post_type>post</wp:post_type>
<wp:is_sticky>1</wp:is_sticky>
<category domain="category" nicename="local">Local</category>
<category domain="post_tag" nicename="fun">Fun</category>
<category domain="post_tag" nicename="lazy-tag">Lazy Tag</category>
<category domain="genre" nicename="scifi">Sci-Fi</category>
<wp:postmeta><wp:meta_key>_thumbnail_id</wp:meta_key><wp:meta_value>102</wp:meta_value></wp:postmeta>
<wp:postmeta><wp:meta_key>links</wp:meta_key><wp:meta_value><![CDATA[a:1:{s:3:"url";s:25:"https://old.example.com/p";}]]></wp:meta_value></wp:postmeta>
<wp:postmeta><wp:meta_key>object</wp:meta_key><wp:meta_value><![CDATA[O:8:"stdClass":1:{s:1:"a";s:1:"b";}]]></wp:meta_value></wp:postmeta>
<wp:comment><wp:comment_id>8</wp:comment_id><wp:comment_author>Replier</wp:comment_author><wp:comment_date>2020-05-03 10:00:00</wp:comment_date><wp:comment_date_gmt>2020-05-03 10:00:00</wp:comment_date_gmt><wp:comment_content>A reply</wp:comment_content><wp:comment_approved>1</wp:comment_approved><wp:comment_type>comment</wp:comment_type><wp:comment_parent>7</wp:comment_parent><wp:comment_user_id>0</wp:comment_user_id></wp:comment>
<wp:comment><wp:comment_id>7</wp:comment_id><wp:comment_author>Jane Doe</wp:comment_author><wp:comment_date>2020-05-02 10:00:00</wp:comment_date><wp:comment_date_gmt>2020-05-02 10:00:00</wp:comment_date_gmt><wp:comment_content>First! https://old.example.com/about/</wp:comment_content><wp:comment_approved>1</wp:comment_approved><wp:comment_type>comment</wp:comment_type><wp:comment_parent>0</wp:comment_parent><wp:comment_user_id>7</wp:comment_user_id><wp:commentmeta><wp:meta_key>rating</wp:meta_key><wp:meta_value>5</wp:meta_value></wp:commentmeta></wp:comment>
</item>
<item>
<title>Child Page</title>
<dc:creator>admin</dc:creator>
<wp:post_id>101</wp:post_id>
<wp:post_date>2020-05-01 11:00:00</wp:post_date>
<wp:post_name>child-page</wp:post_name>
<wp:status>publish</wp:status>
<wp:post_parent>103</wp:post_parent>
<wp:post_type>page</wp:post_type>
</item>
<item>
<title>Pic</title>
<dc:creator>admin</dc:creator>
<guid isPermaLink="false">https://old.example.com/wp-content/uploads/2020/05/pic.jpg</guid>
<wp:post_id>102</wp:post_id>
<wp:post_date>2020-05-01 09:00:00</wp:post_date>
<wp:status>inherit</wp:status>
<wp:post_parent>100</wp:post_parent>
<wp:post_type>attachment</wp:post_type>
<wp:attachment_url>https://old.example.com/wp-content/uploads/2020/05/pic.jpg</wp:attachment_url>
<wp:postmeta><wp:meta_key>_wp_attached_file</wp:meta_key><wp:meta_value>2020/05/pic.jpg</wp:meta_value></wp:postmeta>
</item>
<item>
<title>Parent Page</title>
<dc:creator>admin</dc:creator>
<wp:post_id>103</wp:post_id>
<wp:post_date>2020-05-01 08:00:00</wp:post_date>
<wp:post_name>parent-page</wp:post_name>
<wp:status>publish</wp:status>
<wp:post_type>page</wp:post_type>
</item>
<item>
<title></title>
<dc:creator>admin</dc:creator>
<wp:post_id>104</wp:post_id>
<wp:post_date>2020-05-01 08:00:00</wp:post_date>
<wp:status>publish</wp:status>
<wp:menu_order>1</wp:menu_order>
<wp:post_type>nav_menu_item</wp:post_type>
<category domain="nav_menu" nicename="main-menu">Main Menu</category>
<wp:postmeta><wp:meta_key>_menu_item_type</wp:meta_key><wp:meta_value>post_type</wp:meta_value></wp:postmeta>
<wp:postmeta><wp:meta_key>_menu_item_menu_item_parent</wp:meta_key><wp:meta_value>0</wp:meta_value></wp:postmeta>
<wp:postmeta><wp:meta_key>_menu_item_object_id</wp:meta_key><wp:meta_value>103</wp:meta_value></wp:postmeta>
<wp:postmeta><wp:meta_key>_menu_item_object</wp:meta_key><wp:meta_value>page</wp:meta_value></wp:postmeta>
</item>
<item>
<title></title>
<dc:creator>admin</dc:creator>
<wp:post_id>105</wp:post_id>
<wp:post_date>2020-05-01 08:00:01</wp:post_date>
<wp:status>publish</wp:status>
<wp:menu_order>2</wp:menu_order>
<wp:post_type>nav_menu_item</wp:post_type>
<category domain="nav_menu" nicename="main-menu">Main Menu</category>
<wp:postmeta><wp:meta_key>_menu_item_type</wp:meta_key><wp:meta_value>taxonomy</wp:meta_value></wp:postmeta>
<wp:postmeta><wp:meta_key>_menu_item_menu_item_parent</wp:meta_key><wp:meta_value>104</wp:meta_value></wp:postmeta>
<wp:postmeta><wp:meta_key>_menu_item_object_id</wp:meta_key><wp:meta_value>51</wp:meta_value></wp:postmeta>
<wp:postmeta><wp:meta_key>_menu_item_object</wp:meta_key><wp:meta_value>category</wp:meta_value></wp:postmeta>
</item>
<item>
<title>A Book</title>
<dc:creator>ghost</dc:creator>
<wp:post_id>106</wp:post_id>
<wp:post_date>2020-05-01 08:00:00</wp:post_date>
<wp:status>publish</wp:status>
<wp:post_type>book</wp:post_type>
</item>
</channel>
</rss>
`
