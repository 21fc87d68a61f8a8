package mariadb_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/runtime"
)

// startServer runs a MariaDB in a namespace of the test's own on the
// test binary's containerd, closed when the test ends; start starts it
// again on the same data (Start's re-attach).
func startServer(t *testing.T) (srv *mariadb.Server, start func(change ...func(*mariadb.Config)) (*mariadb.Server, error)) {
	t.Helper()
	socket, dir := agenttest.Containerd(t)
	rt := agenttest.Runtime(t, socket)
	ctx := context.Background()
	img, err := agenttest.Catalog(t).MariaDB(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	start = func(change ...func(*mariadb.Config)) (*mariadb.Server, error) {
		cfg := mariadb.Config{Image: img, Dir: filepath.Join(dir, "mariadb"), LogWriter: agenttest.LogWriter(t),
			SystemMaxMB: 256, TempMaxMB: 64}
		for _, c := range change {
			c(&cfg)
		}
		return mariadb.Start(ctx, rt, cfg)
	}
	// Registered before the start: a start that fails (its port taken)
	// has mounted its volumes and temporary disk already.
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "mariadb", "mariadb.log"))
			t.Logf("the server's log:\n%s", b[max(0, len(b)-8<<10):])
		}
		if srv != nil {
			srv.Close()
		}
		// The server goes before what it mounted (its volumes, its
		// temporary disk).
		if err := rt.Remove(ctx, mariadb.ContainerID); err != nil {
			t.Error(err)
		}
		if err := mariadb.Unmount(filepath.Join(dir, "mariadb")); err != nil {
			t.Error(err)
		}
	})
	if srv, err = start(); err != nil {
		t.Fatal(err)
	}
	runtimes.Store(srv, rt)
	return srv, start
}

// runtimes holds the runtime each startServer's server runs on.
var runtimes sync.Map // *mariadb.Server → *runtime.Runtime

// runtimeOf is the runtime srv runs on.
func runtimeOf(srv *mariadb.Server) *runtime.Runtime {
	rt, _ := runtimes.Load(srv)
	return rt.(*runtime.Runtime)
}

func TestSiteDatabases(t *testing.T) {
	ctx := context.Background()
	srv, start := startServer(t)
	if err := srv.CreateSiteDatabase(ctx, "", "wp_a", "wp_a", "pw-a"); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSiteDatabase(ctx, "", "wp_a", "wp_a", "pw-a2"); err != nil {
		t.Fatal("repeat:", err)
	}
	if err := srv.CreateSiteDatabase(ctx, "", "wp_b", "wp_b", "pw-b"); err != nil {
		t.Fatal(err)
	}
	open := func(user, pw, db string) *sql.DB {
		c := mysql.NewConfig()
		c.User, c.Passwd, c.Net, c.Addr, c.DBName = user, pw, "tcp", srv.Addr(), db
		d, err := sql.Open("mysql", c.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	a := open("wp_a", "pw-a2", "wp_a")
	if _, err := a.ExecContext(ctx, "CREATE TABLE t (x int)"); err != nil {
		t.Fatal(err)
	}
	// wp_a cannot reach wp_b, and the old password no longer works.
	if _, err := a.ExecContext(ctx, "SELECT * FROM wp_b.t"); err == nil {
		t.Fatal("wp_a reached wp_b")
	}
	if err := open("wp_a", "pw-a", "wp_a").PingContext(ctx); err == nil {
		t.Fatal("old password accepted")
	}
	for _, bad := range []string{"x; DROP DATABASE mysql", "Upper", ""} {
		if err := srv.CreateSiteDatabase(ctx, "", bad, "u", "p"); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if err := srv.DropSiteDatabase(ctx, "wp_a", "wp_a"); err != nil {
		t.Fatal(err)
	}
	if err := srv.DropSiteDatabase(ctx, "wp_a", "wp_a"); err != nil {
		t.Fatal("second drop:", err)
	}
	if db, user, err := srv.Exists(ctx, "wp_a", "wp_a"); err != nil || db || user {
		t.Fatalf("left behind: db=%v user=%v err=%v", db, user, err)
	}
	if db, user, _ := srv.Exists(ctx, "wp_b", "wp_b"); !db || !user {
		t.Fatal("wp_b gone too")
	}
	// A second Start re-attaches to the running server.
	again, err := start()
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
}

// TestServerBounds: the server runs with what bounds the sites' shared
// use of the node's disk (no binary log, no symbolic links, InnoDB
// only, the system and temporary tablespaces capped, its tmpdir the
// temporary disk); a start with other bounds replaces the container (an
// older agent's, say) and keeps the data.
func TestServerBounds(t *testing.T) {
	ctx := context.Background()
	srv, start := startServer(t)
	if err := srv.CreateSiteDatabase(ctx, "", "wp_kept", "wp_kept", "pw"); err != nil {
		t.Fatal(err)
	}
	vars := func(s *mariadb.Server) map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, v := range []string{"log_bin", "have_symlink", "enforce_storage_engine", "innodb_file_per_table", "innodb_data_file_path",
			"innodb_temp_data_file_path", "tmpdir", "tmp_disk_table_size", "sql_mode", "innodb_undo_tablespaces"} {
			var val sql.NullString
			if err := s.Root().QueryRowContext(ctx, "SELECT @@GLOBAL."+v).Scan(&val); err != nil {
				t.Fatalf("%s: %v", v, err)
			}
			out[v] = val.String
		}
		return out
	}
	got := vars(srv)
	for k, want := range map[string]string{"log_bin": "0", "have_symlink": "DISABLED", "enforce_storage_engine": "InnoDB",
		"innodb_file_per_table": "1", "innodb_data_file_path": "ibdata1:12M:autoextend:max:256M",
		"innodb_temp_data_file_path": "ibtmp1:12M:autoextend:max:64M", "tmpdir": "/tmp", "tmp_disk_table_size": "67108864",
		"innodb_undo_tablespaces": "0"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	if strings.Contains(got["sql_mode"], "NO_ENGINE_SUBSTITUTION") {
		t.Errorf("sql_mode %q: a CREATE TABLE naming another engine would fail instead of getting InnoDB", got["sql_mode"])
	}
	again, err := start(func(c *mariadb.Config) { c.SystemMaxMB = 300 })
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if v := vars(again)["innodb_data_file_path"]; v != "ibdata1:12M:autoextend:max:300M" {
		t.Fatalf("after a start with other bounds: %s", v)
	}
	if db, user, err := again.Exists(ctx, "wp_kept", "wp_kept"); err != nil || !db || !user {
		t.Fatalf("the data after the container was replaced: %v %v %v", db, user, err)
	}
}
