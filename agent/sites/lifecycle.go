package sites

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// Create makes a site and waits until WordPress answers on its port. It
// converges: a retry after a crash or a leader change finishes what the
// first attempt started, and a site that already runs is left alone.
func (m *Manager) Create(ctx context.Context, r CreateRequest) (*Site, error) {
	if err := validate(&r); err != nil {
		return nil, err
	}
	defer m.lock(r.ID)()
	s := m.get(r.ID)
	if s == nil {
		img, err := m.cfg.Images.PHP(ctx, m.cfg.Runtime, r.PHPVersion)
		if err != nil {
			return nil, err
		}
		port, err := m.freePort()
		if err != nil {
			return nil, err
		}
		limits := r.Limits
		if limits == (Limits{}) {
			limits = DefaultLimits
		}
		s = &Site{ID: r.ID, Slug: r.Slug, Name: r.Name, PHPVersion: r.PHPVersion, URL: r.URL, AdminUser: r.AdminUser,
			AdminEmail: r.AdminEmail, Port: port, Image: img, DBName: dbName(r.ID), DBUser: dbName(r.ID),
			DBPassword: secret.New(""), Limits: limits, CreatedAt: time.Now().UTC()}
		// The record comes first: whatever happens next, Delete knows
		// what to clean up.
		if err := m.save(s); err != nil {
			return nil, err
		}
	}
	if err := m.provision(ctx, s, r.WordPressVersion); err != nil {
		return nil, err
	}
	return m.get(r.ID), nil
}

func (m *Manager) provision(ctx context.Context, s *Site, wantWP string) error {
	t0 := time.Now()
	if err := m.writeFiles(s); err != nil {
		return fmt.Errorf("site files: %w", err)
	}
	t1 := time.Now()
	if err := m.cfg.DB.CreateSiteDatabase(ctx, s.DBName, s.DBUser, s.DBPassword); err != nil {
		return err
	}
	s.Stopped = false
	if err := m.save(s); err != nil {
		return err
	}
	t2 := time.Now()
	if err := m.cfg.Runtime.Run(ctx, m.spec(s)); err != nil {
		return err
	}
	t3 := time.Now()
	if err := m.waitReady(ctx, s); err != nil {
		return err
	}
	m.log.Info("site provisioned", "site_id", s.ID, "files_ms", t1.Sub(t0).Milliseconds(), "database_ms", t2.Sub(t1).Milliseconds(),
		"container_ms", t3.Sub(t2).Milliseconds(), "install_and_first_answer_ms", time.Since(t3).Milliseconds())
	v, err := wordpressVersion(m.FS(s.ID))
	if err != nil {
		return err
	}
	if wantWP != "" && !strings.HasPrefix(v, wantWP) {
		return fmt.Errorf("%w: WordPress %s is not available for PHP %s on this node (it has %s)", ErrInvalid, wantWP, s.PHPVersion, v)
	}
	s.WordPressVersion = v
	return m.save(s)
}

func (m *Manager) spec(s *Site) runtime.Spec {
	fs := m.FS(s.ID)
	return runtime.Spec{
		ID: containerID(s.ID), Image: s.Image, UID: www, GID: www,
		Args: []string{"/bin/sh", "/srv/site/conf/start.sh"},
		Env:  []string{"PHP_INI_SCAN_DIR=:/srv/site/conf/php", "HOME=/srv/site/tmp", "APACHE_LOG_DIR=/srv/site/logs"},
		Cwd:  "/srv/site", Mounts: []runtime.Mount{{Source: fs, Target: "/srv/site"}},
		MemoryBytes: s.Limits.MemoryMB << 20, CPUMilli: s.Limits.CPUMilli, Pids: s.Limits.Pids,
		LogPath: filepath.Join(fs, "logs", "container.log"),
	}
}

// writeFiles lays out a site's directory. What configures the sandbox is
// root-owned and read-only to it; what WordPress writes belongs to www-data.
func (m *Manager) writeFiles(s *Site) error {
	fs := m.FS(s.ID)
	for _, d := range []struct {
		path  string
		owner int
		mode  os.FileMode
	}{
		{fs, 0, 0o755}, {filepath.Join(fs, "conf"), 0, 0o755}, {filepath.Join(fs, "conf", "php"), 0, 0o755},
		{filepath.Join(fs, "conf", "adminer"), 0, 0o755},
		{filepath.Join(fs, "wordpress"), www, 0o755}, {filepath.Join(fs, "state"), www, 0o700},
		{filepath.Join(fs, "logs"), www, 0o755}, {filepath.Join(fs, "mail"), www, 0o700},
		{filepath.Join(fs, "tmp"), www, 0o700}, {filepath.Join(fs, "login"), www, 0o700},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Chown(d.path, d.owner, d.owner); err != nil {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	module, moduleFile := phpModule(s.PHPVersion)
	apache, err := render(apacheConf, map[string]any{"Port": s.Port, "Module": module, "ModuleFile": moduleFile, "Workers": 8})
	if err != nil {
		return err
	}
	var salts []salt
	for _, n := range []string{"AUTH_KEY", "SECURE_AUTH_KEY", "LOGGED_IN_KEY", "NONCE_KEY", "AUTH_SALT", "SECURE_AUTH_SALT", "LOGGED_IN_SALT", "NONCE_SALT"} {
		salts = append(salts, salt{Name: n, Value: secret.New("")})
	}
	config, err := render(wpConfig, map[string]any{"DBName": s.DBName, "DBUser": s.DBUser, "DBPassword": s.DBPassword,
		"DBHost": m.cfg.DB.Addr(), "URL": s.URL, "Salts": salts})
	if err != nil {
		return err
	}
	host, port := m.dbHostPort()
	adminerDB, _ := json.Marshal(map[string]any{"host": host, "port": port, "name": s.DBName, "user": s.DBUser, "password": s.DBPassword})
	files := []struct {
		path  string
		data  []byte
		mode  os.FileMode
		owner int
		keep  bool // written once: salts must not change under logged-in users
	}{
		{filepath.Join(fs, "conf", "start.sh"), startScript, 0o644, 0, false},
		{filepath.Join(fs, "conf", "install.php"), installScript, 0o644, 0, false},
		{filepath.Join(fs, "conf", "sandbox-mu-plugin.php"), muPlugin, 0o644, 0, false},
		{filepath.Join(fs, "conf", "sendmail"), sendmailScript, 0o755, 0, false},
		{filepath.Join(fs, "conf", "apache.conf"), apache, 0o644, 0, false},
		{filepath.Join(fs, "conf", "adminer", "index.php"), adminerScript, 0o644, 0, false},
		// Readable by the site, as wp-config.php is: its own credentials.
		{filepath.Join(fs, "conf", "adminer.json"), adminerDB, 0o640, 0, false},
		{filepath.Join(fs, "conf", "php", "90-sandbox.ini"), []byte(phpIni), 0o644, 0, false},
		{filepath.Join(fs, "wp-config.php"), config, 0o640, 0, true},
	}
	for _, f := range files {
		if f.keep {
			if _, err := os.Stat(f.path); err == nil {
				continue
			}
		}
		if err := writeOwned(f.path, f.data, f.mode, f.owner, www); err != nil {
			return err
		}
	}
	if err := m.writeDebug(s); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(fs, "state", "installed")); errors.Is(err, os.ErrNotExist) {
		pw := secret.New("")
		inst, _ := json.Marshal(map[string]string{"title": orDefault(s.Name, s.Slug), "user": s.AdminUser,
			"email": s.AdminEmail, "password": pw, "url": s.URL})
		if err := writeOwned(filepath.Join(fs, "state", "install.json"), inst, 0o600, www, www); err != nil {
			return err
		}
	}
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func writeOwned(path string, data []byte, mode os.FileMode, uid, gid int) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chown(tmp, uid, gid); err != nil {
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
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://127.0.0.1:"+strconv.Itoa(s.Port)+"/", nil)
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

func (m *Manager) logTail(id string) string {
	var out []string
	for _, f := range []string{"container.log", "apache-error.log", "php-error.log"} {
		b, err := os.ReadFile(filepath.Join(m.FS(id), "logs", f))
		if err != nil || len(b) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 8 {
			lines = lines[len(lines)-8:]
		}
		out = append(out, f+": "+strings.Join(lines, " | "))
	}
	if len(out) == 0 {
		return "no log output"
	}
	return strings.Join(out, "; ")
}

var versionRE = regexp.MustCompile(`\$wp_version\s*=\s*'([^']+)'`)

func wordpressVersion(fs string) (string, error) {
	b, err := os.ReadFile(filepath.Join(fs, "wordpress", "wp-includes", "version.php"))
	if err != nil {
		return "", fmt.Errorf("read WordPress version: %w", err)
	}
	m := versionRE.FindSubmatch(b)
	if m == nil {
		return "", errors.New("WordPress version not found")
	}
	return string(m[1]), nil
}

// Delete removes a site's container, database, user and files. It reports
// whether there was anything to remove; deleting twice is fine.
func (m *Manager) Delete(ctx context.Context, id string) (bool, error) {
	defer m.lock(id)()
	s := m.get(id)
	if s == nil {
		return false, nil
	}
	if err := m.teardown(ctx, s); err != nil {
		return true, err
	}
	if err := os.Remove(filepath.Join(m.cfg.Dir, "records", id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, err
	}
	m.mu.Lock()
	delete(m.sites, id)
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
	if err := os.RemoveAll(m.FS(s.ID)); err != nil {
		return fmt.Errorf("remove site files: %w", err)
	}
	return nil
}

// Reset brings a site back to a fresh install, keeping its id, URL and
// port.
func (m *Manager) Reset(ctx context.Context, id string) (*Site, error) {
	defer m.lock(id)()
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	if err := m.teardown(ctx, s); err != nil {
		return nil, err
	}
	s.DBPassword = secret.New("")
	if err := m.provision(ctx, s, ""); err != nil {
		return nil, err
	}
	return m.get(id), nil
}

// Stop stops a site's container; its files and database stay.
func (m *Manager) Stop(ctx context.Context, id string) (*Site, error) {
	defer m.lock(id)()
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
	defer m.lock(id)()
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
		if s.Stopped {
			continue
		}
		if err := m.cfg.Runtime.Run(ctx, m.spec(&s)); err != nil {
			errs = append(errs, fmt.Errorf("site %s: %w", s.ID, err))
		}
	}
	return errors.Join(errs...)
}

// Exec runs a command in a site's container as www-data.
func (m *Manager) Exec(ctx context.Context, id string, argv []string, stdin []byte) (*runtime.ExecResult, error) {
	if m.get(id) == nil {
		return nil, ErrNotFound
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: empty command", ErrInvalid)
	}
	return m.cfg.Runtime.Exec(ctx, containerID(id), argv, nil, www, www, stdin)
}

var hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

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
	b, _ := json.Marshal(map[string]any{"expires": expires.Unix(), "user": user, "redirect": redirect})
	return writeOwned(filepath.Join(m.FS(id), "login", tokenHash+".json"), b, 0o600, www, www)
}
