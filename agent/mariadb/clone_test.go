package mariadb_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/internal/urlrewrite"
)

func ser(s string) string { return "s:" + strconv.Itoa(len(s)) + `:"` + s + `";` }

// TestCopyAndRewrite: a template's database, made by the site's own user
// (tables and columns named to break SQL), is copied inside MariaDB and
// the copy moved to a new URL: serialized, JSON and plain values follow,
// composite keys work, the source is untouched, and a table without a
// primary key is left alone rather than guessed at.
func TestCopyAndRewrite(t *testing.T) {
	ctx := context.Background()
	srv, _ := startServer(t)
	for _, db := range []string{"wp_src", "wp_dst"} {
		if err := srv.CreateSiteDatabase(ctx, "", db, db, "pw-"+db); err != nil {
			t.Fatal(err)
		}
	}
	open := func(db string) *sql.DB {
		c := mysql.NewConfig()
		c.User, c.Passwd, c.Net, c.Addr, c.DBName = db, "pw-"+db, "tcp", srv.Addr(), db
		d, err := sql.Open("mysql", c.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	const oldURL, newURL = "http://tpl.localhost:8081", "http://clone-1.localhost:8081"
	serialized := "a:2:{" + ser("header") + ser(oldURL+"/h.jpg") + ser("n") + "i:3;}"
	src := open("wp_src")
	for _, q := range []string{
		"CREATE TABLE wp_options (option_id bigint PRIMARY KEY AUTO_INCREMENT, option_name varchar(191), option_value longtext)",
		"CREATE TABLE wp_posts (ID bigint PRIMARY KEY, post_content longtext, guid varchar(255), post_title text)",
		"CREATE TABLE `evil``; DROP DATABASE wp_src; --` (a int, b varchar(20), `c``d` text, PRIMARY KEY (a, b))",
		"CREATE TABLE nokey (v text)",
	} {
		if _, err := src.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	ins := []struct {
		q    string
		args []any
	}{
		{"INSERT INTO wp_options (option_name, option_value) VALUES (?, ?), (?, ?), (?, ?), (?, ?)",
			[]any{"siteurl", oldURL, "theme_mods", serialized, "json", `{"u":"http:\/\/tpl.localhost:8081\/x"}`, "other", "http://tpl.localhost:80812/"}},
		{"INSERT INTO wp_posts VALUES (1, ?, ?, ?)", []any{`<a href="` + oldURL + `/about">About</a>`, oldURL + "/?p=1", "Hello"}},
		{"INSERT INTO `evil``; DROP DATABASE wp_src; --` VALUES (1, 'k', ?)", []any{"//tpl.localhost:8081/a.css"}},
		{"INSERT INTO nokey VALUES (?)", []any{oldURL}},
	}
	for _, i := range ins {
		if _, err := src.ExecContext(ctx, i.q, i.args...); err != nil {
			t.Fatalf("%s: %v", i.q, err)
		}
	}

	if err := srv.CopyDatabase(ctx, "wp_src", "wp_dst"); err != nil {
		t.Fatal(err)
	}
	r, err := urlrewrite.New(oldURL, newURL)
	if err != nil {
		t.Fatal(err)
	}
	st, err := srv.RewriteURLs(ctx, "wp_dst", r)
	if err != nil {
		t.Fatal(err)
	}
	// Three options, the post (its content and guid: one row), the
	// hostile table's row; not the lookalike host, not the keyless table.
	if st.Rows != 5 || st.Skipped != 0 {
		t.Errorf("stats %+v, want 5 rows", st)
	}
	dst := open("wp_dst")
	get := func(d *sql.DB, q string) string {
		t.Helper()
		var v string
		if err := d.QueryRowContext(ctx, q).Scan(&v); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return v
	}
	want := map[string]string{
		"SELECT option_value FROM wp_options WHERE option_name = 'siteurl'":    newURL,
		"SELECT option_value FROM wp_options WHERE option_name = 'theme_mods'": "a:2:{" + ser("header") + ser(newURL+"/h.jpg") + ser("n") + "i:3;}",
		"SELECT option_value FROM wp_options WHERE option_name = 'json'":       `{"u":"http:\/\/clone-1.localhost:8081\/x"}`,
		"SELECT option_value FROM wp_options WHERE option_name = 'other'":      "http://tpl.localhost:80812/",
		"SELECT post_content FROM wp_posts":                                    `<a href="` + newURL + `/about">About</a>`,
		"SELECT guid FROM wp_posts":                                            newURL + "/?p=1",
		"SELECT `c``d` FROM `evil``; DROP DATABASE wp_src; --`":                "//clone-1.localhost:8081/a.css",
		"SELECT v FROM nokey":                                                  oldURL,
	}
	for q, w := range want {
		if got := get(dst, q); got != w {
			t.Errorf("%s:\n got %s\nwant %s", q, got, w)
		}
	}
	if got := get(src, "SELECT option_value FROM wp_options WHERE option_name = 'theme_mods'"); got != serialized {
		t.Errorf("the source changed: %s", got)
	}
	if got := get(dst, "SELECT COUNT(*) FROM wp_options"); got != "4" {
		t.Errorf("%s options copied", got)
	}
	// The copy keeps AUTO_INCREMENT going past the copied rows.
	if _, err := dst.ExecContext(ctx, "INSERT INTO wp_options (option_name, option_value) VALUES ('new', 'x')"); err != nil {
		t.Fatal(err)
	}
	if err := srv.CopyDatabase(ctx, "wp_src", "bad name"); err == nil {
		t.Fatal("a bad database name was accepted")
	}
}

// TestConcurrentRewrites: more rewrites at once than the server's pool
// has connections all finish (a rewrite that held a cursor while asking
// for a second connection left a dozen of them waiting on each other),
// and a table with more matching rows than one page is rewritten whole.
func TestConcurrentRewrites(t *testing.T) {
	ctx := context.Background()
	srv, _ := startServer(t)
	const n = 12
	const oldURL, newURL = "http://pool-x.localhost", "http://claimed.localhost"
	for i := range n {
		db := fmt.Sprintf("wp_cr%d", i)
		if err := srv.CreateSiteDatabase(ctx, "", db, db, "pw-"+db); err != nil {
			t.Fatal(err)
		}
		c := mysql.NewConfig()
		c.User, c.Passwd, c.Net, c.Addr, c.DBName = db, "pw-"+db, "tcp", srv.Addr(), db
		d, err := sql.Open("mysql", c.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.ExecContext(ctx, "CREATE TABLE wp_posts (ID bigint PRIMARY KEY, guid varchar(255))"); err != nil {
			t.Fatal(err)
		}
		rows := 3
		if i == 0 {
			rows = 1200 // past two pages of keys
		}
		for j := range rows {
			if _, err := d.ExecContext(ctx, "INSERT INTO wp_posts VALUES (?, ?)", j+1, fmt.Sprintf("%s/?p=%d", oldURL, j+1)); err != nil {
				t.Fatal(err)
			}
		}
		d.Close()
	}
	rw, err := urlrewrite.New(oldURL, newURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	stats := make([]mariadb.RewriteStats, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[i], errs[i] = srv.RewriteURLs(ctx, fmt.Sprintf("wp_cr%d", i), rw)
		}()
	}
	wg.Wait()
	for i := range n {
		want := 3
		if i == 0 {
			want = 1200
		}
		if errs[i] != nil || stats[i].Rows != want {
			t.Fatalf("database %d: %d rows, %v; want %d", i, stats[i].Rows, errs[i], want)
		}
	}
	var left int
	if err := srv.Root().QueryRowContext(ctx, "SELECT COUNT(*) FROM wp_cr0.wp_posts WHERE guid LIKE 'http://pool-x%'").Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows left at the old URL (%v)", left, err)
	}
}

// TestDatabaseBytesRightAfterACopy: what a database takes, as a clone's
// room check reads it, is what its files hold even right after it was
// filled (a template is frozen by a copy and may be cloned at once);
// InnoDB's table statistics lag by seconds and said 0 then, so a
// template of any size passed the check of a clone of any plan, and the
// server's own account (which the guard does not limit) copied it onto
// a disk it did not fit.
func TestDatabaseBytesRightAfterACopy(t *testing.T) {
	ctx := context.Background()
	srv, _ := startServer(t)
	for _, db := range []string{"tpl_from", "tpl_to"} {
		if err := srv.CreateSiteDatabase(ctx, "", db, db, "pw"); err != nil {
			t.Fatal(err)
		}
	}
	from := openAs(t, srv, "tpl_from", "pw", "tpl_from")
	if _, err := from.ExecContext(ctx, "CREATE TABLE t (id int AUTO_INCREMENT PRIMARY KEY, b longblob)"); err != nil {
		t.Fatal(err)
	}
	row := strings.Repeat("x", 1<<20)
	for range 24 {
		if _, err := from.ExecContext(ctx, "INSERT INTO t (b) VALUES (?)", row); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := srv.DatabaseBytes(ctx, "tpl_from"); err != nil || n < 24<<20 {
		t.Errorf("right after 24 MiB went in: %d bytes, %v", n, err)
	}
	if err := srv.CopyDatabase(ctx, "tpl_from", "tpl_to"); err != nil {
		t.Fatal(err)
	}
	if n, err := srv.DatabaseBytes(ctx, "tpl_to"); err != nil || n < 24<<20 {
		t.Errorf("right after a copy of 24 MiB: %d bytes, %v", n, err)
	}
}
