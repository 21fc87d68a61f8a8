package e2e

import (
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/agenttest"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// fillPHP is a site's own PHP writing to its own database through
// WordPress's $wpdb, as any plugin would.
const fillPHP = `<?php
set_time_limit(600);
header('Content-Type: application/json');
require __DIR__ . '/wp-load.php';
global $wpdb;
$wpdb->suppress_errors(true);
$wpdb->hide_errors();
function out($v) { echo json_encode($v, JSON_UNESCAPED_SLASHES); exit; }
$t = $wpdb->prefix . 'e2e_fill';
switch ($_GET['op'] ?? '') {
case 'fill':
    $wpdb->query("CREATE TABLE IF NOT EXISTS $t (id bigint AUTO_INCREMENT PRIMARY KEY, b longblob)");
    $row = str_repeat('x', 1 << 20);
    $n = 0;
    while ($n < (int)$_GET['mb']) {
        if ($wpdb->query($wpdb->prepare("INSERT INTO $t (b) VALUES (%s)", $row)) === false) break;
        $n++;
    }
    out(['insertedMb' => $n, 'error' => $wpdb->last_error]);
case 'write':
    $r = $wpdb->query($wpdb->prepare("INSERT INTO {$wpdb->options} (option_name, option_value, autoload) VALUES (%s, 'x', 'no')",
        'e2e_' . uniqid()));
    out(['ok' => $r !== false, 'error' => $wpdb->last_error]);
case 'drop':
    $r = $wpdb->query("DROP TABLE IF EXISTS $t");
    out(['ok' => $r !== false, 'error' => $wpdb->last_error]);
}
out(['error' => 'unknown op']);
`

// TestDatabaseBoundedByPlanDisk: a site whose own PHP inserts into its
// database past its plan's disk gets a database error (WordPress's
// $wpdb says the write is denied) well before its disk is full; its
// rows are on its own disk, not in the node's MariaDB data directory,
// which does not grow with them; MariaDB keeps serving the other site,
// which answers and writes; an API operation that writes to the full
// site (a Blueprint's runSql) fails plan_limit_reached with the plan's
// details; dropping the table gives the site its writes back.
func TestDatabaseBoundedByPlanDisk(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	const planMB = 96
	dir := devDataDir(t)
	plansFile := filepath.Join(t.TempDir(), "plans.json")
	if err := os.WriteFile(plansFile, []byte(`{"paid": {"siteDiskMb": 96}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	api, edgeAddr := freeAddr(t), freeAddr(t)
	d := startDev(t, dir, api, edgeAddr, "--plans", plansFile)

	newSite := func(name string) (id, url string) {
		created := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": name})
		if j := d.waitJob(t, created.Must(t, 202).Str("jobId")); j["status"] != "succeeded" {
			t.Fatalf("create %s: %v", name, j)
		}
		return created.Str("site.id"), created.Str("site.url")
	}
	filler, fillerURL := newSite("Filler")
	neighbour, neighbourURL := newSite("Neighbour")
	d.putFile(t, filler, "e2e-fill.php", fillPHP)
	d.putFile(t, neighbour, "e2e-fill.php", fillPHP)
	php := func(siteURL, query string) map[string]any {
		t.Helper()
		resp, err := slowClient.Get(siteURL + "/e2e-fill.php?" + query)
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var out map[string]any
		if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("%s: %d %.500s", query, resp.StatusCode, b)
		}
		return out
	}
	if w := php(neighbourURL, "op=write"); w["ok"] != true {
		t.Fatalf("the neighbour cannot write before anything: %v", w)
	}

	dataDir := filepath.Join(dir, "agent", "mariadb", "data", "db")
	before := agenttest.TreeBytes(t, dataDir)
	// Three times the plan, 1 MiB at a time.
	fill := php(fillerURL, "op=fill&mb=288")
	inserted, _ := fill["insertedMb"].(float64)
	msg, _ := fill["error"].(string)
	t.Logf("the site inserted %v MiB, then: %q", inserted, msg)
	if msg == "" || inserted >= 288 {
		t.Fatalf("the site inserted %v MiB into its database with a plan of %d MiB, without an error", inserted, planMB)
	}
	if inserted > planMB {
		t.Fatalf("the site inserted %v MiB with a plan of %d MiB", inserted, planMB)
	}
	// WordPress's next write fails too: the database says why.
	if w := php(fillerURL, "op=write"); w["ok"] != false || !strings.Contains(w["error"].(string), "INSERT command denied") {
		t.Fatalf("a write past the plan: %v", w)
	}

	// Host side: the rows are on the site's disk, which holds no more than
	// its plan and the reserve MariaDB overshoots into, and not in the
	// node's MariaDB data directory.
	entry := filepath.Join(dataDir, "wp_"+strings.TrimPrefix(filler, "site_"))
	if fi, err := os.Lstat(entry); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the site's database in MariaDB's data directory: %q %v", entry, err)
	}
	if grew := agenttest.TreeBytes(t, dataDir) - before; grew > 48<<20 {
		t.Fatalf("the node's MariaDB data directory grew by %d MiB while the site inserted %v MiB", grew>>20, inserted)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(dir, "agent", "sites", "fs", filler, "disk"), &sfs); err != nil {
		t.Fatal(err)
	}
	if used := int64(sfs.Blocks-sfs.Bfree) * sfs.Bsize; used > (planMB+32)<<20 {
		t.Fatalf("the site's disk holds %d MiB with a plan of %d MiB", used>>20, planMB)
	}

	// MariaDB serves on: the other site answers and writes.
	if code, body := fetch(t, neighbourURL+"/"); code != 200 || !strings.Contains(body, "Neighbour") {
		t.Fatalf("the other site: %d %.200s", code, body)
	}
	if w := php(neighbourURL, "op=write"); w["ok"] != true {
		t.Fatalf("the other site cannot write: %v", w)
	}

	// An API operation writing to the full site: plan_limit_reached.
	src, _ := json.Marshal(map[string]any{"steps": []any{map[string]any{"step": "runSql", "sql": map[string]any{
		"resource": "literal", "name": "x.sql",
		"contents": "INSERT INTO wp_options (option_name, option_value, autoload) VALUES ('e2e_full', 'x', 'no');"}}}})
	run := d.apply(t, filler, "", src)
	if run.Str("run.status") != "failed" {
		t.Fatalf("runSql on a full site: %s", run.Raw)
	}
	// The run's ending is written before its job's: wait for the job.
	var job *st.Response
	st.WaitFor(t, 30*time.Second, "the run's job to end", func() bool {
		job = d.owner.Do("GET", "/api/app/jobs/"+run.Str("run.jobId"), nil).Must(t, 200)
		return job.Str("job.status") == "failed" || job.Str("job.status") == "succeeded"
	})
	details, _ := job.Get("job.error.details").(map[string]any)
	if job.Str("job.error.code") != "plan_limit_reached" || details["resource"] != "siteDiskMb" || details["limit"] != float64(planMB) ||
		details["plan"] != "paid" || !strings.Contains(job.Str("job.error.message"), "full") {
		t.Fatalf("the run's job: %s", job.Raw)
	}

	// Room made: the writes come back.
	if r := php(fillerURL, "op=drop"); r["ok"] != true {
		t.Fatalf("drop while limited: %v", r)
	}
	st.WaitFor(t, time.Minute, "the site's writes to come back", func() bool {
		return php(fillerURL, "op=write")["ok"] == true
	})
}
