package mariadb_test

import (
	"context"
	"testing"
	"time"
)

// TestOneSiteCannotFillTheSharedUndo: the undo log every site shares (in
// the system tablespace, capped at SystemMaxMB) must not be one site's to
// fill. A site that updates one 7 KB row over and over in one open
// transaction writes no more than that row on its own disk (so its plan
// and the guard see nothing), but fills the shared undo to its cap in
// seconds; while it keeps that transaction (or just a read view) open,
// nothing can be purged and every other site's writes fail ("The table
// … is full"). Another site must still write.
func TestOneSiteCannotFillTheSharedUndo(t *testing.T) {
	ctx := context.Background()
	_, volume := siteDisk(t, 64, 64)
	srv, _ := startServer(t) // SystemMaxMB 256
	if err := srv.AttachVolume("wp_undo", volume); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSiteDatabase(ctx, "wp_undo", "wp_undo", "wp_undo", "pw"); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateSiteDatabase(ctx, "", "wp_other", "wp_other", "pw-other"); err != nil {
		t.Fatal(err)
	}
	other := openAs(t, srv, "wp_other", "pw-other", "wp_other")
	if _, err := other.ExecContext(ctx, "CREATE TABLE t (id int AUTO_INCREMENT PRIMARY KEY, v varchar(64))"); err != nil {
		t.Fatal(err)
	}
	conn, err := openAs(t, srv, "wp_undo", "pw", "wp_undo").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		"CREATE TABLE u (id int PRIMARY KEY, v varchar(7000))",
		"INSERT INTO u VALUES (1, REPEAT('a', 7000))",
		"CREATE PROCEDURE churn(n int) BEGIN DECLARE i int DEFAULT 0; WHILE i < n DO " +
			"UPDATE u SET v = REPEAT(CHAR(65 + i % 26), 7000) WHERE id = 1; SET i = i + 1; END WHILE; END",
		"START TRANSACTION",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_, churnErr := conn.ExecContext(ctx, "CALL churn(60000)")
	t.Logf("the site's churn: %v", churnErr)
	// The site keeps its connection (and its transaction) open. Another
	// site writes, at the latest once the server has dealt with it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := other.ExecContext(ctx, "INSERT INTO t (v) VALUES ('other')")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("another site cannot write while one site holds the shared undo: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
