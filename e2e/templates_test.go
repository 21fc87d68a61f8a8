package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// templateSetup gives a site what real sites have that holds their URL:
// a post linking to the site, an active plugin, an upload, a
// PHP-serialized option (nested, with an object) and a JSON option (with
// escaped slashes, as wp_json_encode writes them).
const templateSetup = `<?php require __DIR__.'/wp-load.php';
require_once ABSPATH.'wp-admin/includes/plugin.php';
$r = activate_plugin('e2e-banner/e2e-banner.php');
if (is_wp_error($r)) { echo 'plugin: ', $r->get_error_message(); exit; }
wp_insert_post(array('post_title' => 'Template post', 'post_status' => 'publish',
  'post_content' => '<a href="'.home_url('/about/').'">about</a> <img src="'.home_url('/wp-content/uploads/e2e/pixel.txt').'">'));
$o = new stdClass; $o->link = home_url('/obj');
update_option('e2e_serialized', array('home' => home_url('/shop'), 'nested' => array('url' => home_url(), 'n' => 3), 'obj' => $o));
update_option('e2e_json', wp_json_encode(array('link' => home_url('/json'), 'title' => 'JSON')));
@mkdir(WP_CONTENT_DIR.'/uploads/e2e', 0755, true);
file_put_contents(WP_CONTENT_DIR.'/uploads/e2e/pixel.txt', 'uploaded-pixel');
echo 'ok';`

// templateCheck reports, at the site's own URL, whether every piece of
// templateSetup moved there: options are read raw and unserialized by
// PHP itself, so a wrong string length would fail here.
const templateCheck = `<?php require __DIR__.'/wp-load.php';
require_once ABSPATH.'wp-admin/includes/plugin.php';
global $wpdb;
$raw = $wpdb->get_var("SELECT option_value FROM {$wpdb->options} WHERE option_name = 'e2e_serialized'");
$o = @unserialize($raw);
$j = json_decode(get_option('e2e_json'), true);
$p = get_posts(array('title' => 'Template post'));
$h = home_url();
echo json_encode(array(
  'home' => $h,
  'serialized' => is_array($o) && $o['home'] === $h.'/shop' && $o['nested']['url'] === $h && $o['obj']->link === $h.'/obj',
  'json' => is_array($j) && $j['link'] === $h.'/json',
  'post' => count($p) === 1 && strpos($p[0]->post_content, $h.'/about/') !== false,
  'plugin' => is_plugin_active('e2e-banner/e2e-banner.php'),
  'blogname' => get_option('blogname'),
));`

const bannerPlugin = `<?php
/* Plugin Name: E2E Banner */
add_action('wp_footer', function () { echo '<p>e2e-banner-active</p>'; });`

// TestTemplatesEndToEnd: a real site with content is frozen into a
// template; a site made from it has the content at its own URL (serialized
// and JSON options intact); a restore keeps the restored site's id and
// URL; a reset of a template-born site goes back to the template; a
// deleted template leaves its sites serving, and its tree leaves the
// node once no site is made from it.
func TestTemplatesEndToEnd(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)
	dir := d.dir

	// A site that expires while the rest of this test runs: the leader's
	// reaper deletes it, container, files and all.
	short := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Short lived", "expiresInMinutes": 1}).Must(t, 202)
	if short.Get("site.expiresAt") == nil {
		t.Fatalf("no expiresAt: %s", short.Raw)
	}
	src := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Template Source"}).Must(t, 202)
	srcID, srcURL := src.Str("site.id"), src.Str("site.url")
	// A site still creating cannot be frozen.
	if r := d.owner.Do("POST", "/api/app/templates", map[string]any{"siteId": srcID, "name": "Too early"}); r.Status != 400 ||
		r.Code() != "invalid_request" || r.Details()["status"] != "creating" {
		t.Fatalf("template of a creating site: %d %s", r.Status, r.Raw)
	}
	if job := d.waitJob(t, src.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("source: %v", job)
	}
	d.putFile(t, srcID, "wp-content/plugins/e2e-banner/e2e-banner.php", bannerPlugin)
	d.putFile(t, srcID, "setup.php", templateSetup)
	d.putFile(t, srcID, "check.php", templateCheck)
	if code, body := served(t, srcURL+"/setup.php"); code != 200 || body != "ok" {
		t.Fatalf("setup: %d %s", code, body)
	}

	// Bad input writes nothing.
	for _, tc := range []struct {
		body        any
		status      int
		code, field string
	}{
		{map[string]any{"siteId": "site_nope", "name": "x"}, 404, "site_not_found", ""},
		{map[string]any{"siteId": srcID}, 400, "invalid_request", "name"},
		{map[string]any{"siteId": srcID, "name": "x", "public": true}, 400, "invalid_request", "public"},
	} {
		r := d.owner.Do("POST", "/api/app/templates", tc.body)
		if r.Status != tc.status || r.Code() != tc.code || (tc.field != "" && r.Details()["field"] != tc.field) {
			t.Fatalf("%v: %d %s", tc.body, r.Status, r.Raw)
		}
	}
	if n := len(d.owner.Do("GET", "/api/app/templates", nil).Must(t, 200).List("templates")); n != 0 {
		t.Fatalf("bad requests left %d templates", n)
	}

	made := d.owner.Do("POST", "/api/app/templates", map[string]any{"siteId": srcID, "name": "Shop demo", "description": "A shop"}).Must(t, 202)
	tplID := made.Str("template.id")
	if made.Str("template.status") != "building" || made.Str("template.slug") != "shop-demo" || made.Get("template.launchEnabled") != false ||
		made.Get("template.launchToken") != nil || made.Str("template.sourceSiteId") != srcID {
		t.Fatalf("made: %s", made.Raw)
	}
	if job := d.waitJob(t, made.Str("jobId")); job["status"] != "succeeded" || job["type"] != "snapshot_template" {
		t.Fatalf("snapshot job: %v", job)
	}
	tpl := d.owner.Do("GET", "/api/app/templates/"+tplID, nil).Must(t, 200)
	if tpl.Str("template.status") != "ready" || tpl.Get("template.sizeBytes").(float64) < 1<<20 ||
		!strings.HasPrefix(tpl.Str("template.wordpressVersion"), "6.") || tpl.Str("template.phpVersion") != "8.2" {
		t.Fatalf("template: %s", tpl.Raw)
	}
	// The source serves again after its freeze.
	if code, body := fetch(t, srcURL+"/"); code != 200 || !strings.Contains(body, "e2e-banner-active") {
		t.Fatalf("source after the freeze: %d %.200s", code, body)
	}

	// A site from the template: everything at its own URL.
	clone := d.owner.Do("POST", "/api/app/templates/"+tplID+"/sites", map[string]any{"name": "From the template"}).Must(t, 202)
	cloneID, cloneURL := clone.Str("site.id"), clone.Str("site.url")
	if clone.Str("site.templateId") != tplID || cloneURL == srcURL {
		t.Fatalf("clone: %s", clone.Raw)
	}
	if job := d.waitJob(t, clone.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("clone job: %v", job)
	}
	checkMoved := func(t *testing.T, url, blogname string) {
		t.Helper()
		code, body := served(t, url+"/check.php")
		want := `{"home":"` + strings.ReplaceAll(url, "/", `\/`) + `","serialized":true,"json":true,"post":true,"plugin":true,"blogname":"` + blogname + `"}`
		if code != 200 || body != want {
			t.Fatalf("check at %s: %d %s\nwant %s", url, code, body, want)
		}
		code, body = fetch(t, url+"/")
		if code != 200 || !strings.Contains(body, "Template post") || !strings.Contains(body, "e2e-banner-active") ||
			strings.Contains(body, strings.TrimPrefix(srcURL, "http://")) && url != srcURL {
			t.Fatalf("home page at %s: %d %.400s", url, code, body)
		}
		if code, body := fetch(t, url+"/wp-content/uploads/e2e/pixel.txt"); code != 200 || body != "uploaded-pixel" {
			t.Fatalf("upload at %s: %d %s", url, code, body)
		}
	}
	checkMoved(t, cloneURL, "Template Source")

	// A site made another way takes the template by restore, keeping its
	// id and URL.
	other := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Other"}).Must(t, 202)
	otherID, otherURL := other.Str("site.id"), other.Str("site.url")
	d.waitJob(t, other.Str("jobId"))
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"templateId":"tpl_nope"}`, 404, "template_not_found"},
		{`{}`, 400, "invalid_request"},
	} {
		if r := d.owner.Do("POST", "/api/app/sites/"+otherID+"/restore", tc.body); r.Status != tc.status || r.Code() != tc.code {
			t.Fatalf("restore %s: %d %s", tc.body, r.Status, r.Raw)
		}
	}
	restored := d.owner.Do("POST", "/api/app/sites/"+otherID+"/restore", map[string]any{"templateId": tplID}).Must(t, 202)
	if restored.Str("site.status") != "creating" || restored.Str("site.templateId") != tplID {
		t.Fatalf("restore: %s", restored.Raw)
	}
	if job := d.waitJob(t, restored.Str("jobId")); job["status"] != "succeeded" || job["type"] != "restore_site" {
		t.Fatalf("restore job: %v", job)
	}
	after := d.owner.Do("GET", "/api/app/sites/"+otherID, nil).Must(t, 200)
	if after.Str("site.url") != otherURL || after.Str("site.status") != "ready" || after.Str("site.templateId") != tplID {
		t.Fatalf("restored: %s", after.Raw)
	}
	checkMoved(t, otherURL, "Template Source")

	// A template-born site's changes go with its reset.
	d.putFile(t, cloneID, "mine.txt", "the clone's own")
	d.putFile(t, cloneID, "rename.php", `<?php require __DIR__.'/wp-load.php'; update_option('blogname', 'Renamed clone'); echo 'ok';`)
	if code, body := fetch(t, cloneURL+"/rename.php"); code != 200 || body != "ok" {
		t.Fatalf("rename: %d %s", code, body)
	}
	reset := d.owner.Do("POST", "/api/app/sites/"+cloneID+"/reset", nil).Must(t, 202)
	d.waitJob(t, reset.Str("jobId"))
	checkMoved(t, cloneURL, "Template Source")
	if code, _ := fetch(t, cloneURL+"/mine.txt"); code != 404 {
		t.Fatalf("the clone's file after its reset: %d", code)
	}

	// Deleting the template leaves its sites serving; the node keeps its
	// tree until no site is made from it.
	d.owner.Do("DELETE", "/api/app/templates/"+tplID, nil).Must(t, 200)
	if r := d.owner.Do("GET", "/api/app/templates/"+tplID, nil); r.Status != 404 || r.Code() != "template_not_found" {
		t.Fatalf("deleted template: %d %s", r.Status, r.Raw)
	}
	if r := d.owner.Do("POST", "/api/app/templates/"+tplID+"/sites", nil); r.Status != 404 {
		t.Fatalf("site from a deleted template: %d %s", r.Status, r.Raw)
	}
	tree := filepath.Join(dir, "agent", "sites", "templates", tplID)
	if _, err := os.Stat(tree); err != nil {
		t.Fatalf("the template's tree on the node: %v", err)
	}
	checkMoved(t, cloneURL, "Template Source")
	reset = d.owner.Do("POST", "/api/app/sites/"+cloneID+"/reset", nil).Must(t, 202)
	if job := d.waitJob(t, reset.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("reset after the template's delete: %v", job)
	}
	for _, id := range []string{cloneID, otherID} {
		del := d.owner.Do("DELETE", "/api/app/sites/"+id, nil).Must(t, 202)
		d.waitJob(t, del.Str("jobId"))
	}
	st.WaitFor(t, time.Minute, "the template's tree to leave the node", func() bool {
		_, err := os.Stat(tree)
		return os.IsNotExist(err)
	})
	if code, body := fetch(t, srcURL+"/"); code != 200 || !strings.Contains(body, "Template post") {
		t.Fatalf("the source at the end: %d %.200s", code, body)
	}

	shortID := short.Str("site.id")
	st.WaitFor(t, 3*time.Minute, "the expired site to be deleted", func() bool {
		return d.owner.Do("GET", "/api/app/sites/"+shortID, nil).Status == 404
	})
	if _, err := os.Stat(filepath.Join(dir, "agent", "sites", "records", shortID+".json")); !os.IsNotExist(err) {
		t.Fatalf("the expired site's record on the node: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "agent", "sites", "fs", shortID)); !os.IsNotExist(err) {
		t.Fatalf("the expired site's files on the node: %v", err)
	}
}

// TestTemplateOnAnotherNode: a template frozen on one node makes a site
// on a second node (a separate `sandboxd agent` process) from its
// artifact in the blob store, and restores a site of that node: the node
// pulls the artifact once and keeps the copy.
func TestTemplateOnAnotherNode(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	dir := devDataDir(t)
	// This machine's node takes one site: the template's source.
	d := startDev(t, dir, freeAddr(t), freeAddr(t), "--max-sites", "1")
	src := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Node A source"}).Must(t, 202)
	srcID := src.Str("site.id")
	if job := d.waitJob(t, src.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("source: %v", job)
	}
	nodeA := d.owner.Do("GET", "/api/app/sites/"+srcID, nil).Must(t, 200).Str("site.nodeId")
	d.putFile(t, srcID, "wp-content/plugins/e2e-banner/e2e-banner.php", bannerPlugin)
	d.putFile(t, srcID, "setup.php", templateSetup)
	d.putFile(t, srcID, "check.php", templateCheck)
	if code, body := served(t, src.Str("site.url")+"/setup.php"); code != 200 || body != "ok" {
		t.Fatalf("setup: %d %s", code, body)
	}
	made := d.owner.Do("POST", "/api/app/templates", map[string]any{"siteId": srcID, "name": "Portable"}).Must(t, 202)
	tplID := made.Str("template.id")
	if job := d.waitJob(t, made.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("snapshot: %v", job)
	}
	tpl := d.owner.Do("GET", "/api/app/templates/"+tplID, nil).Must(t, 200)
	if tpl.Get("template.artifactId") == nil {
		t.Fatalf("no artifact: %s", tpl.Raw)
	}
	// Node A is full: nothing can be made until a second node joins.
	if r := d.owner.Do("POST", "/api/app/templates/"+tplID+"/sites", map[string]any{}); r.Status != 503 {
		t.Fatalf("a site with no room: %d %s", r.Status, r.Raw)
	}

	dirB := filepath.Join(filepath.Dir(dir), "b")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := agent.Purge(ctx, dirB, ""); err != nil {
			t.Errorf("purge node B: %v", err)
		}
	})
	b := start(t, []string{"SANDBOXD_JOIN_TOKEN=" + joinToken(t, dir, "agent", "")}, append([]string{"agent", "--control-plane", readKey(t, filepath.Join(dir, "cluster-url")),
		"--data-dir", dirB, "--listen-addr", freeAddr(t), "--site-egress", "none", "--log-format", "json"}, sharedContainerd(t)...)...)
	b.waitLine(t, "sandboxd agent: AgentService")

	var clone *st.Response
	st.WaitFor(t, 2*time.Minute, "node B to take a site", func() bool {
		clone = d.owner.Do("POST", "/api/app/templates/"+tplID+"/sites", map[string]any{"name": "On node B"})
		return clone.Status == 202
	})
	if job := d.waitJob(t, clone.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("clone on node B: %v", job)
	}
	cloneID, cloneURL := clone.Str("site.id"), clone.Str("site.url")
	site := d.owner.Do("GET", "/api/app/sites/"+cloneID, nil).Must(t, 200)
	if site.Str("site.nodeId") == nodeA || site.Str("site.status") != "ready" {
		t.Fatalf("clone: %s", site.Raw)
	}
	code, body := served(t, cloneURL+"/check.php")
	want := `{"home":"` + strings.ReplaceAll(cloneURL, "/", `\/`) + `","serialized":true,"json":true,"post":true,"plugin":true,"blogname":"Node A source"}`
	if code != 200 || body != want {
		t.Fatalf("check on node B: %d %s\nwant %s", code, body, want)
	}
	if code, body := fetch(t, cloneURL+"/wp-content/uploads/e2e/pixel.txt"); code != 200 || body != "uploaded-pixel" {
		t.Fatalf("upload on node B: %d %s", code, body)
	}
	// Node B keeps its copy, the template's uid's.
	var st_ syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(dirB, "sites", "templates", tplID, "files", "check.php"), &st_); err != nil || st_.Uid != 1_999_999 {
		t.Fatalf("node B's copy: %v uid %d", err, st_.Uid)
	}

	// A site of node B takes the template by restore.
	other := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "B other"}).Must(t, 202)
	d.waitJob(t, other.Str("jobId"))
	rs := d.owner.Do("POST", "/api/app/sites/"+other.Str("site.id")+"/restore", map[string]any{"templateId": tplID}).Must(t, 202)
	if job := d.waitJob(t, rs.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("restore on node B: %v", job)
	}
	code, body = served(t, other.Str("site.url")+"/check.php")
	if code != 200 || !strings.Contains(body, `"serialized":true,"json":true,"post":true,"plugin":true`) {
		t.Fatalf("restored on node B: %d %s", code, body)
	}
	for _, id := range []string{cloneID, other.Str("site.id")} {
		del := d.owner.Do("DELETE", "/api/app/sites/"+id, nil).Must(t, 202)
		d.waitJob(t, del.Str("jobId"))
	}
	b.stop(t)
}
