package e2e

import (
	"archive/zip"
	"bytes"
	mobin "encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// galleryDir holds the community gallery Blueprints and their data files
// (a copy of ../shared/blueprints/gallery, kept in the repository).
const galleryDir = "../blueprint/testdata/gallery"

// codeStandIns are the code files the gallery's Blueprints fetch and the
// gallery leaves out (by the end of their URL path).
var codeStandIns = map[string]string{
	"custom-post/books.php": `<?php
/* Plugin Name: Books */
add_action('init', function () { register_post_type('book', array('public' => true, 'label' => 'Books')); });`,
	"wpcli-post-with-image/postcontent.md":                "<!-- wp:paragraph --><p>Playground post body from a file.</p><!-- /wp:paragraph -->",
	"stylish-press/stylish-press-theme/style.css":         "/*\nTheme Name: Stylish Press\n*/\n",
	"stylish-press/stylish-press-theme/functions.php":     "<?php\n",
	"stylish-press/stylish-press-theme/parts/header.html": "<!-- wp:site-title /-->",
}

// zipOf builds a ZIP of name → content.
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for n, c := range files {
		f, err := w.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte(c))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// moFile is a gettext catalogue with one message: its header, which
// names the language (WordPress's reader cannot take an empty one).
func moFile(lang string) string {
	header := "Language: " + lang + "\nContent-Type: text/plain; charset=UTF-8\n"
	var b bytes.Buffer
	// magic, revision, count, originals at 28, translations at 36, no hash.
	for _, v := range []uint32{0x950412de, 0, 1, 28, 36, 0, 44, 0, 44, uint32(len(header)), 45} {
		mobin.Write(&b, mobin.LittleEndian, v)
	}
	b.WriteString("\x00" + header + "\x00")
	return b.String()
}

// resourceMirror serves what the gallery's Blueprints fetch, as an
// operator's mirror would: raw code-host files from the gallery (and
// stand-ins for its code), wordpress.org plugins, themes and translations
// as small real packages. It counts what was asked for.
func resourceMirror(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	if _, err := os.Stat(galleryDir); err != nil {
		t.Fatalf("the gallery is missing: %v", err)
	}
	plugin := func(slug string) []byte {
		return zipOf(t, map[string]string{slug + "/" + slug + ".php": "<?php\n/* Plugin Name: " + slug + " (stand-in) */\n"})
	}
	theme := func(slug string) []byte {
		return zipOf(t, map[string]string{slug + "/style.css": "/*\nTheme Name: " + slug + "\n*/\n", slug + "/index.php": "<?php\n",
			slug + "/templates/index.html": "<!-- wp:post-content /-->", slug + "/theme.json": `{"version":2}`})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case strings.HasPrefix(p, "/dl/plugin/"):
			w.Write(plugin(strings.TrimSuffix(strings.TrimPrefix(p, "/dl/plugin/"), ".zip")))
		case strings.HasPrefix(p, "/dl/theme/"):
			w.Write(theme(strings.TrimSuffix(strings.TrimPrefix(p, "/dl/theme/"), ".zip")))
		case strings.HasPrefix(p, "/dl/translation/core/"):
			lang := strings.TrimSuffix(filepath.Base(p), ".zip")
			w.Write(zipOf(t, map[string]string{lang + ".mo": moFile(lang), lang + ".po": "msgid \"\"\nmsgstr \"Language: " + lang + "\\n\"\n"}))
		case strings.HasPrefix(p, "/ghp/proxy"):
			w.Write(theme(strings.TrimPrefix(r.URL.Query().Get("repo"), "richtabor/")))
		case strings.HasPrefix(p, "/gist/"):
			fmt.Fprint(w, "<?php\n/* Plugin Name: Block Hooks Demo */\n")
		case strings.HasPrefix(p, "/raw/"):
			// .../blueprints/<gallery name>/<file>: the last such segment.
			i := strings.LastIndex(p, "/blueprints/")
			if i < 0 {
				http.NotFound(w, r)
				return
			}
			rest := p[i+len("/blueprints/"):]
			if c, ok := codeStandIns[rest]; ok {
				fmt.Fprint(w, c)
				return
			}
			b, err := os.ReadFile(filepath.Join(galleryDir, filepath.FromSlash(rest)))
			if err != nil || strings.Contains(rest, "..") {
				http.NotFound(w, r)
				return
			}
			w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	rules := strings.Join([]string{"raw.githubusercontent.com=" + srv.URL + "/raw", "downloads.wordpress.org=" + srv.URL + "/dl",
		"github-proxy.com=" + srv.URL + "/ghp", "gist.githubusercontent.com=" + srv.URL + "/gist"}, ",")
	return srv, rules
}

// blueprintCheck reports what the gallery's Blueprints change, read back
// from WordPress inside the site.
const blueprintCheck = `<?php require __DIR__.'/wp-load.php';
require_once ABSPATH.'wp-admin/includes/plugin.php';
global $wpdb;
$with = 0; $without = 0;
foreach (get_posts(array('post_type' => 'attachment', 'numberposts' => -1, 'post_status' => 'any')) as $a) {
  $f = get_attached_file($a->ID); if ($f && file_exists($f)) { $with++; } else { $without++; }
}
$welcome = get_posts(array('title' => 'Welcome to Playground', 'post_status' => 'any', 'numberposts' => 1));
$poem = get_posts(array('title' => '"The Road Not Taken" by Robert Frost', 'numberposts' => 1));
echo json_encode(array(
  'wplang' => get_option('WPLANG'), 'blogname' => get_option('blogname'), 'stylesheet' => get_option('stylesheet'),
  'plugins' => array_values(get_option('active_plugins')),
  'admin_color' => get_user_meta(1, 'admin_color', true), 'first_name' => get_user_meta(1, 'first_name', true),
  'ja_mo' => file_exists(WP_LANG_DIR.'/ja.mo'),
  'dated_1999' => (int) $wpdb->get_var("SELECT COUNT(*) FROM {$wpdb->posts} WHERE post_date LIKE '1999-01-04%'"),
  'welcome_thumb' => $welcome ? has_post_thumbnail($welcome[0]->ID) : false,
  'poem' => count($poem),
  'products' => (int) $wpdb->get_var("SELECT COUNT(*) FROM {$wpdb->posts} WHERE post_type = 'product'"),
  'attachments_with_files' => $with, 'attachments_without' => $without,
  'mu_notice' => file_exists(WPMU_PLUGIN_DIR.'/bgnightly-notice.php'),
  'page_on_front' => (int) get_option('page_on_front'),
  'e2e_before' => get_option('e2e_before'), 'e2e_after' => get_option('e2e_after', 'absent'),
));`

func (d *devSystem) check(t *testing.T, siteID, url string) map[string]any {
	t.Helper()
	d.putFile(t, siteID, "bp-check.php", blueprintCheck)
	code, body := served(t, url+"/bp-check.php")
	var out map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("check: %d %s", code, body)
	}
	return out
}

func gallery(t *testing.T, name string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(galleryDir, name, "blueprint.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitRun polls a run until it ends.
func (d *devSystem) waitRun(t *testing.T, blueprintID, runID string) *st.Response {
	t.Helper()
	var r *st.Response
	st.WaitFor(t, 5*time.Minute, "run "+runID, func() bool {
		r = d.owner.Do("GET", "/api/app/blueprints/"+blueprintID+"/runs/"+runID, nil).Must(t, 200)
		s := r.Str("run.status")
		return s == "succeeded" || s == "failed"
	})
	return r
}

func (d *devSystem) save(t *testing.T, name string, src json.RawMessage) string {
	t.Helper()
	return d.owner.Do("POST", "/api/app/blueprints", map[string]any{"name": name, "source": src}).Must(t, 201).Str("blueprint.id")
}

// apply runs a source (or a saved Blueprint) on a site and waits for it.
func (d *devSystem) apply(t *testing.T, siteID, blueprintID string, src json.RawMessage) *st.Response {
	t.Helper()
	body := map[string]any{"blueprintId": blueprintID}
	space := blueprintID
	if blueprintID == "" {
		body, space = map[string]any{"source": src}, "unsaved"
	}
	run := d.owner.Do("POST", "/api/app/sites/"+siteID+"/blueprint", body).Must(t, 202)
	if s := run.Str("run.status"); s != "pending" {
		t.Fatalf("a new run is %s", s)
	}
	return d.waitRun(t, space, run.Str("run.id"))
}

// adapted is a gallery source adapted to run here.
func (d *devSystem) adapted(t *testing.T, src json.RawMessage) json.RawMessage {
	t.Helper()
	r := d.owner.Do("POST", "/api/app/blueprints/validate", map[string]any{"source": src, "adapt": true}).Must(t, 200)
	out, _ := json.Marshal(r.Get("adapted.source"))
	if s, ok := r.Get("adapted.source").(string); ok {
		out = []byte(s)
	}
	return out
}

func succeeded(t *testing.T, what string, r *st.Response) {
	t.Helper()
	if r.Str("run.status") != "succeeded" {
		t.Fatalf("%s: run %s: %s\n%s", what, r.Str("run.status"), r.Str("run.failureReason"), r.Str("run.log"))
	}
	for _, s := range r.Get("run.steps").([]any) {
		if s.(map[string]any)["status"] != "succeeded" {
			t.Fatalf("%s: step %v", what, s)
		}
	}
}

// TestBlueprintsOnRealSites: gallery Blueprints whose resources the local
// mirror serves run on real sites, made from them or applied to them, and
// their effects are read back from WordPress; a failing step stops its
// run; a run cannot reach another site's database; a Blueprint baked into
// a template, then rebaked, keeps the template's id, slug and launch token,
// and sites from it have the Blueprint's effects.
func TestBlueprintsOnRealSites(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	_, rules := resourceMirror(t)
	dir := devDataDir(t)
	d := startDev(t, dir, freeAddr(t), freeAddr(t), "--resource-mirror", rules, "--resource-mirror-only")

	// Site A: made from "translations" (login, a plugin, the language).
	translations := d.save(t, "Translations", gallery(t, "translations"))
	made := d.owner.Do("POST", "/api/app/blueprints/"+translations+"/sites", map[string]any{}).Must(t, 202)
	if made.Str("run.mode") != "create" || made.Str("site.status") != "creating" {
		t.Fatalf("create: %s", made.Raw)
	}
	siteA, urlA := made.Str("site.id"), made.Str("site.url")
	run := d.waitRun(t, translations, made.Str("run.id"))
	succeeded(t, "translations", run)
	if len(run.Get("run.steps").([]any)) != 3 || run.Str("run.runnerVersion") == "" {
		t.Fatalf("steps: %s", run.Raw)
	}

	// Applied to A: adapted (PHP 8.0 has no image), saved, and unsaved.
	succeeded(t, "set-admin-color-scheme", d.apply(t, siteA, "", d.adapted(t, gallery(t, "set-admin-color-scheme"))))
	succeeded(t, "custom-post", d.apply(t, siteA, d.save(t, "Custom post", gallery(t, "custom-post")), nil))
	succeeded(t, "reset-data-and-import-content", d.apply(t, siteA, "", gallery(t, "reset-data-and-import-content")))
	succeeded(t, "admin-notice", d.apply(t, siteA, "", gallery(t, "admin-notice")))
	a := d.check(t, siteA, urlA)
	for k, want := range map[string]any{"wplang": "ja", "ja_mo": true, "admin_color": "modern", "poem": 1.0, "mu_notice": true} {
		if a[k] != want {
			t.Errorf("site A %s = %v, want %v", k, a[k], want)
		}
	}
	for _, p := range []string{"friends/friends.php", "books/books.php"} {
		if !strings.Contains(fmt.Sprint(a["plugins"]), p) {
			t.Errorf("site A: %s not active: %v", p, a["plugins"])
		}
	}

	// Site B: made from "wpcli-post-with-image" (wp-cli post create and
	// media import, natively).
	wpcli := d.save(t, "wp-cli post with image", gallery(t, "wpcli-post-with-image"))
	made = d.owner.Do("POST", "/api/app/blueprints/"+wpcli+"/sites", map[string]any{"name": "Site B"}).Must(t, 202)
	siteB, urlB := made.Str("site.id"), made.Str("site.url")
	succeeded(t, "wpcli-post-with-image", d.waitRun(t, wpcli, made.Str("run.id")))
	succeeded(t, "posts-via-wp-cli", d.apply(t, siteB, "", gallery(t, "posts-via-wp-cli")))
	b := d.check(t, siteB, urlB)
	if b["welcome_thumb"] != true || b["dated_1999"] != 12.0 {
		t.Errorf("site B after the wp-cli Blueprints: %v", b)
	}
	// Both of these start with resetData: the posts above go.
	succeeded(t, "install-activate-setup-theme-from-gh-repo", d.apply(t, siteB, "", gallery(t, "install-activate-setup-theme-from-gh-repo")))
	if b := d.check(t, siteB, urlB); b["stylesheet"] != "kanso" || b["dated_1999"] != 0.0 || b["blogname"] != "Rich Tabor" {
		t.Errorf("site B after the theme Blueprint: %v", b)
	}
	succeeded(t, "stylish-press", d.apply(t, siteB, "", d.adapted(t, gallery(t, "stylish-press"))))
	b = d.check(t, siteB, urlB)
	for k, want := range map[string]any{"first_name": "Rich", "stylesheet": "stylish-press-theme",
		"products": 18.0, "attachments_with_files": 22.0, "attachments_without": 0.0, "blogname": "Stylish Press"} {
		if b[k] != want {
			t.Errorf("site B %s = %v, want %v", k, b[k], want)
		}
	}
	if !strings.Contains(fmt.Sprint(b["plugins"]), "todo-list-block") || b["page_on_front"] == 0.0 {
		t.Errorf("site B: %v", b)
	}

	// A failing step stops the run: the step after it is skipped.
	failing := json.RawMessage(`{"steps":[{"step":"setSiteOptions","options":{"e2e_before":"1"}},
		{"step":"writeFile","path":"/wordpress/x.txt","data":{"resource":"url","url":"https://raw.githubusercontent.com/x/blueprints/missing/none.txt"}},
		{"step":"setSiteOptions","options":{"e2e_after":"1"}}]}`)
	r := d.apply(t, siteB, "", failing)
	var statuses []string
	for _, s := range r.Get("run.steps").([]any) {
		statuses = append(statuses, s.(map[string]any)["status"].(string))
	}
	if r.Str("run.status") != "failed" || strings.Join(statuses, ",") != "succeeded,failed,skipped" ||
		!strings.Contains(r.Str("run.failureReason"), "steps[1]") || !strings.Contains(r.Str("run.log"), "404") {
		t.Fatalf("failing run: %s", r.Raw)
	}
	if b := d.check(t, siteB, urlB); b["e2e_before"] != "1" || b["e2e_after"] != "absent" {
		t.Fatalf("options after the failed run: %v", b)
	}

	// runSql reaches its own database only: A's blogname stays.
	dbA := d.owner.Do("GET", "/api/app/sites/"+siteA+"/database", nil).Must(t, 200)
	dbName := dbA.Str("database.name")
	if dbName == "" {
		dbName = dbA.Str("name")
	}
	sql := fmt.Sprintf("UPDATE `%s`.wp_options SET option_value = 'pwned' WHERE option_name = 'blogname';", dbName)
	src, _ := json.Marshal(map[string]any{"steps": []any{map[string]any{"step": "runSql",
		"sql": map[string]any{"resource": "literal", "name": "x.sql", "contents": sql}}}})
	if r := d.apply(t, siteB, "", src); r.Str("run.status") != "failed" || !strings.Contains(strings.ToLower(r.Str("run.log")), "denied") {
		t.Fatalf("cross-database runSql: %s", r.Raw)
	}
	if a := d.check(t, siteA, urlA); a["blogname"] == "pwned" {
		t.Fatal("a run changed another site's database")
	}

	// Bad input starts no run.
	for _, tc := range []struct {
		body       any
		code, path string
	}{
		{map[string]any{"source": `{"steps":[{"step":"writeFile","path":"/wordpress/../../etc/x","data":"x"}]}`}, "invalid_request", "path_outside_site"},
		{map[string]any{"source": `{"steps":[{"step":"instalPlugin"}]}`}, "invalid_request", "unknown_step"},
		{map[string]any{"source": `{"steps":`}, "invalid_request", ""},
		{map[string]any{"blueprintId": "bp_nope"}, "blueprint_not_found", ""},
	} {
		r := d.owner.Do("POST", "/api/app/sites/"+siteB+"/blueprint", tc.body)
		if r.Code() != tc.code || !strings.Contains(string(r.Raw), tc.path) {
			t.Errorf("%v: %d %s", tc.body, r.Status, r.Raw)
		}
	}
	if runs := d.owner.Do("GET", "/api/app/blueprints/"+wpcli+"/runs", nil).Must(t, 200).Get("runs").([]any); len(runs) != 1 {
		t.Errorf("runs of %s: %d", wpcli, len(runs))
	}

	// Bake, then rebake: the slug and launch token stay.
	notice := d.save(t, "Admin notice", gallery(t, "admin-notice"))
	bake := d.owner.Do("POST", "/api/app/blueprints/"+notice+"/bake", map[string]any{"name": "Notice demo"}).Must(t, 202)
	tplID := bake.Str("template.id")
	if bake.Str("template.status") != "building" || bake.Str("template.sourceBlueprintId") != notice || bake.Str("run.mode") != "bake" {
		t.Fatalf("bake: %s", bake.Raw)
	}
	succeeded(t, "bake", d.waitRun(t, notice, bake.Str("run.id")))
	var tpl *st.Response
	st.WaitFor(t, 3*time.Minute, "the baked template", func() bool {
		tpl = d.owner.Do("GET", "/api/app/templates/"+tplID, nil).Must(t, 200)
		return tpl.Str("template.status") != "building"
	})
	if tpl.Str("template.status") != "ready" {
		t.Fatalf("template: %s", tpl.Raw)
	}
	launch := d.owner.Do("PATCH", "/api/app/templates/"+tplID, map[string]any{"launchEnabled": true}).Must(t, 200)
	slug, token := launch.Str("template.slug"), launch.Str("template.launchToken")
	if other := d.owner.Do("POST", "/api/app/blueprints/"+translations+"/bake", map[string]any{"templateId": tplID}); other.Status != 400 {
		t.Fatalf("rebake from another Blueprint: %d %s", other.Status, other.Raw)
	}
	before := d.owner.Do("POST", "/api/app/templates/"+tplID+"/sites", map[string]any{"name": "Before the rebake"}).Must(t, 202)
	if job := d.waitJob(t, before.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("site from the baked template: %v", job)
	}
	// A rebake keeps the template's id (as well as its slug and launch
	// token): clients that stored it go on working.
	rebake := d.owner.Do("POST", "/api/app/blueprints/"+notice+"/bake", map[string]any{"templateId": tplID}).Must(t, 202)
	if rebake.Str("template.id") != tplID || rebake.Str("run.templateId") != tplID {
		t.Fatalf("the rebake answers another template: %s", rebake.Raw)
	}
	succeeded(t, "rebake", d.waitRun(t, notice, rebake.Str("run.id")))
	st.WaitFor(t, 3*time.Minute, "the rebuild folded into the template", func() bool {
		tpl = d.owner.Do("GET", "/api/app/templates/"+tplID, nil).Must(t, 200)
		return tpl.Str("template.updatedAt") != launch.Str("template.updatedAt") &&
			len(d.owner.Do("GET", "/api/app/templates", nil).Must(t, 200).List("templates")) == 1
	})
	if tpl.Str("template.status") != "ready" || tpl.Str("template.slug") != slug || tpl.Str("template.launchToken") != token ||
		tpl.Str("template.sourceBlueprintId") != notice {
		t.Fatalf("rebaked: %s", tpl.Raw)
	}
	fromTpl := d.owner.Do("POST", "/api/app/templates/"+tplID+"/sites", map[string]any{"name": "From baked"}).Must(t, 202)
	if job := d.waitJob(t, fromTpl.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("site from the baked template: %v", job)
	}
	if c := d.check(t, fromTpl.Str("site.id"), fromTpl.Str("site.url")); c["mu_notice"] != true {
		t.Fatalf("site from the baked template: %v", c)
	}
	// The site made from the old build keeps its files (the node keeps
	// that build while the site lives).
	if c := d.check(t, before.Str("site.id"), before.Str("site.url")); c["mu_notice"] != true {
		t.Fatalf("site made before the rebake: %v", c)
	}
	// The scratch sites are gone.
	st.WaitFor(t, time.Minute, "the scratch sites to go", func() bool {
		for _, s := range d.owner.Do("GET", "/api/app/sites", nil).Must(t, 200).Get("sites").([]any) {
			if strings.HasPrefix(s.(map[string]any)["name"].(string), "Bake: ") {
				return false
			}
		}
		return true
	})
}
