package sites_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/diskstore"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sites/sitestest"
)

// TestCheckpointsAndForks: a clone with content of its own (a post, a
// PHP-serialized option holding its URL, an upload) is checkpointed
// while it serves; its files, rows and tables then change (a file gone,
// another added, a core file changed, a table added, one dropped), and
// the restore brings every file and every table back byte for byte, at
// the same URL. A fork of it serves the same content at its own URL,
// with its own uid and database (which cannot reach the source's), while
// the source serves unchanged. An agent's PHP and SQL run in them
// (testRunPHPAndSQL). Unknown ids and bad input fail clearly, and a
// deleted site's checkpoints go with it.
func TestCheckpointsAndForks(t *testing.T) {
	ctx := sitestest.Watch(t, 8*time.Minute)
	e := sitestest.SetUp(t, sitestest.Stock, sitestest.Guarded)
	a, err := e.Templates.Create(ctx, sitestest.Req("site_cpsrc001", "cpsrc", "Checkpoint Source"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), a.ID) })
	sh := func(id, script string) string {
		t.Helper()
		res, err := e.Sites.Exec(ctx, id, []string{"sh", "-c", script}, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("sh in %s: %v %+v", id, err, res)
		}
		return string(res.Stdout)
	}
	php := func(id, code string) string {
		t.Helper()
		return sh(id, `exec php -r 'require "/srv/site/wordpress/wp-load.php"; `+strings.ReplaceAll(code, "'", `'\''`)+`'`)
	}
	// What a restore must bring back: every file of the tree (its path,
	// type and content) and every table's rows (but the options WordPress
	// writes on its own, request by request: cron and transients).
	state := func(id string) string {
		t.Helper()
		return sh(id, `cd /srv/site/wordpress && find . -type f -print0 | sort -z | xargs -0 sha256sum; find . -type l | sort`) +
			php(id, `global $wpdb;
			foreach ($wpdb->get_col("SHOW TABLES") as $t) {
				if ($t !== "wp_options") { echo $t, " ", $wpdb->get_var("CHECKSUM TABLE $t", 1), "\n"; continue; }
				foreach ($wpdb->get_results("SELECT option_name, MD5(option_value) AS v FROM wp_options WHERE `+wpSelfWritten+` ORDER BY option_name") as $r) {
					echo "option ", $r->option_name, " ", $r->v, "\n";
				}
			}`)
	}
	php(a.ID, `update_option("sbx_cp", array("home" => home_url("/shop"), "n" => 1)); wp_insert_post(array("post_title" => "Checkpointed post", "post_status" => "publish"));`)
	sh(a.ID, `mkdir -p /srv/site/wordpress/wp-content/uploads/cp && echo before > /srv/site/wordpress/wp-content/uploads/cp/a.txt`)
	// WordPress writes some options the first time it renders a page
	// (the theme's mods): rendered once before, as a restore's readiness
	// check renders it after.
	sitestest.Get(t, a.Addr(), "cpsrc.localhost:8081", "/")
	before := state(a.ID)

	t0 := time.Now()
	cp, err := e.Sites.MakeCheckpoint(ctx, a.ID, "cp_test0001")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint of a serving clone: %s (%d tables, reflink %v)", time.Since(t0), len(cp.Tables), cp.Reflink)
	if !cp.Reflink || len(cp.Tables) < 12 || cp.URL != a.URL {
		t.Fatalf("checkpoint %+v: want a reflink with WordPress's tables", cp)
	}
	if again, err := e.Sites.MakeCheckpoint(ctx, a.ID, "cp_test0001"); err != nil || !again.CreatedAt.Equal(cp.CreatedAt) {
		t.Fatalf("the same checkpoint again: %v, %v; want the first", again, err)
	}

	php(a.ID, `update_option("sbx_cp", array("home" => "changed", "n" => 2)); wp_insert_post(array("post_title" => "Later post", "post_status" => "publish"));
		global $wpdb; $wpdb->query("CREATE TABLE wp_later (id INT PRIMARY KEY)"); $wpdb->query("INSERT INTO wp_later VALUES (1)"); $wpdb->query("DROP TABLE wp_links");`)
	sh(a.ID, `cd /srv/site/wordpress && rm wp-content/uploads/cp/a.txt && echo after > wp-content/uploads/cp/b.txt && echo "// changed" >> index.php && dd if=/dev/urandom of=wp-content/uploads/big bs=1M count=4 2>/dev/null`)
	if state(a.ID) == before {
		t.Fatal("the changes did not change the site's state")
	}
	list, err := e.Sites.Checkpoints(a.ID)
	if err != nil || len(list) != 1 || list[0].ID != cp.ID {
		t.Fatalf("checkpoints: %+v, %v", list, err)
	}
	if list[0].SizeBytes <= 0 || list[0].SizeBytes > 64<<20 {
		t.Fatalf("the checkpoint holds %d bytes of its own after the site changed: want some, not a copy of the disk", list[0].SizeBytes)
	}

	t0 = time.Now()
	if _, err := e.Sites.RestoreCheckpoint(ctx, a.ID, cp.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore to the first answer: %s", time.Since(t0))
	if got := state(a.ID); got != before {
		t.Fatalf("after the restore the site's state differs:\n%s\nwant:\n%s", diffLines(got, before), "")
	}
	if resp, body := sitestest.Get(t, e.Sites.Get(a.ID).Addr(), "cpsrc.localhost:8081", "/"); resp.StatusCode != 200 || !strings.Contains(body, "Checkpointed post") {
		t.Fatalf("the restored site answers %d", resp.StatusCode)
	}
	if got := php(a.ID, `echo get_option("sbx_cp")["home"];`); got != a.URL+"/shop" {
		t.Fatalf("the serialized option after the restore: %q", got)
	}

	// A fork: the same content at its own URL, its own uid and database.
	t0 = time.Now()
	b, err := e.Sites.Fork(ctx, a.ID, sitestest.Req("site_cpfork01", "cpfork", "Fork"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), b.ID) })
	t.Logf("fork to the first answer: %s", time.Since(t0))
	if resp, body := sitestest.Get(t, b.Addr(), "cpfork.localhost:8081", "/"); resp.StatusCode != 200 || !strings.Contains(body, "Checkpointed post") {
		t.Fatalf("the fork answers %d", resp.StatusCode)
	}
	if got := php(b.ID, `echo get_option("sbx_cp")["home"], " ", home_url();`); got != b.URL+"/shop "+b.URL {
		t.Fatalf("the fork's option and home: %q; want its own URL", got)
	}
	if got := state(a.ID); got != before {
		t.Fatalf("the source changed with the fork:\n%s", diffLines(got, before))
	}
	if b.UID == a.UID || b.DBName == a.DBName {
		t.Fatalf("the fork shares the source's uid or database: %+v / %+v", b, a)
	}
	// On the host: nothing of the fork's disk is the source's uid's.
	err = filepath.WalkDir(filepath.Join(e.Sites.Data(b.ID)), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) == a.UID || int(st.Gid) == a.UID {
			t.Errorf("%s of the fork is the source's (uid %d)", p, st.Uid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := php(b.ID, `global $wpdb; $wpdb->suppress_errors(); var_export($wpdb->get_var("SELECT COUNT(*) FROM `+"`"+a.DBName+"`"+`.wp_posts"));`); got != "NULL" {
		t.Fatalf("the fork's account reads the source's database: %s", got)
	}

	t.Run("php and sql", func(t *testing.T) { testRunPHPAndSQL(t, ctx, e, a, b) })

	// A disk left frozen (an agent that stopped in a checkpoint) is
	// thawed when the disks are attached again, before anything writes.
	thaw, err := diskstore.Freeze(e.Sites.Data(b.ID))
	if err != nil {
		t.Fatal(err)
	}
	attached := make(chan error, 1)
	go func() { attached <- e.Sites.AttachDisks() }()
	select {
	case err := <-attached:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		_ = thaw()
		t.Fatal("attaching the disks hung on a frozen one")
	}
	_ = thaw()
	sh(b.ID, "echo thawed > /srv/site/wordpress/wp-content/thawed.txt")

	// A site's checkpoints hold at most its disk's size of their own: one
	// that changed everything since its checkpoints cannot keep more.
	small := sitestest.Req("site_cpsmall1", "cpsmall", "Small")
	small.Limits.DiskMB = 64
	sm, err := e.Templates.Create(ctx, small, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), sm.ID) })
	fill := "dd if=/dev/urandom of=/srv/site/wordpress/wp-content/uploads/fill bs=1M count=24 2>/dev/null && sync"
	var refused error
	for i := range 6 {
		sh(sm.ID, fill)
		if _, refused = e.Sites.MakeCheckpoint(ctx, sm.ID, fmt.Sprintf("cp_budget%04d", i)); refused != nil {
			break
		}
		sh(sm.ID, "rm -f /srv/site/wordpress/wp-content/uploads/fill && sync")
	}
	if !errors.Is(refused, sites.ErrCheckpointsFull) {
		t.Fatalf("a site that rewrote its disk past its checkpoints' budget: %v", refused)
	}

	// Bad input and unknown ids.
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"bad id", func() error { _, err := e.Sites.MakeCheckpoint(ctx, a.ID, "../../x"); return err }(), sites.ErrInvalid},
		{"unknown site", func() error { _, err := e.Sites.MakeCheckpoint(ctx, "site_nothere01", "cp_test0002"); return err }(), sites.ErrNotFound},
		{"unknown checkpoint", func() error { _, err := e.Sites.RestoreCheckpoint(ctx, a.ID, "cp_nothere1"); return err }(), sites.ErrCheckpointNotFound},
		{"another site's checkpoint", func() error { _, err := e.Sites.RestoreCheckpoint(ctx, b.ID, cp.ID); return err }(), sites.ErrCheckpointNotFound},
		{"fork into itself", func() error {
			_, err := e.Sites.Fork(ctx, a.ID, sitestest.Req(a.ID, "cpsrc", "Self"))
			return err
		}(), sites.ErrInvalid},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v; want %v", c.name, c.err, c.want)
		}
	}

	if err := e.Sites.DeleteCheckpoint(a.ID, cp.ID); err != nil {
		t.Fatal(err)
	}
	if list, err := e.Sites.Checkpoints(a.ID); err != nil || len(list) != 0 {
		t.Fatalf("after the delete: %+v, %v", list, err)
	}
	if _, err := e.Sites.MakeCheckpoint(ctx, a.ID, "cp_test0003"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.Cfg.Dir, "fs", ".checkpoints", a.ID)
	if _, err := e.Sites.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the deleted site's checkpoints are still there (%v)", err)
	}
}

// wpSelfWritten leaves out the options WordPress writes by itself, request
// by request or from its cron (transients, the cron list, update checks'
// locks and stamps, rewrite rules): everything else must match.
const wpSelfWritten = `option_name NOT LIKE '%transient%' AND option_name NOT LIKE '%lock%' AND option_name NOT LIKE '%last_checked%' ` +
	`AND option_name NOT IN ('cron', 'rewrite_rules', 'recovery_keys', 'can_compress_scripts', 'recently_activated')`

// diffLines lists the lines of got that want lacks and the other way.
func diffLines(got, want string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var out []string
	for l := range g {
		if !w[l] {
			out = append(out, "+ "+l)
		}
	}
	for l := range w {
		if !g[l] {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}
