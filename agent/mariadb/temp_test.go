package mariadb_test

import (
	"context"
	"testing"
)

// TestSiteCannotCrashTheServerWithATemporaryTable: a site's explicit
// temporary tables are InnoDB's (the server enforces InnoDB), in the
// temporary tablespace every site shares, capped at TempMaxMB. A site
// filling one past the cap in one statement made InnoDB abort the whole
// server in that statement's rollback ("[FATAL] InnoDB: Error (Out of
// disk space) in rollback"), every site's database down until the
// agent starts it again. Site accounts make no temporary tables; the
// server stays up, and another site writes.
func TestSiteCannotCrashTheServerWithATemporaryTable(t *testing.T) {
	ctx := context.Background()
	srv, start := startServer(t) // TempMaxMB 64
	for _, db := range []string{"wp_tmp", "wp_other"} {
		if err := srv.CreateSiteDatabase(ctx, "", db, db, "pw"); err != nil {
			t.Fatal(err)
		}
	}
	// A site of an older agent, whose grant has the privilege.
	if err := srv.CreateSiteDatabase(ctx, "", "wp_old", "wp_old", "pw"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Root().ExecContext(ctx, "GRANT CREATE TEMPORARY TABLES ON `wp\\_old`.* TO 'wp_old'@'127.0.0.1'"); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	srv, err := start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	other := openAs(t, srv, "wp_other", "pw", "wp_other")
	if _, err := other.ExecContext(ctx, "CREATE TABLE t (id int AUTO_INCREMENT PRIMARY KEY, v varchar(64))"); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{"wp_tmp", "wp_old"} {
		conn, err := openAs(t, srv, db, "pw", db).Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, createErr := conn.ExecContext(ctx, "CREATE TEMPORARY TABLE tt (id int AUTO_INCREMENT PRIMARY KEY, b longblob)")
		if createErr == nil {
			// 40 values of 4 MiB, made by the query itself: 160 MiB.
			_, err := conn.ExecContext(ctx, "INSERT INTO tt (b) WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 40) "+
				"SELECT REPEAT('x', 4194304) FROM r")
			t.Errorf("%s made a temporary table and filled it: %v", db, err)
		}
		conn.Close()
		var one int
		if err := srv.Root().QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("the server, after %s's temporary table: %v", db, err)
		}
		if _, err := other.ExecContext(ctx, "INSERT INTO t (v) VALUES ('still here')"); err != nil {
			t.Fatalf("another site, after %s's temporary table: %v", db, err)
		}
	}
}
