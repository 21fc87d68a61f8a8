package sites

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/agent/cowfs"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/sitedisk"
	"github.com/sandboxd/sandboxd/agent/sitefile"
	"github.com/sandboxd/sandboxd/internal/secret"
	"github.com/sandboxd/sandboxd/internal/urlrewrite"
)

// TemplateUID owns every frozen template's files on the host. No site
// has it (site uids start at 2,000,000) and no container mounts a
// template directly: clones see its files id-mapped to their own uid.
const TemplateUID = 1_999_999

// TemplateLimits bound a freeze: what a site's tree may hold to become a
// template.
var TemplateLimits = sitefile.TreeLimits{Files: 200_000, Bytes: 8 << 30, Depth: 64}

// Cloner is what templates need from the database server beyond a
// site's own database.
type Cloner interface {
	CopyDatabase(ctx context.Context, from, to string) error
	RewriteURLs(ctx context.Context, db string, r *urlrewrite.Rewriter) (mariadb.RewriteStats, error)
	Exists(ctx context.Context, name, user string) (dbExists, userExists bool, err error)
}

// Template is the agent's record of a frozen site.
type Template struct {
	ID               string    `json:"id"`
	SourceSiteID     string    `json:"sourceSiteId"`
	URL              string    `json:"url"` // the source's URL, which clones rewrite
	PHPVersion       string    `json:"phpVersion"`
	WordPressVersion string    `json:"wordpressVersion"`
	DBName           string    `json:"dbName"`
	SizeBytes        int64     `json:"sizeBytes"`
	CreatedAt        time.Time `json:"createdAt"`
}

var templateIDRE = regexp.MustCompile(`^tpl_[a-z0-9]{4,27}$`)

func (m *Manager) templateDir(id string) string { return filepath.Join(m.cfg.Dir, "templates", id) }

func templateDB(id string) string { return "tpl_" + id[len("tpl_"):] }

// Templates lists the ids of the control plane's templates this node
// holds (made ones: a freeze in progress is not listed; stock templates
// are the node's own).
func (m *Manager) Templates() []string {
	var out []string
	for _, id := range m.allTemplates() {
		if !IsStock(id) {
			out = append(out, id)
		}
	}
	return out
}

func (m *Manager) allTemplates() []string {
	ents, _ := os.ReadDir(filepath.Join(m.cfg.Dir, "templates"))
	var out []string
	for _, e := range ents {
		if e.IsDir() && templateIDRE.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Template returns a template this node holds, or ErrNotFound.
func (m *Manager) Template(id string) (*Template, error) {
	if !templateIDRE.MatchString(id) {
		return nil, fmt.Errorf("%w: template id %q", ErrInvalid, id)
	}
	b, err := os.ReadFile(filepath.Join(m.templateDir(id), "template.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("template %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var t Template
	return &t, json.Unmarshal(b, &t)
}

// Freeze makes template id from a ready site: the site is stopped, its
// files copied out (safely: they are the tenant's) and its database
// copied inside MariaDB, then started again. Freezing an id that exists
// returns it.
func (m *Manager) Freeze(ctx context.Context, siteID, id string) (*Template, error) {
	if IsStock(id) {
		return nil, fmt.Errorf("%w: template id %q is a stock template's", ErrInvalid, id)
	}
	return m.freeze(ctx, siteID, id, true)
}

// freeze makes the template, starting the site again afterwards when
// restart says so.
func (m *Manager) freeze(ctx context.Context, siteID, id string, restart bool) (*Template, error) {
	if t, err := m.Template(id); err == nil {
		return t, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	cl, ok := m.cfg.DB.(Cloner)
	if !ok {
		return nil, errors.New("templates: the database server cannot copy databases")
	}
	defer m.lock(siteID)()
	s := m.get(siteID)
	if s == nil {
		return nil, ErrNotFound
	}
	dir := m.templateDir(id)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	ok = false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
			_ = m.cfg.DB.DropSiteDatabase(context.WithoutCancel(ctx), templateDB(id), templateDB(id))
		}
	}()
	// A consistent copy: nothing writes while it is taken.
	if err := m.cfg.Runtime.Stop(ctx, containerID(s.ID), 10*time.Second); err != nil {
		return nil, err
	}
	start := func() error { return m.restart(context.WithoutCancel(ctx), s) }
	st, err := sitefile.CopyTree(filepath.Join(m.Data(s.ID), "wordpress"), filepath.Join(tmp, "files"), TemplateUID, TemplateLimits)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("freeze %s: %w", s.ID, err), start())
	}
	if err := m.cfg.DB.CreateSiteDatabase(ctx, "", templateDB(id), templateDB(id), secret.New("")); err != nil {
		return nil, errors.Join(err, start())
	}
	if err := cl.CopyDatabase(ctx, s.DBName, templateDB(id)); err != nil {
		return nil, errors.Join(err, start())
	}
	if restart {
		if err := start(); err != nil {
			return nil, err
		}
		if err := m.waitReady(ctx, s); err != nil {
			return nil, err
		}
	}
	t := &Template{ID: id, SourceSiteID: s.ID, URL: s.URL, PHPVersion: s.PHPVersion, WordPressVersion: s.WordPressVersion,
		DBName: templateDB(id), SizeBytes: st.Bytes, CreatedAt: time.Now().UTC()}
	if err := m.writeTemplate(tmp, t); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	ok = true
	return t, nil
}

// writeTemplate writes a template's record into its (root-owned) directory.
func (m *Manager) writeTemplate(dir string, t *Template) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return writeOwned(filepath.Join(dir, "template.json"), b, 0o600, 0, 0)
}

// cowLayout is a clone's tree: the template below, its own changes on
// its disk above, mounted where its WordPress root is.
func (m *Manager) cowLayout(s *Site) cowfs.Layout {
	return cowfs.Layout{Lower: filepath.Join(m.templateDir(s.Template), "files"), LowerUID: TemplateUID,
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

// Clone makes a site from a template this node holds: no install, its
// tree an overlay over the template's, the template's database copied
// and moved to the site's URL. Like Create it converges on a retry.
func (m *Manager) Clone(ctx context.Context, r CreateRequest, templateID string) (*Site, error) {
	if IsStock(templateID) {
		return nil, fmt.Errorf("%w: template id %q is a stock template's", ErrInvalid, templateID)
	}
	t, err := m.Template(templateID)
	if err != nil {
		return nil, err
	}
	return m.clone(ctx, r, t, false)
}

// clone makes a site from template t; a stock clone gets its own title
// and administrator.
func (m *Manager) clone(ctx context.Context, r CreateRequest, t *Template, stock bool) (*Site, error) {
	if r.PHPVersion == "" {
		r.PHPVersion = t.PHPVersion
	}
	if r.PHPVersion != t.PHPVersion {
		return nil, fmt.Errorf("%w: the template runs PHP %s, not %s", ErrInvalid, t.PHPVersion, r.PHPVersion)
	}
	return m.create(ctx, r, func(ctx context.Context, s *Site) error {
		if s.Template == "" {
			s.Template, s.TemplateURL, s.WordPressVersion, s.Stock = t.ID, t.URL, t.WordPressVersion, stock
			if err := m.save(s); err != nil {
				return err
			}
		}
		return m.provisionClone(ctx, s, t)
	})
}

// provisionClone lays a clone out and starts it: markers that skip the
// install, the overlay, the database copy and its URL rewrite.
func (m *Manager) provisionClone(ctx context.Context, s *Site, t *Template) error {
	cl, ok := m.cfg.DB.(Cloner)
	if !ok {
		return errors.New("templates: the database server cannot copy databases")
	}
	rw, err := rewriterFor(t, s)
	if err != nil {
		return err
	}
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
	if err := m.roomForCopy(ctx, cl, s, t.DBName); err != nil {
		return err
	}
	if err := cl.CopyDatabase(ctx, t.DBName, s.DBName); err != nil {
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
	netns, err := m.attach(ctx, s)
	if err != nil {
		return err
	}
	s.Stopped = false
	if err := m.save(s); err != nil {
		return err
	}
	if err := m.cfg.Runtime.Run(ctx, m.spec(s, netns)); err != nil {
		return err
	}
	return m.waitReady(ctx, s)
}

// unmountTree takes a clone's overlay down (before its disk).
func (m *Manager) unmountTree(s *Site) error {
	if s.Template == "" {
		return nil
	}
	return cowfs.Unmount(m.cowLayout(s))
}

// DeleteTemplate removes a template this node holds: its tree and its
// database. Clones mounted over it keep their view (the kernel holds the
// tree until they unmount), so a template a site of this node is made
// from is refused. It reports whether there was one.
func (m *Manager) DeleteTemplate(ctx context.Context, id string) (bool, error) {
	t, err := m.Template(id)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, s := range m.List() {
		if s.Template == id {
			return true, fmt.Errorf("%w: template %s is under site %s", ErrInvalid, id, s.ID)
		}
	}
	if err := m.cfg.DB.DropSiteDatabase(ctx, t.DBName, t.DBName); err != nil {
		return true, err
	}
	return true, os.RemoveAll(m.templateDir(id))
}

// reclone brings a clone back to its template (its reset).
func (m *Manager) reclone(ctx context.Context, s *Site) error {
	t, err := m.Template(s.Template)
	if err != nil {
		return fmt.Errorf("the template of site %s: %w", s.ID, err)
	}
	return m.provisionClone(ctx, s, t)
}

// Restore replaces a site's files and database with a template's,
// keeping its id, URL, address and uid: the site becomes a clone of the
// template (its PHP version the template's), and its reset goes back
// there. A retry after a failure starts over from the template.
func (m *Manager) Restore(ctx context.Context, id, templateID string) (*Site, error) {
	if IsStock(templateID) {
		return nil, fmt.Errorf("%w: template id %q is a stock template's", ErrInvalid, templateID)
	}
	t, err := m.Template(templateID)
	if err != nil {
		return nil, err
	}
	defer m.lock(id)()
	defer m.replacing(id)() // after a snapshot under way
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	img, err := m.cfg.Images.PHP(ctx, m.cfg.Runtime, t.PHPVersion)
	if err != nil {
		return nil, err
	}
	// Down with the old tree first: its overlay (if it was a clone) is
	// found through the template it had.
	if err := m.teardown(ctx, s); err != nil {
		return nil, err
	}
	s.Template, s.TemplateURL, s.WordPressVersion, s.Stock = t.ID, t.URL, t.WordPressVersion, false
	s.PHPVersion, s.Image, s.DBPassword = t.PHPVersion, img, secret.New("")
	if err := m.save(s); err != nil {
		return nil, err
	}
	if err := m.provisionClone(ctx, s, t); err != nil {
		return nil, err
	}
	return m.get(id), nil
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
