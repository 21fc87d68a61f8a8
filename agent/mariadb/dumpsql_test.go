package mariadb_test

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/dumpload"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/internal/urlrewrite"
)

// TestDumpSQL: a database a tenant's own user made (hostile names, every
// byte value, latin1 text, NULLs, zero ids and dates, bits, JSON, a
// generated column, timestamps, rows past one INSERT's batch) is dumped
// as SQL text over the tenant's own account while writes go on, and
// loaded by an import's loader (agent/dumpload, URLs moving) into another
// database: table for table the same as at the dump's moment, the writes
// made after it absent, and the URLs moved with PHP-serialized lengths
// kept right.
func TestDumpSQL(t *testing.T) {
	ctx := context.Background()
	srv, _ := startServer(t)
	open := func(db string) *sql.DB {
		t.Helper()
		if err := srv.CreateSiteDatabase(ctx, "", db, db, "pw-"+db); err != nil {
			t.Fatal(err)
		}
		p, err := sql.Open("mysql", dumpload.DSN(db, "pw-"+db, srv.Addr(), db))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	src, dst := open("wp_qsrc"), open("wp_qdst")
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	big := strings.Repeat("x'\\\n;", 300_000) // 1.5 MB: past one INSERT's batch
	const evil = "`evil``; DROP DATABASE wp_qsrc; --`"
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{sql: "CREATE TABLE " + evil + " (id int PRIMARY KEY AUTO_INCREMENT, b longblob, t text CHARACTER SET utf8mb4, " +
			"l varchar(40) CHARACTER SET latin1, d datetime, ts timestamp NULL, n decimal(10,2), f bit(3), j json, g int AS (id * 2) VIRTUAL, " +
			"`c``d` varchar(20) COMMENT 'a\nb;')"},
		{sql: "SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO'"},
		{sql: "INSERT INTO " + evil + " (id, b, t, l, d, ts, n, f, j, `c``d`) VALUES (0, ?, ?, ?, '0000-00-00 00:00:00', '2024-02-03 04:05:06', -12.5, b'101', ?, ?)",
			args: []any{every, "héllo 🎉 ' \" \\ \x00 end; -- not a comment", "café ñ", `{"u":"http:\/\/old.example"}`, "k"}},
		{sql: "INSERT INTO " + evil + " (id, b, t) VALUES (7, NULL, ?), (8, '', NULL)", args: []any{big}},
		{sql: "CREATE TABLE wp_options (option_id bigint unsigned PRIMARY KEY AUTO_INCREMENT, option_name varchar(191) UNIQUE, option_value longtext)"},
		{sql: "INSERT INTO wp_options (option_name, option_value) VALUES ('siteurl', 'http://old.example'), ('links', ?), ('big', ?)",
			args: []any{`a:1:{s:4:"home";s:23:"http://old.example/shop";}`, big}},
		{sql: "CREATE TABLE empty_one (v text)"},
		{sql: "CREATE TABLE a_first (v int)"},
		{sql: "INSERT INTO a_first VALUES (1)"},
	} {
		if _, err := src.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	root := srv.Root()
	checksum := func(db, table string) string {
		t.Helper()
		var name string
		var sum sql.NullString
		if err := root.QueryRowContext(ctx, "CHECKSUM TABLE "+db+"."+table+" EXTENDED").Scan(&name, &sum); err != nil || !sum.Valid {
			t.Fatalf("checksum %s.%s: %v", db, table, err)
		}
		return sum.String
	}
	// What the dump must hold: the tables as they are now.
	want := map[string]string{}
	for _, table := range []string{evil, "empty_one"} {
		want[table] = checksum("wp_qsrc", table)
	}

	conn, err := src.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var dump bytes.Buffer
	// The first write reaches the writer while a later table is dumped
	// (writes are buffered by the MiB): the tables written by then can
	// have their structure changed by the site, no lock held on them.
	altered := "not tried"
	out := writerFunc(func(p []byte) (int, error) {
		if altered == "not tried" {
			altered = "ok"
			c, err := src.Conn(ctx)
			if err == nil {
				defer c.Close()
				_, err = c.ExecContext(ctx, "SET SESSION lock_wait_timeout = 3")
			}
			if err == nil {
				_, err = c.ExecContext(ctx, "ALTER TABLE a_first ADD COLUMN w int")
			}
			if err != nil {
				altered = err.Error()
			}
		}
		return dump.Write(p)
	})
	before := time.Now()
	var during time.Time
	taken, err := mariadb.DumpSQL(ctx, conn, func() error {
		during = time.Now()
		// Writes after the moment: none of them is in the dump.
		for _, q := range []string{"INSERT INTO " + evil + " (id, t) VALUES (99, 'later')", "UPDATE wp_options SET option_value = 'later' WHERE option_name = 'siteurl'",
			"DELETE FROM " + evil + " WHERE id = 8"} {
			if _, err := src.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		return nil
	}, out)
	if err != nil {
		t.Fatal(err)
	}
	if altered != "ok" {
		t.Fatalf("a table already dumped stayed locked: %s", altered)
	}
	if taken.Before(before) || taken.After(during) {
		t.Fatalf("taken at %s, not between %s and %s", taken, before, during)
	}
	if !strings.HasPrefix(dump.String(), "-- sandboxd: database wp_qsrc as of ") {
		t.Fatalf("dump starts %.200q", dump.String())
	}

	rw, err := urlrewrite.New("http://old.example", "http://new.example")
	if err != nil {
		t.Fatal(err)
	}
	dconn, err := dst.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dconn.Close()
	st, err := dumpload.Load(ctx, dconn, bytes.NewReader(dump.Bytes()), dumpload.Options{Rewrite: rw.Value, RewriteNeedle: rw.OldHost()})
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 0 || st.Rewritten != 3 {
		t.Fatalf("load: %+v", st)
	}
	for table, sum := range want {
		if table == evil {
			continue // its JSON held the old URL
		}
		if got := checksum("wp_qdst", table); got != sum {
			t.Fatalf("%s: checksum %s, want %s", table, got, sum)
		}
	}
	var b []byte
	var l, ts, j string
	if err := root.QueryRowContext(ctx, "SELECT b, l, ts, j FROM wp_qdst."+evil+" WHERE id = 0").Scan(&b, &l, &ts, &j); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, every) || l != "café ñ" || ts != "2024-02-03 04:05:06" || j != `{"u":"http:\/\/new.example"}` {
		t.Fatalf("row 0: %x %q %q %q", b, l, ts, j)
	}
	var n int
	if err := root.QueryRowContext(ctx, "SELECT COUNT(*) FROM wp_qdst."+evil+" WHERE id IN (7, 8) AND g = id * 2").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows 7 and 8 (one deleted after the moment): %d %v", n, err)
	}
	if err := root.QueryRowContext(ctx, "SELECT COUNT(*) FROM wp_qdst."+evil+" WHERE id = 99").Scan(&n); err != nil || n != 0 {
		t.Fatalf("a row written after the moment: %d %v", n, err)
	}
	for name, v := range map[string]string{"siteurl": "http://new.example", "links": `a:1:{s:4:"home";s:23:"http://new.example/shop";}`, "big": big} {
		var got string
		if err := root.QueryRowContext(ctx, "SELECT option_value FROM wp_qdst.wp_options WHERE option_name = ?", name).Scan(&got); err != nil || got != v {
			t.Fatalf("option %s: %.100q %v", name, got, err)
		}
	}
	var structure [2]string
	for i, db := range []string{"wp_qsrc", "wp_qdst"} {
		var name string
		if err := root.QueryRowContext(ctx, "SHOW CREATE TABLE "+db+"."+evil).Scan(&name, &structure[i]); err != nil {
			t.Fatal(err)
		}
	}
	if structure[0] != structure[1] {
		t.Fatalf("structure\n%s\n%s", structure[0], structure[1])
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
