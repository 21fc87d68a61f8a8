// Package sitestest starts a node's sites for tests of the lifecycle
// core, the template store and the toolbox.
package sitestest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/dbguard"
	"github.com/sandboxd/sandboxd/agent/diskstore"
	"github.com/sandboxd/sandboxd/agent/hostclaim"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/sitedisk"
	"github.com/sandboxd/sandboxd/agent/sitenet"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/templates"
	"github.com/sandboxd/sandboxd/agent/toolbox"
)

// Env is one node's sites on the test binary's containerd: the
// lifecycle core, its template store and toolbox, and their MariaDB.
type Env struct {
	Sites     *sites.Manager
	Templates *templates.Store
	Box       *toolbox.Box
	DB        *mariadb.Server
	Cfg       sites.Config
	// Logs holds what the template store logged.
	Logs *Logs
}

// Logs is a log a test reads while the code under test writes it.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends to the log.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String is everything logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Stock makes fresh sites clones of the node's stock install, as an
// agent does.
func Stock(o *Options) { o.Stock = true }

// Guarded puts each site's database on its disk, held to its plan by
// a guard, as an agent does.
func Guarded(o *Options) { o.Guard = true }

// Options change what SetUp makes.
type Options struct {
	Stock bool
	Guard bool
	// Observe is told of the sites' wakes and sleeps.
	Observe sites.Observer
	// Profile sizes the sites' web servers (zero: the default).
	Profile sites.Profile
}

// WithProfile has the sites sized by p.
func WithProfile(p sites.Profile) func(*Options) {
	return func(opts *Options) { opts.Profile = p }
}

// Observing has the sites' wakes and sleeps told to o.
func Observing(o sites.Observer) func(*Options) {
	return func(opts *Options) { opts.Observe = o }
}

// SetUp starts a node's sites (its MariaDB, network and uid claims),
// all of it gone when the test ends.
func SetUp(t *testing.T, opts ...func(*Options)) *Env {
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
		// A start that failed may have mounted its volumes and disk.
		_ = rt.Remove(ctx, mariadb.ContainerID)
		_ = mariadb.Unmount(filepath.Join(dir, "mariadb"))
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
		if err := diskstore.Unmount(filepath.Join(sitesDir, "fs")); err != nil {
			t.Error(err)
		}
		if err := sitenet.Shutdown(netDir, name); err != nil {
			t.Error(err)
		}
		if err := errors.Join(subnets.ReleaseUnder(dir), uids.ReleaseUnder(dir)); err != nil {
			t.Error(err)
		}
	})
	var o Options
	for _, f := range opts {
		f(&o)
	}
	// Sites share shims as an agent's do (a few per shim here).
	cfg := sites.Config{Dir: sitesDir, Runtime: rt, Images: cat, DB: db, Network: network, UIDs: uids, DiskStore: true,
		Observe: o.Observe, SitesPerShim: 2, Profile: o.Profile}
	if o.Guard {
		g, err := dbguard.New(dbguard.Config{Limiter: db})
		if err != nil {
			t.Fatal(err)
		}
		gctx, stopGuard := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); g.Run(gctx) }()
		t.Cleanup(func() { stopGuard(); <-done })
		cfg.Guard = g
	}
	mgr, err := sites.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &Logs{}
	store := templates.New(templates.Config{Sites: mgr, DB: db, Stock: o.Stock, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	// The stock builder ends before MariaDB does (cleanups run last first).
	bctx, stop := context.WithCancel(context.Background())
	built := make(chan struct{})
	go func() {
		defer close(built)
		store.Run(bctx)
	}()
	t.Cleanup(func() { stop(); <-built })
	return &Env{Sites: mgr, Templates: store, Box: toolbox.New(mgr), DB: db, Cfg: cfg, Logs: logs}
}

// Get answers a GET of a site's address with the host name given.
func Get(t *testing.T, addr string, host, path string, cookies ...*http.Cookie) (*http.Response, string) {
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

// Req asks for a site on PHP 8.2 at <slug>.localhost:8081.
func Req(id, slug, name string) sites.CreateRequest {
	return sites.CreateRequest{ID: id, Slug: slug, Name: name, PHPVersion: "8.2",
		URL: "http://" + slug + ".localhost:8081", AdminUser: "admin", AdminEmail: "admin@example.com"}
}
