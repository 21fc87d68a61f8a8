package sites

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/agent/cowfs"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/sitedisk"
	"github.com/sandboxd/sandboxd/agent/sitefile"
	"github.com/sandboxd/sandboxd/internal/secret"
	"github.com/sandboxd/sandboxd/internal/urlrewrite"
)

// Source is what a site is made from when it is not installed afresh:
// a template this node holds (agent/templates), its tree laid under the
// site's own changes and its database copied and moved to the site's URL.
type Source struct {
	// Template is the template's id: its tree is TemplateDir(id)/files.
	Template string
	// URL is the template's source's URL, which the copy moves from.
	URL              string
	DBName           string
	PHPVersion       string
	WordPressVersion string
	// Stock says the template is the node's stock install: the site gets
	// its own title and administrator (again on every reset).
	Stock bool
}

// Make makes a site from src (nil: WordPress installed afresh) and waits
// until it answers: the record and uid first, so Delete always knows
// what to clean up, then its disk and files, database, network and
// container. It converges: a retry after a crash or a leader change
// finishes what the first attempt started, and a site that already runs
// is left alone.
func (m *Manager) Make(ctx context.Context, r CreateRequest, src *Source) (*Site, error) {
	if src != nil {
		if r.PHPVersion == "" {
			r.PHPVersion = src.PHPVersion
		}
		if r.PHPVersion != src.PHPVersion {
			return nil, fmt.Errorf("%w: the template runs PHP %s, not %s", ErrInvalid, src.PHPVersion, r.PHPVersion)
		}
	}
	if err := validate(&r); err != nil {
		return nil, err
	}
	defer m.Lock(r.ID)()
	s, err := m.record(ctx, r)
	if err != nil {
		return nil, err
	}
	switch {
	case src == nil:
		err = m.provision(ctx, s, r.WordPressVersion)
	case s.Template == "":
		s.Template, s.TemplateURL, s.WordPressVersion, s.Stock = src.Template, src.URL, src.WordPressVersion, src.Stock
		if err = m.save(s); err == nil {
			err = m.provisionFrom(ctx, s, src)
		}
	default: // a retry: the tree it began over
		err = m.provisionFrom(ctx, s, src)
	}
	if err != nil {
		return nil, err
	}
	return m.get(r.ID), nil
}

// record makes (or finds, on a retry) the site's record and its uid.
func (m *Manager) record(ctx context.Context, r CreateRequest) (*Site, error) {
	s := m.get(r.ID)
	if s == nil {
		img, err := m.cfg.Images.PHP(ctx, m.cfg.Runtime, r.PHPVersion)
		if err != nil {
			return nil, err
		}
		limits := r.Limits
		for _, f := range []struct{ v, d *int64 }{{&limits.MemoryMB, &DefaultLimits.MemoryMB}, {&limits.CPUMilli, &DefaultLimits.CPUMilli},
			{&limits.Pids, &DefaultLimits.Pids}, {&limits.DiskMB, &DefaultLimits.DiskMB}} {
			if *f.v <= 0 {
				*f.v = *f.d
			}
		}
		s = &Site{ID: r.ID, Slug: r.Slug, Name: r.Name, PHPVersion: r.PHPVersion, URL: r.URL, AdminUser: r.AdminUser,
			AdminEmail: r.AdminEmail, Port: Port, Image: img, DBName: dbName(r.ID), DBUser: dbName(r.ID),
			DBPassword: secret.New(""), Limits: limits, Scratch: r.Scratch, Pooled: r.Pooled, Profile: r.Profile, CreatedAt: time.Now().UTC()}
		if err := m.save(s); err != nil {
			return nil, err
		}
	}
	if s.UID == 0 {
		uid, err := m.cfg.UIDs.Claim(m.recordPath(s.ID))
		if err != nil {
			return nil, fmt.Errorf("site uid: %w", err)
		}
		s.UID = uid
		if err := m.save(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (m *Manager) provision(ctx context.Context, s *Site, wantWP string) error {
	t0 := time.Now()
	if err := m.writeFiles(s); err != nil {
		return fmt.Errorf("site files: %w", err)
	}
	if err := m.mountTree(s); err != nil { // a clone's tree, after a stop or a restart
		return err
	}
	t1 := time.Now()
	if err := m.cfg.DB.CreateSiteDatabase(ctx, m.dbVolume(s), s.DBName, s.DBUser, s.DBPassword); err != nil {
		return m.dbError(s.ID, err)
	}
	if err := m.guardDB(ctx, s); err != nil {
		return err
	}
	t2 := time.Now()
	netns, err := m.attach(ctx, s)
	if err != nil {
		return err
	}
	s.Stopped = false
	if err := m.save(s); err != nil {
		return err
	}
	t3 := time.Now()
	if err := m.cfg.Runtime.Run(ctx, m.spec(s, netns)); err != nil {
		return err
	}
	t4 := time.Now()
	if err := m.waitReady(ctx, s); err != nil {
		return err
	}
	m.log.Info("site provisioned", "site_id", s.ID, "files_ms", t1.Sub(t0).Milliseconds(), "database_ms", t2.Sub(t1).Milliseconds(),
		"network_ms", t3.Sub(t2).Milliseconds(), "container_ms", t4.Sub(t3).Milliseconds(),
		"install_and_first_answer_ms", time.Since(t4).Milliseconds())
	// The install is done: its one-time admin password goes.
	if err := os.Remove(filepath.Join(m.FS(s.ID), "secrets", "install.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	v, err := m.wordpressVersion(s.ID)
	if err != nil {
		return err
	}
	if wantWP != "" && !strings.HasPrefix(v, wantWP) {
		return fmt.Errorf("%w: WordPress %s is not available for PHP %s on this node (it has %s)", ErrInvalid, wantWP, s.PHPVersion, v)
	}
	s.WordPressVersion = v
	return m.save(s)
}

// attach gives the site its namespace and records its address.
func (m *Manager) attach(ctx context.Context, s *Site) (string, error) {
	var want netip.Addr
	if s.IP != "" {
		want, _ = netip.ParseAddr(s.IP)
	}
	a, err := m.cfg.Network.Attach(ctx, s.ID, want)
	if err != nil {
		return "", err
	}
	s.IP = a.IP.String()
	return a.NetNS, nil
}

// profileOf is how a site's web server is sized: its own profile if it
// was made with one (benchmarks compare two side by side), else the
// node's (Lean unless configured).
func (m *Manager) profileOf(s *Site) Profile {
	if p, ok := Profiles[s.Profile]; ok {
		return p
	}
	if m.cfg.Profile.Name == "" {
		return Lean
	}
	return m.cfg.Profile
}

// shimGroup is the shared shim a site's container runs under: sites
// of neighbouring uids (handed out lowest first) share one, a group of
// Config.SitesPerShim, of one runtime class.
func (m *Manager) shimGroup(s *Site) string {
	if m.cfg.SitesPerShim <= 0 {
		return ""
	}
	class := "runc"
	if m.cfg.Sandbox != "" {
		class = "sandboxed"
	}
	return fmt.Sprintf("sites-%s-%d", class, s.UID/m.cfg.SitesPerShim)
}

func (m *Manager) spec(s *Site, netns string) runtime.Spec {
	fs, data := m.FS(s.ID), m.Data(s.ID)
	ro := func(src, dst string) runtime.Mount { return runtime.Mount{Source: src, Target: dst, ReadOnly: true} }
	rw := func(src, dst string) runtime.Mount { return runtime.Mount{Source: src, Target: dst} }
	pids := s.Limits.Pids
	if m.cfg.Sandbox != "" && pids > 0 {
		pids += runtime.GVisorPids // the sandbox's own threads count too
	}
	return runtime.Spec{
		ID: containerID(s.ID), Image: s.Image, UID: uint32(s.UID), GID: uint32(s.UID), NetNS: netns, Confined: true, ShimGroup: m.shimGroup(s),
		Args: []string{"/bin/sh", "/srv/site/conf/start.sh"},
		Env:  []string{"PHP_INI_SCAN_DIR=:/srv/site/conf/php", "HOME=/srv/site/tmp", "APACHE_LOG_DIR=/srv/site/logs", "TMPDIR=/srv/site/tmp"},
		Cwd:  "/srv/site",
		Mounts: []runtime.Mount{
			ro(filepath.Join(fs, "conf"), "/srv/site/conf"),
			ro(filepath.Join(fs, "secrets"), "/srv/site/secrets"),
			ro(filepath.Join(fs, "secrets", "wp-config.php"), "/srv/site/wp-config.php"),
			ro(filepath.Join(fs, "login"), "/srv/site/login"),
			rw(filepath.Join(data, "wordpress"), "/srv/site/wordpress"),
			rw(filepath.Join(data, "state"), "/srv/site/state"),
			rw(filepath.Join(data, "logs"), "/srv/site/logs"),
			rw(filepath.Join(data, "mail"), "/srv/site/mail"),
			rw(filepath.Join(data, "tmp"), "/srv/site/tmp"),
			rw(filepath.Join(data, "tmp"), "/tmp"),
			ro(m.cfg.DB.SocketDir(), "/run/mysqld"),
			ro(filepath.Join(fs, "conf", "hosts"), "/etc/hosts"),
			ro(filepath.Join(fs, "conf", "resolv.conf"), "/etc/resolv.conf"),
		},
		MemoryBytes: s.Limits.MemoryMB << 20, CPUMilli: s.Limits.CPUMilli, Pids: pids,
		// No logger process and no file of root's: what the site writes
		// to its stdout and stderr goes nowhere, and its start script
		// sends its own output (and Apache's before its error log opens)
		// to logs/start.log, on the site's own disk.
		Runtime: m.cfg.Sandbox,
	}
}

// siteDirs are the top directories of a site's disk, the site's own.
var siteDirs = []struct {
	name string
	mode os.FileMode
}{{"wordpress", 0o755}, {"state", 0o700}, {"logs", 0o755}, {"mail", 0o700}, {"tmp", 0o700}}

// writeFiles lays out a site on the host. What configures the sandbox
// is root-owned and mounted read-only; secrets are readable by the site's
// uid only; its disk's top directories belong to the site. Nothing here
// reads or writes inside those directories.
func (m *Manager) writeFiles(s *Site) error {
	fs, uid := m.FS(s.ID), s.UID
	if uid <= 0 {
		return fmt.Errorf("site %s has no uid of its own; it was made by an older agent: delete and recreate it", s.ID)
	}
	for _, d := range []struct {
		path string
		gid  int
		mode os.FileMode
	}{
		{fs, 0, 0o711}, {filepath.Join(fs, "conf"), 0, 0o755}, {filepath.Join(fs, "conf", "php"), 0, 0o755},
		{filepath.Join(fs, "conf", "adminer"), 0, 0o755}, {filepath.Join(fs, "conf", "blueprint"), 0, 0o755},
		{filepath.Join(fs, "secrets"), uid, 0o750},
		{filepath.Join(fs, "login"), uid, 0o750}, {filepath.Join(fs, "logs"), 0, 0o700},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Lchown(d.path, 0, d.gid); err != nil {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	if err := m.ensureDisk(s); err != nil {
		return err
	}
	// The disk's root is root's, closed to every other uid (a site that
	// broke out of its container cannot walk into another's disk), and
	// never mounted in the container (its directories are bind-mounted
	// themselves), so these names are the agent's: the site cannot swap
	// them for links.
	if err := os.Chmod(m.Data(s.ID), 0o700); err != nil {
		return err
	}
	for _, d := range siteDirs {
		p := filepath.Join(m.Data(s.ID), d.name)
		if err := os.Mkdir(p, d.mode); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			return err
		}
	}
	if err := m.attachVolume(s); err != nil {
		return err
	}
	module, moduleFile := phpModule(s.PHPVersion)
	prof := m.profileOf(s)
	apache, err := render(apacheConf, map[string]any{"Port": Port, "Module": module, "ModuleFile": moduleFile, "Workers": 8, "MaxSpare": prof.MaxSpare})
	if err != nil {
		return err
	}
	phpIni, err := render(phpIniTmpl, prof)
	if err != nil {
		return err
	}
	config, hosts, err := renderConfig(s)
	if err != nil {
		return err
	}
	adminerDB, _ := json.Marshal(map[string]any{"server": "localhost:" + dbSocket, "name": s.DBName, "user": s.DBUser, "password": s.DBPassword})
	resolv := "# Written by the sandbox agent.\n"
	for _, r := range m.cfg.Resolvers {
		resolv += "nameserver " + r + "\n"
	}
	files := []struct {
		path string
		data []byte
		mode os.FileMode
		gid  int
		keep bool // written once: salts must not change under logged-in users
	}{
		{filepath.Join(fs, "conf", "start.sh"), startScript, 0o644, 0, false},
		{filepath.Join(fs, "conf", "install.php"), installScript, 0o644, 0, false},
		{filepath.Join(fs, "conf", "sandbox-mu-plugin.php"), muPlugin, 0o644, 0, false},
		{filepath.Join(fs, "conf", "sendmail"), sendmailScript, 0o755, 0, false},
		{filepath.Join(fs, "conf", "apache.conf"), apache, 0o644, 0, false},
		{filepath.Join(fs, "conf", "adminer", "index.php"), adminerScript, 0o644, 0, false},
		{filepath.Join(fs, "conf", "php", "90-sandbox.ini"), phpIni, 0o644, 0, false},
		{filepath.Join(fs, "conf", "opcache-blacklist.txt"), []byte("/srv/site/wp-config.php\n"), 0o644, 0, false},
		{filepath.Join(fs, "conf", "hosts"), hosts, 0o644, 0, false},
		{filepath.Join(fs, "conf", "resolv.conf"), []byte(resolv), 0o644, 0, false},
		// Readable by the site alone: its own credentials.
		{filepath.Join(fs, "secrets", "adminer.json"), adminerDB, 0o640, uid, false},
		{filepath.Join(fs, "secrets", "wp-config.php"), config, 0o640, uid, true},
	}
	runner, _ := blueprintFiles.ReadDir("files/blueprint")
	for _, e := range runner {
		b, _ := blueprintFiles.ReadFile("files/blueprint/" + e.Name())
		files = append(files, struct {
			path string
			data []byte
			mode os.FileMode
			gid  int
			keep bool
		}{filepath.Join(fs, "conf", "blueprint", e.Name()), b, 0o644, 0, false})
	}
	for _, f := range files {
		if f.keep {
			if _, err := os.Lstat(f.path); err == nil {
				continue
			}
		}
		if err := WriteOwned(f.path, f.data, f.mode, 0, f.gid); err != nil {
			return err
		}
	}
	if err := m.writeSettings(s); err != nil {
		return err
	}
	// Lstat: state/ is the site's; whatever it put there is not followed.
	if _, err := os.Lstat(filepath.Join(m.Data(s.ID), "state", "installed")); errors.Is(err, os.ErrNotExist) {
		pw := secret.New("")
		inst, _ := json.Marshal(map[string]string{"title": orDefault(s.Name, s.Slug), "user": s.AdminUser,
			"email": s.AdminEmail, "password": pw, "url": s.URL})
		if err := WriteOwned(filepath.Join(fs, "secrets", "install.json"), inst, 0o640, 0, uid); err != nil {
			return err
		}
	}
	return nil
}

// renderConfig makes a site's wp-config.php (with new salts) and its
// /etc/hosts, which name its URL and slug.
func renderConfig(s *Site) (config, hosts []byte, err error) {
	var salts []salt
	for _, n := range []string{"AUTH_KEY", "SECURE_AUTH_KEY", "LOGGED_IN_KEY", "NONCE_KEY", "AUTH_SALT", "SECURE_AUTH_SALT", "LOGGED_IN_SALT", "NONCE_SALT"} {
		salts = append(salts, salt{Name: n, Value: secret.New("")})
	}
	config, err = render(wpConfig, map[string]any{"DBName": s.DBName, "DBUser": s.DBUser, "DBPassword": s.DBPassword,
		"DBHost": "localhost:" + dbSocket, "URL": s.URL, "Salts": salts})
	if err != nil {
		return nil, nil, err
	}
	return config, []byte(fmt.Sprintf("127.0.0.1\tlocalhost\n%s\t%s\n", orDefault(s.IP, "127.0.0.1"), s.Slug)), nil
}

// dbSocket is where a site finds the node's MariaDB (SocketDir mounted at
// /run/mysqld).
const dbSocket = "/run/mysqld/mysqld.sock"

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// WriteOwned writes a file atomically in a root-owned directory of the
// agent's (never one a site can write: the temporary name is predictable).
func WriteOwned(path string, data []byte, mode os.FileMode, uid, gid int) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Lchown(tmp, uid, gid); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// waitReady polls the site's port until WordPress answers (any status
// below 500), failing early with the container's log if it exits.
func (m *Manager) waitReady(ctx context.Context, s *Site) error {
	u, _ := url.Parse(s.URL)
	deadline := time.Now().Add(m.cfg.ReadyTimeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.Addr()+"/", nil)
		req.Host = u.Host
		resp, err := m.http.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 500 {
				return nil
			}
		}
		if running, rerr := m.cfg.Runtime.Running(ctx, containerID(s.ID)); rerr == nil && !running {
			return fmt.Errorf("site %s exited while starting: %s", s.ID, m.logTail(s.ID))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("site %s did not answer within %s: %s", s.ID, m.cfg.ReadyTimeout, m.logTail(s.ID))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(15 * time.Millisecond):
		}
	}
}

// logTail is the end of a site's logs for an error message: its start
// script's, the web server's and PHP's (the site's, read without
// following anything it planted), 2 KiB of each at most.
func (m *Manager) logTail(id string) string {
	var out []string
	for _, f := range []struct{ dir, name string }{{filepath.Join(m.Data(id), "logs"), "start.log"},
		{filepath.Join(m.Data(id), "logs"), "apache-error.log"}, {filepath.Join(m.Data(id), "logs"), "php-error.log"}} {
		b, _, err := sitefile.Tail(f.dir, f.name, 2048)
		if err != nil || len(b) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(strings.ToValidUTF8(string(b), "?")), "\n")
		if len(lines) > 8 {
			lines = lines[len(lines)-8:]
		}
		out = append(out, f.name+": "+strings.Join(lines, " | "))
	}
	if len(out) == 0 {
		return "no log output"
	}
	return strings.Join(out, "; ")
}

var versionRE = regexp.MustCompile(`\$wp_version\s*=\s*'([0-9][0-9A-Za-z.+-]{0,31})'`)

// wordpressVersion reads the site's WordPress version from its files
// (the site's to change: read without following links, 64 KiB at most).
func (m *Manager) wordpressVersion(id string) (string, error) {
	b, _, err := sitefile.Head(filepath.Join(m.Data(id), "wordpress"), "wp-includes/version.php", 64<<10)
	if err != nil {
		return "", fmt.Errorf("read WordPress version: %w", err)
	}
	v := versionRE.FindSubmatch(b)
	if v == nil {
		return "", errors.New("WordPress version not found in wp-includes/version.php")
	}
	return string(v[1]), nil
}

// Delete removes a site's container, database, user and files. It reports
// whether there was anything to remove; deleting twice is fine.
func (m *Manager) Delete(ctx context.Context, id string) (bool, error) {
	unlock, err := m.lockPinned(ctx, id)
	if err != nil {
		return false, err
	}
	defer unlock()
	s := m.get(id)
	if s == nil {
		return false, nil
	}
	if err := m.teardown(ctx, s); err != nil {
		return true, err
	}
	if err := m.removeCheckpoints(id); err != nil {
		return true, err
	}
	if err := m.cfg.UIDs.Release(m.recordPath(id)); err != nil {
		return true, err
	}
	if err := os.Remove(m.recordPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, err
	}
	m.mu.Lock()
	delete(m.sites, id)
	delete(m.presences, id)
	m.mu.Unlock()
	return true, nil
}

func (m *Manager) teardown(ctx context.Context, s *Site) error {
	if err := m.cfg.Runtime.Remove(ctx, containerID(s.ID)); err != nil {
		return err
	}
	if err := m.cfg.DB.DropSiteDatabase(ctx, s.DBName, s.DBUser); err != nil {
		return err
	}
	if err := m.detachVolume(ctx, s); err != nil {
		return err
	}
	if err := m.cfg.Network.Detach(ctx, s.ID); err != nil {
		return err
	}
	if err := m.unmountTree(s); err != nil {
		return err
	}
	if err := sitedisk.Unmount(m.Data(s.ID)); err != nil {
		return err
	}
	// RemoveAll never follows a symlink; with the disk unmounted, only
	// root's files are left here anyway.
	if err := os.RemoveAll(m.FS(s.ID)); err != nil {
		return fmt.Errorf("remove site files: %w", err)
	}
	return nil
}

// Remake puts a site back to a fresh state, keeping its id, URL,
// address and uid (after a snapshot of it under way): made again from
// src, a template it becomes a clone of (its PHP version the
// template's, and its reset going back there), or installed afresh with
// nil. A retry after a failure starts over.
func (m *Manager) Remake(ctx context.Context, id string, src *Source) (*Site, error) {
	unlock, err := m.lockPinned(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	defer m.replacing(id)()
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	img := s.Image
	if src != nil && (src.Template != s.Template || src.PHPVersion != s.PHPVersion) {
		var err error
		if img, err = m.cfg.Images.PHP(ctx, m.cfg.Runtime, src.PHPVersion); err != nil {
			return nil, err
		}
	}
	// Down with the old tree first: its overlay (if it was a clone) is
	// found through the template it had.
	if err := m.teardown(ctx, s); err != nil {
		return nil, err
	}
	s.DBPassword = secret.New("")
	if src == nil {
		if err := m.provision(ctx, s, ""); err != nil {
			return nil, err
		}
		return m.get(id), nil
	}
	s.Template, s.TemplateURL, s.WordPressVersion, s.Stock = src.Template, src.URL, src.WordPressVersion, src.Stock
	s.PHPVersion, s.Image = src.PHPVersion, img
	if err := m.save(s); err != nil {
		return nil, err
	}
	if err := m.provisionFrom(ctx, s, src); err != nil {
		return nil, err
	}
	return m.get(id), nil
}

// Quiesced runs fn on a site with its container stopped, so that nothing
// writes while fn copies it, and starts the site again: after a failed
// fn always, after a good one when restart says so (and then waits until
// it answers).
func (m *Manager) Quiesced(ctx context.Context, id string, restart bool, fn func(s *Site) error) error {
	unlock, err := m.lockPinned(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	s := m.get(id)
	if s == nil {
		return ErrNotFound
	}
	if err := m.cfg.Runtime.Stop(ctx, containerID(s.ID), 10*time.Second); err != nil {
		return err
	}
	start := func() error { return m.restart(context.WithoutCancel(ctx), s) }
	if err := fn(s); err != nil {
		return errors.Join(err, start())
	}
	if !restart {
		return nil
	}
	if err := start(); err != nil {
		return err
	}
	return m.waitReady(ctx, s)
}

// Stop stops a site's container; its files and database stay.
func (m *Manager) Stop(ctx context.Context, id string) (*Site, error) {
	unlock, err := m.lockPinned(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	if err := m.cfg.Runtime.Stop(ctx, containerID(id), 10*time.Second); err != nil {
		return nil, err
	}
	s.Stopped = true
	return s, m.save(s)
}

// Start starts a stopped site and waits until it answers.
func (m *Manager) Start(ctx context.Context, id string) (*Site, error) {
	unlock, err := m.lockPinned(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	if err := m.provision(ctx, s, ""); err != nil {
		return nil, err
	}
	return m.get(id), nil
}

// Running reports whether a site's container runs.
func (m *Manager) Running(ctx context.Context, id string) (bool, error) {
	return m.cfg.Runtime.Running(ctx, containerID(id))
}

// Reattach starts the containers of every site that should run: after an
// agent or host restart, and a no-op for containers that still run.
func (m *Manager) Reattach(ctx context.Context) error {
	var errs []error
	for _, s := range m.List() {
		if s.scratch() {
			// A build cut short (a stock template's): its next build starts over.
			if _, err := m.Delete(ctx, s.ID); err != nil {
				errs = append(errs, fmt.Errorf("site %s: %w", s.ID, err))
			}
			continue
		}
		if s.UID == 0 {
			continue
		}
		if s.Stopped {
			// Not running, but its database is there (and reachable).
			if err := m.guardDB(ctx, &s); err != nil {
				errs = append(errs, fmt.Errorf("site %s: %w", s.ID, err))
			}
			continue
		}
		if err := m.reattach(ctx, &s); err != nil {
			errs = append(errs, fmt.Errorf("site %s: %w", s.ID, err))
		}
	}
	return errors.Join(errs...)
}

// reattach restarts a site as it slept: one asleep gets everything but
// its container's task (its first request starts it), one dozing stays
// frozen if it still is.
func (m *Manager) reattach(ctx context.Context, s *Site) error {
	if s.Depth != Asleep {
		if err := m.restart(ctx, s); err != nil {
			return err
		}
		if s.Depth == Dozing {
			if rt, ok := m.cfg.Runtime.(SleepRuntime); ok {
				if frozen, err := rt.Frozen(containerID(s.ID)); err == nil && !frozen {
					return m.setDepth(s.ID, Awake) // started afresh (a host restart)
				}
			}
		}
		return nil
	}
	if _, err := m.prepare(ctx, s); err != nil {
		return err
	}
	if rt, ok := m.cfg.Runtime.(SleepRuntime); ok {
		// An agent that stopped halfway through putting it to sleep.
		return rt.Halt(ctx, containerID(s.ID))
	}
	return nil
}

// restart makes sure a site's disk, namespace and container are there
// and runs it; what still runs is left alone.
func (m *Manager) restart(ctx context.Context, s *Site) error {
	netns, err := m.prepare(ctx, s)
	if err != nil {
		return err
	}
	return m.cfg.Runtime.Run(ctx, m.spec(s, netns))
}

// prepare makes sure a site's disk, database guard, tree and namespace
// are there: all it needs but its container. It returns the namespace.
func (m *Manager) prepare(ctx context.Context, s *Site) (string, error) {
	if err := m.mountDisk(s); err != nil {
		return "", err
	}
	if err := m.guardDB(ctx, s); err != nil {
		return "", err
	}
	if err := m.mountTree(s); err != nil {
		return "", err
	}
	netns, err := m.attach(ctx, s)
	if err != nil {
		return "", err
	}
	return netns, m.save(s)
}

// Exec runs a command in a site's container as the site's user.
func (m *Manager) Exec(ctx context.Context, id string, argv []string, stdin []byte) (*runtime.ExecResult, error) {
	s := m.get(id)
	switch {
	case s == nil:
		return nil, ErrNotFound
	case s.UID == 0:
		return nil, fmt.Errorf("%w: site %s was made by an older agent; delete and recreate it", ErrInvalid, id)
	case len(argv) == 0:
		return nil, fmt.Errorf("%w: empty command", ErrInvalid)
	}
	release, err := m.Hold(ctx, id, DoorAPI)
	if err != nil {
		return nil, err
	}
	defer release()
	return m.cfg.Runtime.Exec(ctx, containerID(id), argv, nil, uint32(s.UID), uint32(s.UID), stdin)
}

var hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// maxTokenLife is how long a token file whose expiry cannot be read is
// kept; every token the control plane makes expires well before.
const maxTokenLife = 24 * time.Hour

// maxLiveTokens bounds the unexpired one-time tokens a site holds (login
// and database links together): every read of a ready import, every
// login link, mints one, and a new one past the bound drops the oldest.
const maxLiveTokens = 32

// AddLoginToken stores a one-time login token (by its SHA-256) that the
// site's mu-plugin honours once before expires.
func (m *Manager) AddLoginToken(id, tokenHash string, expires time.Time, user, redirect string) error {
	s := m.get(id)
	if s == nil {
		return ErrNotFound
	}
	if !hashRE.MatchString(tokenHash) {
		return fmt.Errorf("%w: token hash", ErrInvalid)
	}
	if user == "" {
		user = s.AdminUser
	}
	if redirect != "" && (!strings.HasPrefix(redirect, "/") || strings.HasPrefix(redirect, "//")) {
		return fmt.Errorf("%w: redirect must be a path", ErrInvalid)
	}
	b, _ := json.Marshal(map[string]any{"expires": expires.Unix(), "user": user, "redirect": redirect, "minted": time.Now().UnixNano()})
	if err := m.writeToken(s, tokenHash+".json", b); err != nil {
		return err
	}
	// Its visitor is on the way: a sleeping site starts waking now.
	m.Wake(id, DoorLogin)
	return nil
}

// writeToken stores a one-time token file in the site's read-only login
// directory (the site marks it used on its own disk), after dropping the
// expired ones and, past maxLiveTokens, the oldest. The directory is the
// agent's (root's; the site only reads it), so what is listed there was
// written here.
func (m *Manager) writeToken(s *Site, name string, data []byte) error {
	m.tokenMu.Lock()
	defer m.tokenMu.Unlock()
	dir := filepath.Join(m.FS(s.ID), "login")
	ents, _ := os.ReadDir(dir)
	now := time.Now()
	type token struct {
		name    string
		written time.Time
	}
	var live []token
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if !strings.HasSuffix(e.Name(), ".json") || e.Name() == name {
			if strings.HasSuffix(e.Name(), ".tmp") && now.Sub(info.ModTime()) > time.Minute {
				_ = os.Remove(path) // a write cut short
			}
			continue
		}
		expires, minted := tokenTimes(path, info.ModTime())
		if !expires.After(now) {
			_ = os.Remove(path)
			continue
		}
		live = append(live, token{e.Name(), minted})
	}
	if extra := len(live) - (maxLiveTokens - 1); extra > 0 {
		sort.Slice(live, func(i, j int) bool {
			if !live[i].written.Equal(live[j].written) {
				return live[i].written.Before(live[j].written)
			}
			return live[i].name < live[j].name
		})
		for _, t := range live[:extra] {
			_ = os.Remove(filepath.Join(dir, t.name))
		}
	}
	return WriteOwned(filepath.Join(dir, name), data, 0o640, 0, s.UID)
}

// tokenTimes reads when a token file stops working and when it was
// minted; one that cannot be read (or an older agent's, without minted)
// counts from when it was written and lasts maxTokenLife.
func tokenTimes(path string, written time.Time) (expires, minted time.Time) {
	var t struct {
		Expires int64 `json:"expires"`
		Minted  int64 `json:"minted"`
	}
	f, err := os.Open(path)
	if err == nil {
		err = json.NewDecoder(io.LimitReader(f, 4<<10)).Decode(&t)
		f.Close()
	}
	expires, minted = written.Add(maxTokenLife), written
	if err != nil {
		return expires, minted
	}
	if t.Expires != 0 {
		expires = time.Unix(t.Expires, 0)
	}
	if t.Minted != 0 {
		minted = time.Unix(0, t.Minted)
	}
	return expires, minted
}

// diskSlack is room a write must leave on a site's disk: ext4 needs some
// for the metadata of what is written, and the site for its logs.
const diskSlack = 256 << 10

// CheckDisk fails with ErrDiskFull, saying how full, when the site's
// disk has less than need bytes (and some slack) free.
func (m *Manager) CheckDisk(id string, need int64) error {
	s := m.get(id)
	if s == nil {
		return ErrNotFound
	}
	u, err := m.usage(s)
	if err != nil || u.Free >= need+diskSlack {
		return nil // no answer is no reason to refuse: the write itself will tell
	}
	return diskFull(u, need)
}

// DiskFullError is ErrDiskFull for a write the site found no room for.
func (m *Manager) DiskFullError(id string) error {
	s := m.get(id)
	if s == nil {
		return ErrDiskFull
	}
	u, err := m.usage(s)
	if err != nil {
		return ErrDiskFull
	}
	return diskFull(u, 0)
}

func diskFull(u sitedisk.Usage, need int64) error {
	more := ""
	if need > 0 {
		more = fmt.Sprintf(", %d KiB more wanted", (need+1023)>>10)
	}
	return fmt.Errorf("%w (%d of %d MiB used by its files and its database%s); delete files or data to make room", ErrDiskFull,
		u.Used>>20, u.Size>>20, more)
}

// TemplateUID owns every frozen template's files on the host. No site
// has it (site uids start at 2,000,000) and no container mounts a
// template directly: clones see its files id-mapped to their own uid.
const TemplateUID = 1_999_999

// Cloner is what templates need from the database server beyond a
// site's own database.
type Cloner interface {
	CopyDatabase(ctx context.Context, from, to string) error
	RewriteURLs(ctx context.Context, db string, r *urlrewrite.Rewriter) (mariadb.RewriteStats, error)
	Exists(ctx context.Context, name, user string) (dbExists, userExists bool, err error)
}

// cowLayout is a clone's tree: the template below, its own changes on
// its disk above, mounted where its WordPress root is.
func (m *Manager) cowLayout(s *Site) cowfs.Layout {
	return cowfs.Layout{Lower: filepath.Join(m.TemplateDir(s.Template), "files"), LowerUID: TemplateUID,
		Upper: filepath.Join(m.Data(s.ID), "wp-changes"), Work: filepath.Join(m.Data(s.ID), "wp-work"), SiteUID: s.UID,
		Mapped: filepath.Join(m.FS(s.ID), "template-view"), Target: filepath.Join(m.Data(s.ID), "wordpress")}
}

// mountTree mounts a clone's tree unless it is mounted.
func (m *Manager) mountTree(s *Site) error {
	if s.Template == "" {
		return nil
	}
	l := m.cowLayout(s)
	if mounted, err := sitedisk.Mounted(l.Target); err != nil || mounted {
		return err
	}
	return cowfs.Mount(l)
}

// provisionFrom lays a site made from a template out and starts it:
// markers that skip the install, the overlay, the database copy and its
// URL rewrite.
func (m *Manager) provisionFrom(ctx context.Context, s *Site, src *Source) error {
	cl, ok := m.cfg.DB.(Cloner)
	if !ok {
		return errors.New("templates: the database server cannot copy databases")
	}
	rw, err := rewriter(src.URL, s.URL)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := m.writeFiles(s); err != nil {
		return fmt.Errorf("site files: %w", err)
	}
	// state/ is the site's own (on a retry its PHP may have run): the
	// markers are made through a root that no link leads out of, and
	// chowned by descriptor.
	if err := touchOwned(filepath.Join(m.Data(s.ID), "state"), s.UID, "core-copied", "installed"); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(m.FS(s.ID), "secrets", "install.json"))
	if err := m.mountTree(s); err != nil {
		return err
	}
	t1 := time.Now()
	exists, _, err := cl.Exists(ctx, s.DBName, s.DBUser)
	if err != nil {
		return err
	}
	if exists { // a retry: start over from the template
		if err := m.cfg.DB.DropSiteDatabase(ctx, s.DBName, s.DBUser); err != nil {
			return err
		}
	}
	if err := m.cfg.DB.CreateSiteDatabase(ctx, m.dbVolume(s), s.DBName, s.DBUser, s.DBPassword); err != nil {
		return m.dbError(s.ID, err)
	}
	if err := m.guardDB(ctx, s); err != nil {
		return err
	}
	// The copy lands on the clone's disk, by the server's own account
	// (which the guard does not limit): a template's database that would
	// not fit under the clone's plan is refused before it is copied.
	if err := m.roomForCopy(ctx, cl, s, src.DBName); err != nil {
		return err
	}
	if err := cl.CopyDatabase(ctx, src.DBName, s.DBName); err != nil {
		return m.dbError(s.ID, err)
	}
	if _, err := cl.RewriteURLs(ctx, s.DBName, rw); err != nil {
		return m.dbError(s.ID, err)
	}
	if s.Stock {
		if err := m.setIdentity(ctx, s); err != nil {
			return m.dbError(s.ID, err)
		}
	}
	t2 := time.Now()
	netns, err := m.attach(ctx, s)
	if err != nil {
		return err
	}
	s.Stopped = false
	if err := m.save(s); err != nil {
		return err
	}
	t3 := time.Now()
	if err := m.cfg.Runtime.Run(ctx, m.spec(s, netns)); err != nil {
		return err
	}
	t4 := time.Now()
	if err := m.waitReady(ctx, s); err != nil {
		return err
	}
	m.log.Info("site cloned", "site_id", s.ID, "template_id", s.Template, "files_ms", t1.Sub(t0).Milliseconds(),
		"database_ms", t2.Sub(t1).Milliseconds(), "network_ms", t3.Sub(t2).Milliseconds(),
		"container_ms", t4.Sub(t3).Milliseconds(), "first_answer_ms", time.Since(t4).Milliseconds())
	return nil
}

// unmountTree takes a clone's overlay down (before its disk).
func (m *Manager) unmountTree(s *Site) error {
	if s.Template == "" {
		return nil
	}
	return cowfs.Unmount(m.cowLayout(s))
}

// touchOwned makes empty files in dir, a directory the site can write,
// owned by uid; what the site put there under those names (a link, a
// directory) is refused rather than followed.
func touchOwned(dir string, uid int, names ...string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, n := range names {
		// O_NONBLOCK: a FIFO planted under the name fails the open
		// instead of holding the agent until someone reads it.
		f, err := root.OpenFile(n, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o644)
		if err != nil {
			return fmt.Errorf("state marker %s: %w", n, err)
		}
		fi, err := f.Stat()
		if err == nil && !fi.Mode().IsRegular() {
			err = fmt.Errorf("state marker %s is not a regular file", n)
		}
		if err == nil {
			err = f.Chown(uid, uid)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// IdentitySetter gives a copied database its own title and administrator.
type IdentitySetter interface {
	SetIdentity(ctx context.Context, db string, id mariadb.Identity) error
}

// setIdentity gives a stock clone its own title and administrator.
func (m *Manager) setIdentity(ctx context.Context, s *Site) error {
	is, ok := m.cfg.DB.(IdentitySetter)
	if !ok {
		return errors.New("stock templates: the database server cannot set a site's identity")
	}
	return is.SetIdentity(ctx, s.DBName, mariadb.Identity{Title: orDefault(s.Name, s.Slug), AdminUser: s.AdminUser, AdminEmail: s.AdminEmail})
}

// rewriter moves content from one URL to another.
func rewriter(from, to string) (*urlrewrite.Rewriter, error) {
	rw, err := urlrewrite.New(from, to)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return rw, nil
}

// TemplateDir is where the template store keeps a template: the tree
// clones of it lie over is its files/.
func (m *Manager) TemplateDir(id string) string { return filepath.Join(m.cfg.Dir, "templates", id) }

// Configure changes a site's settings that WordPress and PHP read on
// every request (debug constants): its record and the files made from
// it; the container stays.
func (m *Manager) Configure(id string, change func(s *Site) error) (*Site, error) {
	defer m.Lock(id)()
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	if err := change(s); err != nil {
		return nil, err
	}
	if err := m.writeSettings(s); err != nil {
		return nil, err
	}
	return s, m.save(s)
}

// ErrRolledBack is a change Recreate undid: the site is back as it was
// and serves.
var ErrRolledBack = errors.New("the change was rolled back")

// Recreate changes what a site's container is made from (its runtime
// image, php.ini) and replaces the container, keeping files, database,
// address and port, and waits until it answers. On any failure the site
// is put back as it was and keeps serving: the error is ErrRolledBack
// then, or says that going back failed too.
func (m *Manager) Recreate(ctx context.Context, id string, change func(s *Site) error) (*Site, error) {
	unlock, err := m.lockPinned(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	old := *s
	if err := change(s); err != nil {
		return nil, err
	}
	if err := m.recreate(ctx, s); err != nil {
		if rerr := m.recreate(context.WithoutCancel(ctx), &old); rerr != nil {
			return nil, fmt.Errorf("%w, and so did putting the site back: %w", err, rerr)
		}
		return nil, fmt.Errorf("%w: %w", ErrRolledBack, err)
	}
	return m.get(id), nil
}

// recreate replaces the site's container with one for s, and saves s
// once the site answers.
func (m *Manager) recreate(ctx context.Context, s *Site) error {
	if err := m.cfg.Runtime.Remove(ctx, containerID(s.ID)); err != nil {
		return err
	}
	if err := m.writeFiles(s); err != nil {
		return err
	}
	netns, err := m.attach(ctx, s)
	if err != nil {
		return err
	}
	if err := m.cfg.Runtime.Run(ctx, m.spec(s, netns)); err != nil {
		return err
	}
	if err := m.waitReady(ctx, s); err != nil {
		return err
	}
	return m.save(s)
}

// writeSettings writes the files a site's settings make: its debug
// constants (read by its mu-plugin) and its php.ini overrides.
func (m *Manager) writeSettings(s *Site) error {
	b, err := json.Marshal(s.Debug)
	if err != nil {
		return err
	}
	if err := WriteOwned(filepath.Join(m.FS(s.ID), "conf", "debug.json"), b, 0o644, 0, 0); err != nil {
		return err
	}
	keys := make([]string, 0, len(s.PHPConfig))
	for k, v := range s.PHPConfig {
		if !iniValue.MatchString(k) || !iniValue.MatchString(v) {
			return fmt.Errorf("%w: php.ini %q = %q", ErrInvalid, k, v)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ini strings.Builder
	ini.WriteString("; Set through the API (php-config); written by the sandbox agent.\n")
	for _, k := range keys {
		fmt.Fprintf(&ini, "%s = %s\n", k, s.PHPConfig[k])
	}
	return WriteOwned(filepath.Join(m.FS(s.ID), "conf", "php", "95-user.ini"), []byte(ini.String()), 0o644, 0, 0)
}

// iniValue is what a php.ini override may hold: plain tokens only, so a
// value can never start a new line or section.
var iniValue = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)

// ExecReader runs a command in a site's container as the site's user,
// its stdin streamed from r.
func (m *Manager) ExecReader(ctx context.Context, id string, argv []string, r io.Reader) (*runtime.ExecResult, error) {
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	ex, ok := m.cfg.Runtime.(streamExec)
	if !ok {
		return nil, errors.New("the runtime cannot stream into a container")
	}
	release, err := m.Hold(ctx, id, DoorAPI)
	if err != nil {
		return nil, err
	}
	defer release()
	return ex.ExecReader(ctx, containerID(id), argv, nil, uint32(s.UID), uint32(s.UID), r)
}
