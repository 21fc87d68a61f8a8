package mariadb_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// TestDumpAndLoad: a database a tenant's own user made (hostile names,
// every byte value, NULLs, zero ids and dates, bits, JSON, a generated
// column, multibyte text and rows past one INSERT's batch) is dumped and
// loaded into another database, table for table the same; a dump that
// holds anything else is refused.
func TestDumpAndLoad(t *testing.T) {
	ctx := context.Background()
	srv, _ := startServer(t)
	for _, db := range []string{"wp_dsrc", "wp_ddst"} {
		if err := srv.CreateSiteDatabase(ctx, "", db, db, "pw-"+db); err != nil {
			t.Fatal(err)
		}
	}
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = "wp_dsrc", "pw-wp_dsrc", "tcp", srv.Addr(), "wp_dsrc"
	src, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	big := strings.Repeat("x'\\\n", 300_000) // 1.2 MB: past one INSERT's batch
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{sql: "CREATE TABLE `evil``; DROP DATABASE wp_dsrc; --` (id int PRIMARY KEY AUTO_INCREMENT, b longblob, t text CHARACTER SET utf8mb4, " +
			"d datetime, n decimal(10,2), f bit(3), j json, g int AS (id * 2) VIRTUAL, `c``d` varchar(20) COMMENT 'a\nb')"},
		{sql: "SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO'"},
		{sql: "INSERT INTO `evil``; DROP DATABASE wp_dsrc; --` (id, b, t, d, n, f, j, `c``d`) VALUES (0, ?, ?, '0000-00-00 00:00:00', -12.5, b'101', ?, ?)",
			args: []any{every, "héllo 🎉 ' \" \\ \x00 end", `{"u":"http:\/\/x"}`, "k"}},
		{sql: "INSERT INTO `evil``; DROP DATABASE wp_dsrc; --` (id, b, t) VALUES (7, NULL, ?), (8, '', NULL)", args: []any{big}},
		{sql: "CREATE TABLE wp_options (option_id bigint unsigned PRIMARY KEY AUTO_INCREMENT, option_name varchar(191) UNIQUE, option_value longtext)"},
		{sql: "INSERT INTO wp_options (option_name, option_value) VALUES ('a', 'b'), ('c', ?)", args: []any{big}},
		{sql: "CREATE TABLE empty_one (v text)"},
	} {
		if _, err := src.ExecContext(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	var dump bytes.Buffer
	if err := srv.Dump(ctx, "wp_dsrc", &dump); err != nil {
		t.Fatal(err)
	}
	if err := srv.Load(ctx, "wp_ddst", bytes.NewReader(dump.Bytes())); err != nil {
		t.Fatal(err)
	}
	root := srv.Root()
	for _, table := range []string{"evil`; DROP DATABASE wp_dsrc; --", "wp_options", "empty_one"} {
		q := "`" + strings.ReplaceAll(table, "`", "``") + "`"
		var n1, n2, c1, c2 string
		if err := root.QueryRowContext(ctx, "SHOW CREATE TABLE wp_dsrc."+q).Scan(&n1, &c1); err != nil {
			t.Fatal(err)
		}
		if err := root.QueryRowContext(ctx, "SHOW CREATE TABLE wp_ddst."+q).Scan(&n2, &c2); err != nil {
			t.Fatal(err)
		}
		if c1 != c2 {
			t.Fatalf("%s: structure\n%s\n%s", table, c1, c2)
		}
		var s1, s2 sql.NullString
		var t1, t2 string
		if err := root.QueryRowContext(ctx, "CHECKSUM TABLE wp_dsrc."+q+" EXTENDED").Scan(&t1, &s1); err != nil {
			t.Fatal(err)
		}
		if err := root.QueryRowContext(ctx, "CHECKSUM TABLE wp_ddst."+q+" EXTENDED").Scan(&t2, &s2); err != nil {
			t.Fatal(err)
		}
		if s1 != s2 || !s1.Valid {
			t.Fatalf("%s: checksum %v, loaded %v", table, s1, s2)
		}
	}
	var b []byte
	if err := root.QueryRowContext(ctx, "SELECT b FROM wp_ddst.`evil``; DROP DATABASE wp_dsrc; --` WHERE id = 0").Scan(&b); err != nil || !bytes.Equal(b, every) {
		t.Fatalf("every byte value: %v %x", err, b)
	}

	rec := func(stmt string) string { return fmt.Sprintf("%d:%s\n", len(stmt), stmt) }
	for _, bad := range []struct{ name, dump, why string }{
		{"another statement", rec("DROP DATABASE wp_dsrc"), "not a statement"},
		{"a table in a directory", rec("CREATE TABLE `x` (a int) ENGINE=InnoDB DATA DIRECTORY='/tmp'"), "directory of its own"},
		{"two statements in one", rec("INSERT INTO `x` VALUES (1); DROP DATABASE wp_dsrc"), "1064"},
		{"truncated", "100:INSERT INTO `x` VALUES (1)\n", "truncated"},
		{"no length", "INSERT INTO `x` VALUES (1)\n", "bad statement length"},
		{"too long", "99999999999:x\n", "bad statement length"},
	} {
		if err := srv.CreateSiteDatabase(ctx, "", "wp_dbad", "wp_dbad", "pw"); err != nil {
			t.Fatal(err)
		}
		if err := srv.Load(ctx, "wp_dbad", strings.NewReader(bad.dump)); err == nil || !strings.Contains(err.Error(), bad.why) {
			t.Fatalf("%s: %v, want %q", bad.name, err, bad.why)
		}
		if err := srv.DropSiteDatabase(ctx, "wp_dbad", "wp_dbad"); err != nil {
			t.Fatal(err)
		}
	}
	var exists int
	if err := root.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'wp_dsrc'").Scan(&exists); err != nil || exists != 1 {
		t.Fatalf("the source database: %d %v", exists, err)
	}
}
