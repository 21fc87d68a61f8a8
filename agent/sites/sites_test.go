package sites_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/hostclaim"
	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/sitedisk"
	"github.com/sandboxd/sandboxd/agent/sitenet"
	"github.com/sandboxd/sandboxd/agent/sites"
)

func TestMain(m *testing.M) { agenttest.Main(m) }

type env struct {
	mgr *sites.Manager
	db  *mariadb.Server
	cfg sites.Config
}

func setUp(t *testing.T, opts ...func(*sites.Config)) *env {
	t.Helper()
	socket, dir := agenttest.Containerd(t)
	rt := agenttest.Runtime(t, socket)
	cat := agenttest.Catalog(t)
	ctx := context.Background()
	img, err := cat.MariaDB(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	db, err := mariadb.Start(ctx, rt, mariadb.Config{Image: img, Dir: filepath.Join(dir, "mariadb"), LogWriter: agenttest.LogWriter(t),
		SystemMaxMB: 512, TempMaxMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// The host's own registry, as every agent's: other tests' agents
	// (e2e's, run at the same time) hold subnets and uids on this host.
	claims := hostclaim.DefaultDir
	uids, err := hostclaim.Open(claims, "uid", agent.FirstSiteUID, agent.SiteUIDs)
	if err != nil {
		t.Fatal(err)
	}
	subnets, err := hostclaim.Open(claims, "subnet", 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	netDir := filepath.Join(dir, "network")
	name := agent.NetworkName(netDir)
	network, err := sitenet.New(ctx, sitenet.Config{Dir: netDir, Name: name, Claims: subnets})
	if err != nil {
		t.Fatal(err)
	}
	sitesDir := filepath.Join(dir, "sites")
	t.Cleanup(func() {
		// MariaDB first, then what it mounted (the sites' database
		// volumes hold their disks), the disks and namespaces.
		if err := rt.Remove(ctx, mariadb.ContainerID); err != nil {
			t.Error(err)
		}
		if err := mariadb.Unmount(filepath.Join(dir, "mariadb")); err != nil {
			t.Error(err)
		}
		disks, _ := filepath.Glob(filepath.Join(sitesDir, "fs", "*", "disk"))
		for _, d := range disks {
			if err := sitedisk.Unmount(d); err != nil {
				t.Error(err)
			}
		}
		if err := sitenet.Shutdown(netDir, name); err != nil {
			t.Error(err)
		}
		if err := errors.Join(subnets.ReleaseUnder(dir), uids.ReleaseUnder(dir)); err != nil {
			t.Error(err)
		}
	})
	cfg := sites.Config{Dir: sitesDir, Runtime: rt, Images: cat, DB: db, Network: network, UIDs: uids, LogWriter: agenttest.LogWriter(t)}
	for _, o := range opts {
		o(&cfg)
	}
	mgr, err := sites.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{mgr: mgr, db: db, cfg: cfg}
}

func get(t *testing.T, addr string, host, path string, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	req.Host = host
	for _, c := range cookies {
		req.AddCookie(c)
	}
	c := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func req(id, slug, name string) sites.CreateRequest {
	return sites.CreateRequest{ID: id, Slug: slug, Name: name, PHPVersion: "8.2",
		URL: "http://" + slug + ".localhost:8081", AdminUser: "admin", AdminEmail: "admin@example.com"}
}

func TestSiteLifecycle(t *testing.T) {
	e := setUp(t)
	ctx := context.Background()
	start := time.Now()
	a, err := e.mgr.Create(ctx, req("site_aaaa1111", "alpha", "Alpha Shop"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first site ready in %s (WordPress %s)", time.Since(start), a.WordPressVersion)
	if !strings.HasPrefix(a.WordPressVersion, "6.1") {
		t.Fatalf("WordPress %q", a.WordPressVersion)
	}
	resp, body := get(t, a.Addr(), "alpha.localhost:8081", "/")
	if resp.StatusCode != 200 || !strings.Contains(body, "Alpha Shop") {
		t.Fatalf("home: %d %.300s", resp.StatusCode, body)
	}
	// Create again: converges, nothing changes.
	again, err := e.mgr.Create(ctx, req("site_aaaa1111", "alpha", "Alpha Shop"))
	if err != nil || again.Addr() != a.Addr() || again.UID != a.UID {
		t.Fatalf("repeat create: %+v %v", again, err)
	}

	b, err := e.mgr.Create(ctx, req("site_bbbb2222", "beta", "Beta Blog"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("sites are isolated", func(t *testing.T) {
		if a.UID == b.UID || a.UID < agent.FirstSiteUID || a.IP == b.IP {
			t.Fatalf("sites share an identity: uid %d/%d ip %s/%s", a.UID, b.UID, a.IP, b.IP)
		}
		probe := `<?php
$other = '` + e.mgr.Data("site_aaaa1111") + `/wordpress/wp-config.php';
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
		res, err := e.mgr.Exec(ctx, b.ID, []string{"sh", "-c", "cat > /srv/site/wordpress/probe.php"},
			[]byte(strings.Replace(probe, "<?php", "<?php require __DIR__.'/wp-load.php';", 1)))
		if err != nil || res.ExitCode != 0 {
			t.Fatal(err, res)
		}
		_, out := get(t, b.Addr(), "beta.localhost:8081", "/probe.php")
		for _, want := range []string{"own-config", "no-other-path", "config-readonly", "conf-readonly", "no-other-db", "own-db", strconv.Itoa(b.UID)} {
			if !strings.Contains(out, want) {
				t.Fatalf("isolation probe lacks %q: %s", want, out)
			}
		}
	})

	t.Run("one-time login", func(t *testing.T) {
		token := "tok-" + strings.Repeat("x", 30)
		sum := sha256.Sum256([]byte(token))
		if err := e.mgr.AddLoginToken(a.ID, hex.EncodeToString(sum[:]), time.Now().Add(time.Minute), "", ""); err != nil {
			t.Fatal(err)
		}
		resp, _ := get(t, a.Addr(), "alpha.localhost:8081", "/?sandbox_login="+token)
		if resp.StatusCode != 302 || !strings.Contains(resp.Header.Get("Location"), "/wp-admin/") {
			t.Fatalf("login: %d %v", resp.StatusCode, resp.Header)
		}
		dash, body := get(t, a.Addr(), "alpha.localhost:8081", "/wp-admin/", resp.Cookies()...)
		if dash.StatusCode != 200 || !strings.Contains(body, "Dashboard") {
			t.Fatalf("dashboard: %d %.200s", dash.StatusCode, body)
		}
		second, _ := get(t, a.Addr(), "alpha.localhost:8081", "/?sandbox_login="+token)
		if second.StatusCode != 403 || len(second.Cookies()) != 0 {
			t.Fatalf("second use: %d", second.StatusCode)
		}
		expired := "exp-" + strings.Repeat("y", 30)
		sum = sha256.Sum256([]byte(expired))
		_ = e.mgr.AddLoginToken(a.ID, hex.EncodeToString(sum[:]), time.Now().Add(-time.Second), "", "")
		if r, _ := get(t, a.Addr(), "alpha.localhost:8081", "/?sandbox_login="+expired); r.StatusCode != 403 {
			t.Fatalf("expired token: %d", r.StatusCode)
		}
	})

	t.Run("agent restart re-attaches", func(t *testing.T) {
		m2, err := sites.New(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(m2.List()) != 2 {
			t.Fatalf("records: %d", len(m2.List()))
		}
		if err := m2.Reattach(ctx); err != nil {
			t.Fatal(err)
		}
		if r, _ := get(t, a.Addr(), "alpha.localhost:8081", "/"); r.StatusCode != 200 {
			t.Fatal(r.StatusCode)
		}
	})

	t.Run("stop and start", func(t *testing.T) {
		if _, err := e.mgr.Stop(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		if ok, _ := e.mgr.Running(ctx, b.ID); ok {
			t.Fatal("running after stop")
		}
		if _, err := e.mgr.Start(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		if r, body := get(t, b.Addr(), "beta.localhost:8081", "/"); r.StatusCode != 200 || !strings.Contains(body, "Beta Blog") {
			t.Fatal(r.StatusCode)
		}
	})

	t.Run("a php switch that does not come up is rolled back", func(t *testing.T) {
		// "9.9" points at the MariaDB image: it has no web server, so the
		// site's start script fails there.
		mdb, err := e.cfg.Images.MariaDB(ctx, e.cfg.Runtime)
		if err != nil {
			t.Fatal(err)
		}
		cat, err := images.Load(images.DefaultDir(), map[string]string{"9.9": mdb})
		if err != nil {
			t.Fatal(err)
		}
		cfg := e.cfg
		cfg.Images = cat
		m2, err := sites.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = m2.SwitchPHPVersion(ctx, b.ID, "9.9")
		if !errors.Is(err, sites.ErrSwitchFailed) {
			t.Fatalf("switch to a broken runtime: %v", err)
		}
		if got := m2.Get(b.ID); got.PHPVersion != "8.2" || got.Image == mdb {
			t.Fatalf("record after rollback: %+v", got)
		}
		if r, body := get(t, b.Addr(), "beta.localhost:8081", "/"); r.StatusCode != 200 || !strings.Contains(body, "Beta Blog") {
			t.Fatalf("after rollback: %d", r.StatusCode)
		}
	})

	t.Run("delete removes everything", func(t *testing.T) {
		existed, err := e.mgr.Delete(ctx, a.ID)
		if err != nil || !existed {
			t.Fatal(existed, err)
		}
		if _, err := os.Stat(e.mgr.FS(a.ID)); !os.IsNotExist(err) {
			t.Fatal("files left behind")
		}
		if db, user, _ := e.db.Exists(ctx, "wp_aaaa1111", "wp_aaaa1111"); db || user {
			t.Fatal("database or user left behind")
		}
		if ok, _ := e.mgr.Running(ctx, a.ID); ok {
			t.Fatal("container left behind")
		}
		if existed, err := e.mgr.Delete(ctx, a.ID); err != nil || existed {
			t.Fatal("second delete:", existed, err)
		}
		if r, body := get(t, b.Addr(), "beta.localhost:8081", "/"); r.StatusCode != 200 || !strings.Contains(body, "Beta Blog") {
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
			if _, err := e.mgr.Create(ctx, r); err == nil {
				t.Fatalf("%+v accepted", r)
			}
		}
		_, err := e.mgr.Create(ctx, sites.CreateRequest{ID: "site_dddd4444", Slug: "d", PHPVersion: "5.6", URL: "http://d.localhost", AdminUser: "admin", AdminEmail: "a@b.c"})
		if err == nil || !strings.Contains(err.Error(), "make images") {
			t.Fatalf("missing image: %v", err)
		}
		if e.mgr.Get("site_dddd4444") != nil {
			t.Fatal("a refused site left a record")
		}
	})
}
