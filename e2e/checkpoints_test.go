package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// checkpointSetup gives a site content of its own: a post, an option
// holding its URL PHP-serialized, an upload.
const checkpointSetup = `<?php
require __DIR__ . '/wp-load.php';
update_option('e2e_cp', array('home' => home_url('/shop'), 'n' => 1));
wp_insert_post(array('post_title' => 'Checkpointed post', 'post_status' => 'publish'));
@mkdir(WP_CONTENT_DIR . '/uploads/cp', 0755, true);
file_put_contents(WP_CONTENT_DIR . '/uploads/cp/a.txt', "before\n");
echo 'ok';
`

// checkpointChange changes files, rows, a serialized option and tables.
const checkpointChange = `<?php
require __DIR__ . '/wp-load.php';
global $wpdb;
update_option('e2e_cp', array('home' => 'changed', 'n' => 2));
wp_insert_post(array('post_title' => 'Later post', 'post_status' => 'publish'));
$wpdb->query('CREATE TABLE wp_later (id INT PRIMARY KEY)');
$wpdb->query('DROP TABLE wp_links');
unlink(WP_CONTENT_DIR . '/uploads/cp/a.txt');
file_put_contents(WP_CONTENT_DIR . '/uploads/cp/b.txt', "after\n");
echo 'ok';
`

// checkpointState prints what a restore must bring back: every file of
// wp-content with its hash, every table's checksum, the option and the
// site's own URL.
const checkpointState = `<?php
require __DIR__ . '/wp-load.php';
global $wpdb;
$it = new RecursiveIteratorIterator(new RecursiveDirectoryIterator(WP_CONTENT_DIR, FilesystemIterator::SKIP_DOTS));
$files = array();
foreach ($it as $f) { if ($f->isFile()) { $files[] = substr($f->getPathname(), strlen(WP_CONTENT_DIR)) . ' ' . sha1_file($f->getPathname()); } }
sort($files);
echo implode("\n", $files), "\n";
// WordPress writes some options by itself, request by request or from its
// cron (transients, the cron list, update checks' locks and stamps,
// rewrite rules): every other row counts, one line each.
foreach ($wpdb->get_col('SHOW TABLES') as $t) {
  if ($t !== 'wp_options') { echo $t, ' ', $wpdb->get_var("CHECKSUM TABLE $t", 1), "\n"; continue; }
  foreach ($wpdb->get_results("SELECT option_name, MD5(option_value) AS v FROM wp_options WHERE option_name NOT LIKE '%transient%' AND option_name NOT LIKE '%lock%' AND option_name NOT LIKE '%last_checked%' AND option_name NOT IN ('cron', 'rewrite_rules', 'recovery_keys', 'can_compress_scripts', 'recently_activated') ORDER BY option_name") as $r) {
    echo 'option ', $r->option_name, ' ', $r->v, "\n";
  }
}
echo json_encode(get_option('e2e_cp')), "\n", home_url(), "\n";
`

// TestCheckpointsAndForksEndToEnd: through the API on the real system, a
// site's checkpoint is made while it serves (replayed, not made twice,
// under its Idempotency-Key); its files, rows, tables and a serialized
// option change, and the restore brings them all back, byte for byte,
// at the same URL. A fork of it serves its content at its own URL while
// the source serves unchanged. Another workspace's site and an unknown
// checkpoint are not found, bad names are refused, and the plan's count
// per site holds.
func TestCheckpointsAndForksEndToEnd(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)
	other := sharedDev(t)

	site := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Checkpointed"}).Must(t, 202)
	id, url := site.Str("site.id"), site.Str("site.url")
	if job := d.waitJob(t, site.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("site: %v", job)
	}
	d.putFile(t, id, "setup.php", checkpointSetup)
	d.putFile(t, id, "change.php", checkpointChange)
	d.putFile(t, id, "state.php", checkpointState)
	if code, body := served(t, url+"/setup.php"); code != 200 || body != "ok" {
		t.Fatalf("setup: %d %s", code, body)
	}
	state := func(url string) string {
		t.Helper()
		code, body := fetch(t, url+"/state.php")
		if code != 200 {
			t.Fatalf("state of %s: %d %.300s", url, code, body)
		}
		return body
	}
	// WordPress writes some options the first time it renders a page
	// (the theme's mods): rendered once before, as the restore renders it.
	if code, _ := fetch(t, url+"/"); code != 200 {
		t.Fatalf("the front page: %d", code)
	}
	before := state(url)

	// Bad input first: nothing is made.
	base := "/api/app/sites/" + id + "/checkpoints"
	for _, tc := range []struct {
		client *st.Client
		path   string
		body   any
		status int
		code   string
	}{
		{d.owner, base, map[string]any{"name": strings.Repeat("x", 101)}, 400, "invalid_request"},
		{d.owner, base, map[string]any{"name": "two\nlines"}, 400, "invalid_request"},
		{d.owner, base, map[string]any{"label": "x"}, 400, "invalid_request"},
		{other.owner, base, map[string]any{}, 404, "site_not_found"},
		{d.owner, base + "/cp_nothere00000000/restore", nil, 404, "checkpoint_not_found"},
		{other.owner, "/api/app/sites/" + id + "/fork", map[string]any{}, 404, "site_not_found"},
	} {
		if r := tc.client.Do("POST", tc.path, tc.body); r.Status != tc.status || r.Code() != tc.code {
			t.Fatalf("POST %s %v: %d %s", tc.path, tc.body, r.Status, r.Raw)
		}
	}
	if r := d.owner.Do("DELETE", base+"/cp_nothere00000000", nil); r.Status != 404 || r.Code() != "checkpoint_not_found" {
		t.Fatalf("delete of an unknown checkpoint: %d %s", r.Status, r.Raw)
	}
	if n := len(d.owner.Do("GET", base, nil).Must(t, 200).List("checkpoints")); n != 0 {
		t.Fatalf("bad requests left %d checkpoints", n)
	}

	made := d.owner.Do("POST", base, map[string]any{"name": "Before the change"}, "Idempotency-Key", "cp-e2e-1").Must(t, 201)
	cpID := made.Str("checkpoint.id")
	if !strings.HasPrefix(cpID, "cp_") || made.Str("checkpoint.siteId") != id || made.Str("checkpoint.name") != "Before the change" ||
		made.Get("checkpoint.createdAt") == nil {
		t.Fatalf("checkpoint: %s", made.Raw)
	}
	again := d.owner.Do("POST", base, map[string]any{"name": "Before the change"}, "Idempotency-Key", "cp-e2e-1").Must(t, 201)
	if again.Str("checkpoint.id") != cpID {
		t.Fatalf("the replay made another checkpoint: %s", again.Raw)
	}
	if got := other.owner.Do("GET", base, nil); got.Status != 404 {
		t.Fatalf("another workspace lists the checkpoints: %d %s", got.Status, got.Raw)
	}

	if code, body := fetch(t, url+"/change.php"); code != 200 || body != "ok" {
		t.Fatalf("change: %d %s", code, body)
	}
	if state(url) == before {
		t.Fatal("the change changed nothing")
	}
	list := d.owner.Do("GET", base, nil).Must(t, 200).List("checkpoints")
	if len(list) != 1 || list[0]["id"] != cpID {
		t.Fatalf("checkpoints: %v", list)
	}

	restored := d.owner.Do("POST", base+"/"+cpID+"/restore", nil).Must(t, 202)
	if restored.Str("site.id") != id || restored.Str("site.url") != url {
		t.Fatalf("restore: %s", restored.Raw)
	}
	if job := d.waitJob(t, restored.Str("jobId")); job["status"] != "succeeded" || job["type"] != "restore_checkpoint" {
		t.Fatalf("restore job: %v", job)
	}
	if got := state(url); got != before {
		t.Fatalf("after the restore:\n%s\nwant:\n%s", got, before)
	}
	if s := d.owner.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200); s.Str("site.status") != "ready" || s.Str("site.url") != url {
		t.Fatalf("the restored site: %s", s.Raw)
	}

	// A fork: the source's content at its own URL; the source unchanged.
	fork := d.owner.Do("POST", "/api/app/sites/"+id+"/fork", map[string]any{"name": "The fork"}).Must(t, 202)
	forkID, forkURL := fork.Str("site.id"), fork.Str("site.url")
	if forkID == id || forkURL == url || fork.Str("site.status") != "creating" || fork.Str("site.name") != "The fork" {
		t.Fatalf("fork: %s", fork.Raw)
	}
	if job := d.waitJob(t, fork.Str("jobId")); job["status"] != "succeeded" || job["type"] != "fork_site" {
		t.Fatalf("fork job: %v", job)
	}
	forked := state(forkURL)
	want := strings.ReplaceAll(before, strings.ReplaceAll(url, "/", `\/`), strings.ReplaceAll(forkURL, "/", `\/`))
	wantLines, gotLines := strings.Split(want, "\n"), strings.Split(forked, "\n")
	if len(gotLines) != len(wantLines) || gotLines[len(gotLines)-2] != forkURL ||
		!strings.Contains(forked, strings.ReplaceAll(forkURL, "/", `\/`)+`\/shop`) {
		t.Fatalf("the fork's state:\n%s\nsource's:\n%s", forked, before)
	}
	if code, body := fetch(t, forkURL+"/"); code != 200 || !strings.Contains(body, "Checkpointed post") {
		t.Fatalf("the fork serves %d %.200s", code, body)
	}
	if got := state(url); got != before {
		t.Fatalf("the source changed with its fork:\n%s", got)
	}

	if r := d.owner.Do("DELETE", base+"/"+cpID, nil).Must(t, 200); r.Get("deleted") != true {
		t.Fatalf("delete: %s", r.Raw)
	}
	if n := len(d.owner.Do("GET", base, nil).Must(t, 200).List("checkpoints")); n != 0 {
		t.Fatalf("%d checkpoints after the delete", n)
	}
	// The plan's count per site (free: 3).
	st.NewClient(t, "http://"+d.api, system.operator).Do("PUT", "/api/admin/accounts/"+d.email+"/plan", map[string]string{"plan": "free"}).Must(t, 200)
	for i := 0; i < 3; i++ {
		d.owner.Do("POST", base, map[string]any{}).Must(t, 201)
	}
	if r := d.owner.Do("POST", base, map[string]any{}); r.Status != 402 || r.Code() != "plan_limit_reached" || r.Details()["resource"] != "checkpoints" {
		t.Fatalf("a fourth checkpoint on the free plan: %d %s", r.Status, r.Raw)
	}
	for _, s := range []string{forkID, id} {
		if job := d.waitJob(t, d.owner.Do("DELETE", "/api/app/sites/"+s, nil).Must(t, 202).Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("delete %s: %v", s, job)
		}
	}
	if _, err := os.Stat(filepath.Join(d.dir, "agent", "sites", "fs", ".checkpoints", id)); !os.IsNotExist(err) {
		t.Fatal("the deleted site's checkpoints are still on its node")
	}
}
