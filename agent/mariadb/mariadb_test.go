package mariadb_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/mariadb"
)

// startServer runs a MariaDB in a namespace of the test's own on the
// test binary's containerd, closed when the test ends; start starts it
// again on the same data (Start's re-attach).
func startServer(t *testing.T) (srv *mariadb.Server, start func() (*mariadb.Server, error)) {
	t.Helper()
	socket, dir := agenttest.Containerd(t)
	rt := agenttest.Runtime(t, socket)
	ctx := context.Background()
	img, err := agenttest.Catalog(t).MariaDB(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	start = func() (*mariadb.Server, error) {
		return mariadb.Start(ctx, rt, mariadb.Config{Image: img, Dir: filepath.Join(dir, "mariadb"), LogWriter: agenttest.LogWriter(t),
			SystemMaxMB: 256, TempMaxMB: 64})
	}
	if srv, err = start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "mariadb", "mariadb.log"))
			t.Logf("the server's log:\n%s", b[max(0, len(b)-8<<10):])
		}
		srv.Close()
		// The server goes before what it mounted (its volumes, its
		// temporary disk).
		if err := rt.Remove(ctx, mariadb.ContainerID); err != nil {
			t.Error(err)
		}
		if err := mariadb.Unmount(filepath.Join(dir, "mariadb")); err != nil {
			t.Error(err)
		}
	})
	return srv, start
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
