package sites_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sites/sitestest"
	"github.com/sandboxd/sandboxd/agent/toolbox"
)

func TestMain(m *testing.M) { agenttest.Main(m) }

func TestSiteLifecycle(t *testing.T) {
	e := sitestest.SetUp(t)
	ctx := context.Background()
	start := time.Now()
	a, err := e.Sites.Make(ctx, sitestest.Req("site_aaaa1111", "alpha", "Alpha Shop"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first site ready in %s (WordPress %s)", time.Since(start), a.WordPressVersion)
	if !strings.HasPrefix(a.WordPressVersion, "6.1") {
		t.Fatalf("WordPress %q", a.WordPressVersion)
	}
	resp, body := sitestest.Get(t, a.Addr(), "alpha.localhost:8081", "/")
	if resp.StatusCode != 200 || !strings.Contains(body, "Alpha Shop") {
		t.Fatalf("home: %d %.300s", resp.StatusCode, body)
	}
	// Create again: converges, nothing changes.
	again, err := e.Sites.Make(ctx, sitestest.Req("site_aaaa1111", "alpha", "Alpha Shop"), nil)
	if err != nil || again.Addr() != a.Addr() || again.UID != a.UID {
		t.Fatalf("repeat create: %+v %v", again, err)
	}

	b, err := e.Sites.Make(ctx, sitestest.Req("site_bbbb2222", "beta", "Beta Blog"), nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("sites are isolated", func(t *testing.T) {
		if a.UID == b.UID || a.UID < agent.FirstSiteUID || a.IP == b.IP {
			t.Fatalf("sites share an identity: uid %d/%d ip %s/%s", a.UID, b.UID, a.IP, b.IP)
		}
		probe := `<?php
$other = '` + e.Sites.Data("site_aaaa1111") + `/wordpress/wp-config.php';
echo is_readable('/srv/site/wp-config.php') ? "own-config " : "no-own-config ";
echo @file_exists($other) ? "sees-other-path " : "no-other-path ";
echo @is_writable('/srv/site/wp-config.php') ? "config-writable " : "config-readonly ";
echo @file_put_contents('/srv/site/conf/x', 'x') === false ? "conf-readonly " : "conf-writable ";
$db = @new mysqli('localhost', DB_USER, DB_PASSWORD, 'wp_aaaa1111', 0, '/run/mysqld/mysqld.sock');
echo $db->connect_errno ? "no-other-db " : "other-db ";
$own = @new mysqli('localhost', DB_USER, DB_PASSWORD, DB_NAME, 0, '/run/mysqld/mysqld.sock');
echo $own->connect_errno ? "no-own-db " : "own-db ";
echo posix_getuid();
`
		// Written by the site's user, as a plugin would be.
		res, err := e.Sites.Exec(ctx, b.ID, []string{"sh", "-c", "cat > /srv/site/wordpress/probe.php"},
			[]byte(strings.Replace(probe, "<?php", "<?php require __DIR__.'/wp-load.php';", 1)))
		if err != nil || res.ExitCode != 0 {
			t.Fatal(err, res)
		}
		_, out := sitestest.Get(t, b.Addr(), "beta.localhost:8081", "/probe.php")
		for _, want := range []string{"own-config", "no-other-path", "config-readonly", "conf-readonly", "no-other-db", "own-db", strconv.Itoa(b.UID)} {
			if !strings.Contains(out, want) {
				t.Fatalf("isolation probe lacks %q: %s", want, out)
			}
		}
	})

	t.Run("one-time login", func(t *testing.T) {
		token := "tok-" + strings.Repeat("x", 30)
		sum := sha256.Sum256([]byte(token))
		if err := e.Sites.AddLoginToken(a.ID, hex.EncodeToString(sum[:]), time.Now().Add(time.Minute), "", ""); err != nil {
			t.Fatal(err)
		}
		resp, _ := sitestest.Get(t, a.Addr(), "alpha.localhost:8081", "/?sandbox_login="+token)
		if resp.StatusCode != 302 || !strings.Contains(resp.Header.Get("Location"), "/wp-admin/") {
			t.Fatalf("login: %d %v", resp.StatusCode, resp.Header)
		}
		dash, body := sitestest.Get(t, a.Addr(), "alpha.localhost:8081", "/wp-admin/", resp.Cookies()...)
		if dash.StatusCode != 200 || !strings.Contains(body, "Dashboard") {
			t.Fatalf("dashboard: %d %.200s", dash.StatusCode, body)
		}
		second, _ := sitestest.Get(t, a.Addr(), "alpha.localhost:8081", "/?sandbox_login="+token)
		if second.StatusCode != 403 || len(second.Cookies()) != 0 {
			t.Fatalf("second use: %d", second.StatusCode)
		}
		expired := "exp-" + strings.Repeat("y", 30)
		sum = sha256.Sum256([]byte(expired))
		_ = e.Sites.AddLoginToken(a.ID, hex.EncodeToString(sum[:]), time.Now().Add(-time.Second), "", "")
		if r, _ := sitestest.Get(t, a.Addr(), "alpha.localhost:8081", "/?sandbox_login="+expired); r.StatusCode != 403 {
			t.Fatalf("expired token: %d", r.StatusCode)
		}
	})

	t.Run("agent restart re-attaches", func(t *testing.T) {
		m2, err := sites.New(e.Cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(m2.List()) != 2 {
			t.Fatalf("records: %d", len(m2.List()))
		}
		if err := m2.Reattach(ctx); err != nil {
			t.Fatal(err)
		}
		if r, _ := sitestest.Get(t, a.Addr(), "alpha.localhost:8081", "/"); r.StatusCode != 200 {
			t.Fatal(r.StatusCode)
		}
	})

	t.Run("stop and start", func(t *testing.T) {
		if _, err := e.Sites.Stop(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		if ok, _ := e.Sites.Running(ctx, b.ID); ok {
			t.Fatal("running after stop")
		}
		if _, err := e.Sites.Start(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		if r, body := sitestest.Get(t, b.Addr(), "beta.localhost:8081", "/"); r.StatusCode != 200 || !strings.Contains(body, "Beta Blog") {
			t.Fatal(r.StatusCode)
		}
	})

	t.Run("a php switch that does not come up is rolled back", func(t *testing.T) {
		// "9.9" points at the MariaDB image: it has no web server, so the
		// site's start script fails there.
		mdb, err := e.Cfg.Images.MariaDB(ctx, e.Cfg.Runtime)
		if err != nil {
			t.Fatal(err)
		}
		cat, err := images.Load(images.DefaultDir(), map[string]string{"9.9": mdb})
		if err != nil {
			t.Fatal(err)
		}
		cfg := e.Cfg
		cfg.Images = cat
		m2, err := sites.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = toolbox.New(m2).SwitchPHPVersion(ctx, b.ID, "9.9")
		if !errors.Is(err, toolbox.ErrSwitchFailed) {
			t.Fatalf("switch to a broken runtime: %v", err)
		}
		if got := m2.Get(b.ID); got.PHPVersion != "8.2" || got.Image == mdb {
			t.Fatalf("record after rollback: %+v", got)
		}
		if r, body := sitestest.Get(t, b.Addr(), "beta.localhost:8081", "/"); r.StatusCode != 200 || !strings.Contains(body, "Beta Blog") {
			t.Fatalf("after rollback: %d", r.StatusCode)
		}
	})

	t.Run("delete removes everything", func(t *testing.T) {
		existed, err := e.Sites.Delete(ctx, a.ID)
		if err != nil || !existed {
			t.Fatal(existed, err)
		}
		if _, err := os.Stat(e.Sites.FS(a.ID)); !os.IsNotExist(err) {
			t.Fatal("files left behind")
		}
		if db, user, _ := e.DB.Exists(ctx, "wp_aaaa1111", "wp_aaaa1111"); db || user {
			t.Fatal("database or user left behind")
		}
		if ok, _ := e.Sites.Running(ctx, a.ID); ok {
			t.Fatal("container left behind")
		}
		if existed, err := e.Sites.Delete(ctx, a.ID); err != nil || existed {
			t.Fatal("second delete:", existed, err)
		}
		if r, body := sitestest.Get(t, b.Addr(), "beta.localhost:8081", "/"); r.StatusCode != 200 || !strings.Contains(body, "Beta Blog") {
			t.Fatal("the other site suffered")
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, r := range []sites.CreateRequest{
			{ID: "site_../x", Slug: "x", PHPVersion: "8.2", URL: "http://x.localhost", AdminUser: "admin", AdminEmail: "a@b.c"},
			{ID: "site_cccc3333", Slug: "-x", PHPVersion: "8.2", URL: "http://x.localhost", AdminUser: "admin", AdminEmail: "a@b.c"},
			{ID: "site_cccc3333", Slug: "x", PHPVersion: "8.2", URL: "http://x.localhost/'", AdminUser: "admin", AdminEmail: "a@b.c"},
			{ID: "site_cccc3333", Slug: "x", PHPVersion: "8.2", URL: "javascript:1", AdminUser: "admin", AdminEmail: "a@b.c"},
			{ID: "site_cccc3333", Slug: "x", PHPVersion: "8.2", URL: "http://x.localhost", AdminUser: "Robert'); DROP", AdminEmail: "a@b.c"},
		} {
			if _, err := e.Sites.Make(ctx, r, nil); err == nil {
				t.Fatalf("%+v accepted", r)
			}
		}
		_, err := e.Sites.Make(ctx, sites.CreateRequest{ID: "site_dddd4444", Slug: "d", PHPVersion: "5.6", URL: "http://d.localhost", AdminUser: "admin", AdminEmail: "a@b.c"}, nil)
		if err == nil || !strings.Contains(err.Error(), "make images") {
			t.Fatalf("missing image: %v", err)
		}
		if e.Sites.Get("site_dddd4444") != nil {
			t.Fatal("a refused site left a record")
		}
	})
}
