package sites_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sites/sitestest"
)

// testRunPHPAndSQL: an agent's PHP runs as the site's user in its
// WordPress, its exit code, output and errors come back, output past the
// bound is cut and says so, and a script that never ends is killed at
// its bound. Its SQL runs in the site's database over the site's own
// account: rows and changed counts come back, too many rows are cut, a
// statement past its bound is stopped, and another site's database (b's)
// or the server's own tables are refused. On the host side, a script
// cannot write the host's files nor reach a listener on the host. (It
// runs in TestCheckpointsAndForks, on its sites: one node set up for both.)
func testRunPHPAndSQL(t *testing.T, ctx context.Context, e *sitestest.Env, a, b *sites.Site) {
	php := func(code string, timeout time.Duration) *sites.PHPResult {
		t.Helper()
		res, err := e.Sites.RunPHP(ctx, a.ID, code, timeout)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := php(`<?php require 'wp-load.php'; echo get_bloginfo('name'), ' ', posix_getuid();`, 0); res.ExitCode != 0 ||
		string(res.Stdout) != a.Name+" "+strconv.Itoa(a.UID) || res.Truncated {
		t.Fatalf("wp-load: %+v %s", res, res.Stderr)
	}
	if res := php(`<?php fwrite(STDERR, "to stderr"); exit(3);`, 0); res.ExitCode != 3 || !strings.Contains(string(res.Stderr), "to stderr") {
		t.Fatalf("exit code: %+v", res)
	}
	if res := php(`<?php no_such_function();`, 0); res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "no_such_function") {
		t.Fatalf("a fatal error: %+v %s", res, res.Stderr)
	}
	if res := php(`<?php for ($i = 0; $i < 3000; $i++) echo str_repeat("x", 1024);`, 0); !res.Truncated || len(res.Stdout) != sites.MaxPHPStdout {
		t.Fatalf("3 MB of output: truncated %v, %d bytes kept", res.Truncated, len(res.Stdout))
	}
	// A child left in the background holding the output open does not
	// keep the run from answering.
	if res := php(`<?php exec('sleep 300 >&2 &'); echo "bg";`, 0); res.ExitCode != 0 || string(res.Stdout) != "bg" {
		t.Fatalf("a background child: %+v", res)
	}
	t0 := time.Now()
	if res := php(`<?php while (true) { usleep(1000); }`, time.Second); !res.TimedOut && res.ExitCode == 0 {
		t.Fatalf("a script that never ends: %+v", res)
	}
	t.Logf("a script that never ends ended after %s", time.Since(t0))
	for _, bad := range []string{"", strings.Repeat("x", sites.MaxCodeBytes+1)} {
		if _, err := e.Sites.RunPHP(ctx, a.ID, bad, 0); !errors.Is(err, sites.ErrInvalid) && !errors.Is(err, sites.ErrPayloadTooLarge) {
			t.Fatalf("code of %d bytes: %v", len(bad), err)
		}
	}
	if _, err := e.Sites.RunPHP(ctx, "site_nothere01", "<?php echo 1;", 0); !errors.Is(err, sites.ErrNotFound) {
		t.Fatalf("an unknown site: %v", err)
	}

	// The host side: no file written, no connection taken.
	mark := "/tmp/sbx-code-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var taken atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			taken.Add(1)
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	res := php(`<?php @file_put_contents('`+mark+`', 'x');
		$gw = '';
		foreach (file('/proc/net/route') as $l) { $f = preg_split('/\s+/', trim($l)); if ($f[1] === '00000000') { $gw = long2ip(hexdec(implode('', array_reverse(str_split($f[2], 2))))); } }
		foreach (array('127.0.0.1', $gw, '`+hostAddr(t)+`') as $h) { $s = @fsockopen($h, `+port+`, $no, $str, 2); echo $h, $s ? ' open' : ' closed', "\n"; }`, 0)
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		os.Remove(mark)
		t.Fatalf("the site's PHP wrote the host's %s", mark)
	}
	if n := taken.Load(); n != 0 {
		t.Fatalf("the host's listener took %d connections from the site's PHP (%s)", n, res.Stdout)
	}

	sqlOK := func(id, q string) *sites.SQLResult {
		t.Helper()
		res, err := e.Sites.RunSQL(ctx, id, q, 0)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return res
	}
	if res := sqlOK(a.ID, "SELECT option_value, NULL AS n FROM wp_options WHERE option_name = 'blogname'"); len(res.Rows) != 1 ||
		*res.Rows[0][0] != a.Name || res.Rows[0][1] != nil || res.Columns[0] != "option_value" {
		t.Fatalf("select: %+v", res)
	}
	if res := sqlOK(a.ID, "UPDATE wp_options SET option_value = 'Renamed' WHERE option_name IN ('blogname', 'blogdescription')"); res.AffectedRows != 2 {
		t.Fatalf("update: %+v", res)
	}
	if res := sqlOK(a.ID, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000) SELECT i FROM n"); !res.Truncated ||
		len(res.Rows) != sites.MaxSQLRows {
		t.Fatalf("5000 rows: truncated %v, %d kept", res.Truncated, len(res.Rows))
	}
	if res := sqlOK(a.ID, "SELECT REPEAT('x', 3 * 1024 * 1024) AS big, 1"); !res.Truncated || len(*res.Rows[0][0]) != sites.MaxSQLBytes {
		t.Fatalf("a 3 MiB value: truncated %v, %d bytes kept", res.Truncated, len(*res.Rows[0][0]))
	}
	if res := sqlOK(a.ID, "SELECT UNHEX('FF41'), HEX(UNHEX('FF41'))"); *res.Rows[0][0] != "\uFFFDA" || *res.Rows[0][1] != "FF41" {
		t.Fatalf("a binary value: %q %q", *res.Rows[0][0], *res.Rows[0][1])
	}
	t0 = time.Now()
	if _, err := e.Sites.RunSQL(ctx, a.ID, "SELECT SLEEP(100)", time.Second); err == nil && time.Since(t0) > 30*time.Second {
		t.Fatalf("a statement past its bound ran %s", time.Since(t0))
	}
	for _, q := range []string{
		"SELECT COUNT(*) FROM `" + b.DBName + "`.wp_options",
		"SELECT * FROM mysql.user",
		"CREATE DATABASE wp_other",
		"SELECT LOAD_FILE('/etc/passwd')",
		"this is not sql",
	} {
		res, err := e.Sites.RunSQL(ctx, a.ID, q, 0)
		if q == "SELECT LOAD_FILE('/etc/passwd')" {
			// LOAD_FILE needs the FILE privilege: NULL, never the file.
			if err != nil || res.Rows[0][0] != nil {
				t.Fatalf("%s: %+v, %v", q, res, err)
			}
			continue
		}
		if !errors.Is(err, sites.ErrSQL) {
			t.Fatalf("%s: %+v, %v; want a refusal", q, res, err)
		}
	}
}

// hostAddr is an address of the host other than loopback, or loopback.
func hostAddr(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return "127.0.0.1"
}
