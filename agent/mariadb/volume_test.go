package mariadb_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/dbguard"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/sitedisk"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// siteDisk is a small site disk of the test's own, its database volume
// directory made on it as the site manager makes it; the disk goes when
// the test ends (after the server, registered before it).
func siteDisk(t *testing.T, sizeMB, reserveMB int64) (disk, volume string) {
	t.Helper()
	dir := agenttest.ShortDir(t)
	disk = filepath.Join(dir, "disk")
	if err := sitedisk.EnsureReserved(filepath.Join(dir, "disk.img"), sizeMB, sitedisk.Reserve{MB: reserveMB, UID: mariadb.UID}, disk); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sitedisk.Unmount(disk); err != nil {
			t.Error(err)
		}
	})
	volume = filepath.Join(disk, "mariadb")
	if err := os.Mkdir(volume, 0o700); err != nil {
		t.Fatal(err)
	}
	return disk, volume
}

func openAs(t *testing.T, srv *mariadb.Server, user, pw, db string) *sql.DB {
	t.Helper()
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = user, pw, "tcp", srv.Addr(), db
	d, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestVolumeHoldsADatabase: a site's database placed in the volume on
// its disk keeps its files there, not in the server's data directory; a
// table cannot be put outside the volume (DATA DIRECTORY) nor made of
// another engine; LimitWrites leaves the site's user reading and making
// room, ends its connections, and gives everything back; an import's
// staging database lies in the same volume and takes over by renames;
// dropping and detaching leave the disk empty.
func TestVolumeHoldsADatabase(t *testing.T) {
	hosttest.Root(t)
	ctx := context.Background()
	_, volume := siteDisk(t, 48, 48)
	srv, _ := startServer(t)
	dataDir := srv.DataDirForTests()
	if err := srv.AttachVolume("wp_full", volume); err != nil {
		t.Fatal(err)
	}
	if err := srv.AttachVolume("wp_full", volume); err != nil {
		t.Fatal("attach again:", err)
	}
	if err := srv.CreateSiteDatabase(ctx, "wp_full", "wp_full", "wp_full", "pw-full"); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSiteDatabase(ctx, "wp_full", "wp_full", "wp_full", "pw-full"); err != nil {
		t.Fatal("create again:", err)
	}
	if target, err := os.Readlink(filepath.Join(dataDir, "wp_full")); err != nil || target != "/volumes/wp_full/wp_full" {
		t.Fatalf("the database's entry: %q %v", target, err)
	}
	full := openAs(t, srv, "wp_full", "pw-full", "wp_full")
	for _, q := range []string{"CREATE TABLE fill (id int AUTO_INCREMENT PRIMARY KEY, b longblob)",
		"CREATE TABLE outside (id int PRIMARY KEY) DATA DIRECTORY = '/data'",
		"CREATE TABLE mine (id int PRIMARY KEY) ENGINE = MyISAM",
		"CREATE TABLE aria (id int PRIMARY KEY) ENGINE = Aria DATA DIRECTORY = '/tmp'",
	} {
		if _, err := full.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var name, create string
	if err := full.QueryRowContext(ctx, "SHOW CREATE TABLE mine").Scan(&name, &create); err != nil || !strings.Contains(create, "ENGINE=InnoDB") {
		t.Fatalf("a MyISAM table: %q %v", create, err)
	}
	before := agenttest.TreeBytes(t, dataDir)
	row := strings.Repeat("x", 1<<20)
	for range 16 {
		if _, err := full.ExecContext(ctx, "INSERT INTO fill (b) VALUES (?)", row); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"outside.ibd", "fill.ibd", "aria.ibd", "mine.ibd"} {
		if _, err := os.Stat(filepath.Join(volume, "wp_full", n)); err != nil {
			t.Fatalf("%s is not in the volume: %v", n, err)
		}
	}
	if st, err := os.Stat(filepath.Join(volume, "wp_full", "fill.ibd")); err != nil || st.Size() < 16<<20 {
		t.Fatalf("16 MiB of rows: %v %v", st, err)
	}
	if grew := agenttest.TreeBytes(t, dataDir) - before; grew > 8<<20 {
		t.Fatalf("the server's data directory grew by %d MiB while 16 MiB went into the site's database", grew>>20)
	}
	if ibd, _ := filepath.Glob(filepath.Join(dataDir, "*", "*.ibd")); len(ibd) > 0 {
		for _, f := range ibd {
			if strings.HasPrefix(filepath.Base(filepath.Dir(f)), "wp_") {
				t.Fatalf("a site's table in the data directory itself: %v", f)
			}
		}
	}

	// Limited: the open connection ends, a new one reads and makes room
	// but writes nothing; then it writes again.
	held, err := full.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.LimitWrites(ctx, "wp_full", true); err != nil {
		t.Fatal(err)
	}
	if _, err := held.ExecContext(ctx, "SELECT 1"); err == nil {
		t.Fatal("a connection of the limited user outlived the limit")
	}
	held.Close()
	conn, err := full.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"INSERT INTO fill (b) VALUES ('x')", "UPDATE fill SET b = 'y'", "CREATE TABLE more (id int)",
		"ALTER TABLE fill ADD COLUMN c int", "INSERT INTO mine VALUES (1)"} {
		if _, err := conn.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "denied") {
			t.Fatalf("%s while limited: %v", q, err)
		}
	}
	var rows int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM fill").Scan(&rows); err != nil || rows != 16 {
		t.Fatalf("reading while limited: %d %v", rows, err)
	}
	for _, q := range []string{"DELETE FROM fill WHERE id = 1", "DROP TABLE outside", "TRUNCATE TABLE aria"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s while limited: %v", q, err)
		}
	}
	// Limiting again changes nothing, and ends nothing.
	if err := srv.LimitWrites(ctx, "wp_full", true); err != nil {
		t.Fatal("limit again:", err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal("limiting again ended a connection:", err)
	}
	// Given back: nothing is ended (a request in progress would fail);
	// a new connection writes, and so does the old one once it selects
	// its database again.
	if err := srv.LimitWrites(ctx, "wp_full", false); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatal("giving writes back ended a connection:", err)
	}
	if _, err := openAs(t, srv, "wp_full", "pw-full", "wp_full").ExecContext(ctx, "INSERT INTO mine VALUES (2)"); err != nil {
		t.Fatal("after the limit:", err)
	}
	if _, err := conn.ExecContext(ctx, "USE wp_full"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO mine VALUES (3)"); err != nil {
		t.Fatal("an older connection after the limit, its database selected again:", err)
	}
	conn.Close()

	// An import: its staging database in the same volume takes over.
	if err := srv.StageDatabase(ctx, "wp_full", "wp_full_i", "wp_full"); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dataDir, "wp_full_i")); err != nil || target != "/volumes/wp_full/wp_full_i" {
		t.Fatalf("the staging database's entry: %q %v", target, err)
	}
	staging := openAs(t, srv, "wp_full", "pw-full", "wp_full_i")
	for _, q := range []string{"CREATE TABLE wpx_options (id int PRIMARY KEY, option_name varchar(64), option_value text)",
		"CREATE TABLE wpx_posts (ID int PRIMARY KEY)", "CREATE TABLE wpx_usermeta (umeta_id int PRIMARY KEY, meta_key varchar(64))",
		"INSERT INTO wpx_options VALUES (1, 'wpx_user_roles', 'r')"} {
		if _, err := staging.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if n, err := srv.TakeOver(ctx, "wp_full_i", "wp_full", "wpx_"); err != nil || n != 3 {
		t.Fatalf("take over: %d %v", n, err)
	}
	if _, err := os.Lstat(filepath.Join(dataDir, "wp_full_i")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the staging database's entry is left: %v", err)
	}
	var opt string
	if err := full.QueryRowContext(ctx, "SELECT option_name FROM wp_options").Scan(&opt); err != nil || opt != "wp_user_roles" {
		t.Fatalf("after the take-over: %q %v", opt, err)
	}

	// Dropped and detached: nothing is left on the disk or in the server.
	if err := srv.DropSiteDatabase(ctx, "wp_full", "wp_full"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dataDir, "wp_full")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the database's entry is left: %v", err)
	}
	if err := srv.DetachVolume(ctx, "wp_full"); err != nil {
		t.Fatal(err)
	}
	if err := srv.DetachVolume(ctx, "wp_full"); err != nil {
		t.Fatal("detach again:", err)
	}
	if ents, err := os.ReadDir(volume); err != nil || len(ents) > 0 {
		t.Fatalf("the volume holds %v (%v)", ents, err)
	}
	if db, user, err := srv.Exists(ctx, "wp_full", "wp_full"); err != nil || db || user {
		t.Fatalf("left behind: db=%v user=%v err=%v", db, user, err)
	}
}

// TestGuardStopsADatabaseAtItsPlan: a site inserting large values (the
// kind that, on a full disk, makes InnoDB abort the whole server in its
// rollback) is stopped by the guard once its disk holds more than its
// plan: its writes fail with a clear error well before the disk is
// full, the server keeps serving another site, which writes, and the
// server's data directory did not grow with the site's data.
func TestGuardStopsADatabaseAtItsPlan(t *testing.T) {
	hosttest.Root(t)
	ctx := context.Background()
	const planMB, reserveMB = 48, 48
	disk, volume := siteDisk(t, planMB, reserveMB)
	srv, _ := startServer(t)
	dataDir := srv.DataDirForTests()
	g, err := dbguard.New(dbguard.Config{Limiter: srv})
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); g.Run(gctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	if err := srv.AttachVolume("wp_fill", volume); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSiteDatabase(ctx, "wp_fill", "wp_fill", "wp_fill", "pw-fill"); err != nil {
		t.Fatal(err)
	}
	if err := g.Track(ctx, dbguard.Site{User: "wp_fill", Disk: disk, Volume: volume, LimitBytes: planMB << 20}); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSiteDatabase(ctx, "", "wp_other", "wp_other", "pw-other"); err != nil {
		t.Fatal(err)
	}
	full, other := openAs(t, srv, "wp_fill", "pw-fill", "wp_fill"), openAs(t, srv, "wp_other", "pw-other", "wp_other")
	if _, err := full.ExecContext(ctx, "CREATE TABLE fill (id int AUTO_INCREMENT PRIMARY KEY, b longblob)"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(ctx, "CREATE TABLE t (id int AUTO_INCREMENT PRIMARY KEY, v varchar(64))"); err != nil {
		t.Fatal(err)
	}
	before := agenttest.TreeBytes(t, dataDir)
	row := strings.Repeat("x", 1<<20)
	var inserted int64
	var fillErr error
	for inserted < 4*(planMB+reserveMB)<<20 {
		if _, fillErr = full.ExecContext(ctx, "INSERT INTO fill (b) VALUES (?)", row); fillErr != nil {
			break
		}
		inserted += 1 << 20
	}
	t.Logf("%d MiB went in, then: %v", inserted>>20, fillErr)
	if fillErr == nil {
		t.Fatalf("%d MiB went into a site whose plan is %d MiB", inserted>>20, planMB)
	}
	if !g.Limited("wp_fill") {
		t.Fatalf("the guard did not limit the site: %v", fillErr)
	}
	// Its next write is refused, clearly.
	if _, err := full.ExecContext(ctx, "INSERT INTO fill (b) VALUES ('x')"); err == nil || !strings.Contains(err.Error(), "INSERT command denied") {
		t.Fatalf("a write past the plan: %v", err)
	}
	u, err := sitedisk.UsageOf(disk)
	if err != nil {
		t.Fatal(err)
	}
	if u.Used > (planMB+reserveMB/2)<<20 {
		t.Fatalf("the disk holds %d MiB: the site's database went %d MiB past its plan of %d", u.Used>>20, (u.Used>>20)-planMB, planMB)
	}
	// The server is up: the other site writes, this one reads.
	if _, err := other.ExecContext(ctx, "INSERT INTO t (v) VALUES ('still here')"); err != nil {
		t.Fatal("the other database:", err)
	}
	var rows int64
	if err := full.QueryRowContext(ctx, "SELECT COUNT(*) FROM fill").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if grew := agenttest.TreeBytes(t, dataDir) - before; grew > 32<<20 {
		t.Fatalf("the server's data directory grew by %d MiB while the site filled its disk", grew>>20)
	}
	// Room made: the writes come back.
	if _, err := full.ExecContext(ctx, "DROP TABLE fill"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Check(ctx, "wp_fill"); err != nil || g.Limited("wp_fill") {
		t.Fatalf("after dropping the table: limited=%v %v", g.Limited("wp_fill"), err)
	}
	// The next request, on a connection of its own as WordPress's are,
	// writes (the pool's, made while limited, reads until it reconnects).
	if _, err := openAs(t, srv, "wp_fill", "pw-fill", "wp_fill").ExecContext(ctx, "CREATE TABLE again (id int)"); err != nil {
		t.Fatal("after making room:", err)
	}
}

// TestVolumeDetachDropsWhatIsLeft: a site deleted mid-import leaves its
// staging database; detaching the volume drops it with the rest, and a
// database whose volume went without a detach (its link dangles) still
// drops.
func TestVolumeDetachDropsWhatIsLeft(t *testing.T) {
	hosttest.Root(t)
	ctx := context.Background()
	_, volume := siteDisk(t, 32, 32)
	srv, _ := startServer(t)
	dataDir := srv.DataDirForTests()
	if err := srv.AttachVolume("wp_gone", volume); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSiteDatabase(ctx, "wp_gone", "wp_gone", "wp_gone", "pw"); err != nil {
		t.Fatal(err)
	}
	if err := srv.StageDatabase(ctx, "wp_gone", "wp_gone_i", "wp_gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := openAs(t, srv, "wp_gone", "pw", "wp_gone_i").ExecContext(ctx, "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if err := srv.DetachVolume(ctx, "wp_gone"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"wp_gone", "wp_gone_i"} {
		if _, err := os.Lstat(filepath.Join(dataDir, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s is left: %v", n, err)
		}
		if db, _, err := srv.Exists(ctx, n, "nobody"); err != nil || db {
			t.Fatalf("%s still exists: %v", n, err)
		}
	}
	// A dangling link (its volume gone without a detach) drops too.
	if err := os.Symlink("/volumes/wp_lost/wp_lost", filepath.Join(dataDir, "wp_lost")); err != nil {
		t.Fatal(err)
	}
	if err := srv.DropSiteDatabase(ctx, "wp_lost", "wp_lost"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dataDir, "wp_lost")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the dangling link is left: %v", err)
	}
}

// TestSiteGrantsNameOnlyItsDatabases: a site's account cannot make a
// database whose name its grant's "_" matches as a wildcard (`wp-esc`,
// `wpXesc`): one would be a plain directory of the server's data
// directory, on the node's disk, bounded by nothing. An older agent's
// wildcard grant is rewritten when the server starts. Writes are still
// limited and given back on the site's database and its staging one.
func TestSiteGrantsNameOnlyItsDatabases(t *testing.T) {
	hosttest.Root(t)
	ctx := context.Background()
	_, volume := siteDisk(t, 32, 32)
	srv, start := startServer(t)
	dataDir := srv.DataDirForTests()
	if err := srv.AttachVolume("wp_esc", volume); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSiteDatabase(ctx, "wp_esc", "wp_esc", "wp_esc", "pw-esc"); err != nil {
		t.Fatal(err)
	}
	if err := srv.StageDatabase(ctx, "wp_esc", "wp_esc_i", "wp_esc"); err != nil {
		t.Fatal(err)
	}
	// A site of an older agent: its grant names its database unescaped,
	// and it was limited.
	if err := srv.CreateSiteDatabase(ctx, "", "wp_old", "wp_old", "pw-old"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"REVOKE ALL PRIVILEGES ON `wp\\_old`.* FROM 'wp_old'@'127.0.0.1'",
		"REVOKE ALL PRIVILEGES ON `wp_old`.* FROM 'wp_old'@'127.0.0.1'",
		"GRANT SELECT, DELETE, DROP, LOCK TABLES, SHOW VIEW ON `wp_old`.* TO 'wp_old'@'127.0.0.1'"} {
		if _, err := srv.Root().ExecContext(ctx, q); err != nil && !strings.Contains(err.Error(), "1141") {
			t.Fatalf("%s: %v", q, err)
		}
	}
	srv.Close()
	srv, err := start()
	if err != nil {
		t.Fatal("restart:", err)
	}
	defer srv.Close()
	old := openAs(t, srv, "wp_old", "pw-old", "wp_old")
	if _, err := old.ExecContext(ctx, "CREATE TABLE t (id int)"); err == nil || !strings.Contains(err.Error(), "denied") {
		t.Errorf("the older site, limited, after its grant was rewritten: %v", err)
	}
	if err := srv.LimitWrites(ctx, "wp_old", false); err != nil {
		t.Fatal(err)
	}
	// Its pooled connection reads until it reconnects: a new one writes.
	old = openAs(t, srv, "wp_old", "pw-old", "wp_old")
	if _, err := old.ExecContext(ctx, "CREATE TABLE t (id int)"); err != nil {
		t.Errorf("the older site given its writes back: %v", err)
	}
	if _, err := old.ExecContext(ctx, "CREATE DATABASE wpXold"); err == nil {
		t.Error("the older site's account made a database of the node after the restart")
	}

	site := openAs(t, srv, "wp_esc", "pw-esc", "")
	site.SetMaxOpenConns(1)
	for _, q := range []string{"CREATE DATABASE `wp-esc`", "CREATE DATABASE wpXesc", "CREATE DATABASE `wp-esc-i`"} {
		if _, err := site.ExecContext(ctx, q); err == nil {
			t.Errorf("the site's account made a database of the node: %s", q)
		}
	}
	for _, n := range []string{"wp@002desc", "wpXesc", "wp@002desc@002di", "wpXold"} {
		if _, err := os.Lstat(filepath.Join(dataDir, n)); err == nil {
			t.Errorf("%s is in the server's data directory", n)
		}
	}
	for _, db := range []string{"wp_esc", "wp_esc_i"} {
		if _, err := site.ExecContext(ctx, "CREATE TABLE "+db+".t (id int PRIMARY KEY, b longblob)"); err != nil {
			t.Fatalf("a table in %s: %v", db, err)
		}
	}
	if err := srv.LimitWrites(ctx, "wp_esc", true); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{"wp_esc", "wp_esc_i"} {
		if _, err := site.ExecContext(ctx, "INSERT INTO "+db+".t VALUES (1, 'x')"); err == nil || !strings.Contains(err.Error(), "denied") {
			t.Fatalf("a write to %s while limited: %v", db, err)
		}
		if _, err := site.ExecContext(ctx, "DELETE FROM "+db+".t"); err != nil {
			t.Fatalf("making room in %s while limited: %v", db, err)
		}
	}
	if err := srv.LimitWrites(ctx, "wp_esc", false); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{"wp_esc", "wp_esc_i"} {
		if _, err := site.ExecContext(ctx, "INSERT INTO "+db+".t VALUES (1, 'x')"); err != nil {
			t.Fatalf("a write to %s after the limit: %v", db, err)
		}
	}
	// The staging grant goes with the staging database.
	if err := srv.DropStaging(ctx, "wp_esc_i", "wp_esc"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := srv.Root().QueryRowContext(ctx, "SELECT COUNT(*) FROM mysql.db WHERE User = 'wp_esc'").Scan(&n); err != nil || n != 2 {
		t.Fatalf("grants of the site after its staging went: %d %v", n, err)
	}
}

// TestSiteCannotMoveItsDatabaseOffItsDisk: a site's account may drop its
// own database (its DROP privilege is DROP TABLE's too), but that must
// not let it make the database again as a plain directory of the
// server's data directory (MariaDB removes the link along with the
// database), where its tables would fill the node's disk, bounded by
// nothing; nor its import's staging database. The server starts again
// after the attempt, and the agent still drops everything.
func TestSiteCannotMoveItsDatabaseOffItsDisk(t *testing.T) {
	hosttest.Root(t)
	ctx := context.Background()
	_, volume := siteDisk(t, 32, 32)
	srv, start := startServer(t)
	dataDir := srv.DataDirForTests()
	if err := srv.AttachVolume("wp_mv", volume); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSiteDatabase(ctx, "wp_mv", "wp_mv", "wp_mv", "pw-mv"); err != nil {
		t.Fatal(err)
	}
	if err := srv.StageDatabase(ctx, "wp_mv", "wp_mv_i", "wp_mv"); err != nil {
		t.Fatal(err)
	}
	site := openAs(t, srv, "wp_mv", "pw-mv", "")
	site.SetMaxOpenConns(1)
	for _, db := range []string{"wp_mv", "wp_mv_i"} {
		if _, err := site.ExecContext(ctx, "CREATE TABLE "+db+".before (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		_, dropErr := site.ExecContext(ctx, "DROP DATABASE "+db)
		_, createErr := site.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+db)
		t.Logf("the site's DROP DATABASE %s: %v; its CREATE: %v", db, dropErr, createErr)
		if _, err := site.ExecContext(ctx, "CREATE TABLE "+db+".t (id int PRIMARY KEY, b longblob)"); err != nil {
			t.Fatalf("a table in %s after the site's DROP: %v", db, err)
		}
		if target, err := os.Readlink(filepath.Join(dataDir, db)); err != nil || target != "/volumes/wp_mv/"+db {
			t.Errorf("after the site dropped %s and made it again, its entry: %q %v", db, target, err)
		}
		if _, err := os.Stat(filepath.Join(volume, db, "t.ibd")); err != nil {
			t.Errorf("the table of %s is not in the volume: %v", db, err)
		}
	}
	if t.Failed() {
		return
	}
	if _, err := site.ExecContext(ctx, "INSERT INTO wp_mv.t VALUES (1, 'x')"); err != nil {
		t.Fatal(err)
	}
	// The server starts again on it (nothing of the refused DROP is
	// done again), and the agent still drops it all.
	srv.Close()
	srv, err := start()
	if err != nil {
		t.Fatal("restart:", err)
	}
	defer srv.Close()
	var n int
	if err := openAs(t, srv, "wp_mv", "pw-mv", "wp_mv").QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the restart: %d %v", n, err)
	}
	if err := srv.DropStaging(ctx, "wp_mv_i", "wp_mv"); err != nil {
		t.Fatal(err)
	}
	if err := srv.DropSiteDatabase(ctx, "wp_mv", "wp_mv"); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{"wp_mv", "wp_mv_i"} {
		if _, err := os.Lstat(filepath.Join(dataDir, db)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the entry of %s is left: %v", db, err)
		}
		if ok, _, err := srv.Exists(ctx, db, "nobody"); err != nil || ok {
			t.Errorf("%s still exists: %v", db, err)
		}
	}
	if ents, err := os.ReadDir(volume); err != nil || len(ents) > 0 {
		t.Fatalf("the volume holds %v (%v)", ents, err)
	}
	if err := srv.DetachVolume(ctx, "wp_mv"); err != nil {
		t.Fatal(err)
	}
}
