// Package templates is a node's template store: frozen sites (a site's
// tree copied out and its database copied inside MariaDB), the node's
// stock install of each runtime image, and the artifacts that carry a
// template from one node to another. A site made from a template is the
// lifecycle core's (agent/sites) to make: the store hands it a Source.
package templates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent/sitefile"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// Limits bound a freeze: what a site's tree may hold to become a
// template.
var Limits = sitefile.TreeLimits{Files: 200_000, Bytes: 8 << 30, Depth: 64}

// Database is what the store needs from the node's MariaDB: its own
// databases for templates, copied from sites', dumped and loaded for
// artifacts.
type Database interface {
	CreateSiteDatabase(ctx context.Context, volume, name, user, password string) error
	DropSiteDatabase(ctx context.Context, name, user string) error
	CopyDatabase(ctx context.Context, from, to string) error
	Dump(ctx context.Context, db string, w io.Writer) error
	Load(ctx context.Context, db string, r io.Reader) error
}

// Config wires a Store.
type Config struct {
	Sites *sites.Manager
	DB    Database
	// Stock makes fresh sites clones of a stock install per runtime
	// image (made once, on first need) instead of installing each.
	Stock  bool
	Logger *slog.Logger
}

// Store holds a node's templates.
type Store struct {
	cfg   Config
	sites *sites.Manager
	log   *slog.Logger
	// builds serialises the making (freeze or import) of each template id.
	builds sync.Map

	// The stock builder's queue (see Run).
	stockMu  sync.Mutex
	building map[string]*stockBuild
	queue    []*stockBuild
	wake     chan struct{}
}

// New makes a store over the sites' manager's template directory; its
// stock templates are made by Run, which the store's owner runs.
func New(cfg Config) *Store {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{cfg: cfg, sites: cfg.Sites, log: cfg.Logger.With("component", "templates"),
		building: map[string]*stockBuild{}, wake: make(chan struct{}, 1)}
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

// Source is what a site made from the template starts from.
func (t *Template) Source(stock bool) *sites.Source {
	return &sites.Source{Template: t.ID, URL: t.URL, DBName: t.DBName, PHPVersion: t.PHPVersion,
		WordPressVersion: t.WordPressVersion, Stock: stock}
}

var templateIDRE = regexp.MustCompile(`^tpl_[a-z0-9]{4,27}$`)

func templateDB(id string) string { return "tpl_" + id[len("tpl_"):] }

func (st *Store) dir(id string) string { return st.sites.TemplateDir(id) }

// List lists the ids of the control plane's templates this node holds
// (made ones: a freeze in progress is not listed; stock templates are
// the node's own).
func (st *Store) List() []string {
	var out []string
	for _, id := range st.all() {
		if !IsStock(id) {
			out = append(out, id)
		}
	}
	return out
}

func (st *Store) all() []string {
	ents, _ := os.ReadDir(filepath.Dir(st.dir("tpl_x")))
	var out []string
	for _, e := range ents {
		if e.IsDir() && templateIDRE.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Get returns a template this node holds, or sites.ErrNotFound.
func (st *Store) Get(id string) (*Template, error) {
	if !templateIDRE.MatchString(id) {
		return nil, fmt.Errorf("%w: template id %q", sites.ErrInvalid, id)
	}
	b, err := os.ReadFile(filepath.Join(st.dir(id), "template.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("template %s: %w", id, sites.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var t Template
	return &t, json.Unmarshal(b, &t)
}

// made returns a template the control plane made (not a stock one).
func (st *Store) made(id string) (*Template, error) {
	if IsStock(id) {
		return nil, fmt.Errorf("%w: template id %q is a stock template's", sites.ErrInvalid, id)
	}
	return st.Get(id)
}

// Create makes a site: from template templateID when one is given, else
// as a clone of its runtime's stock install when the node keeps one with
// the WordPress version asked for, else installed afresh. Like every
// make it converges on a retry.
func (st *Store) Create(ctx context.Context, r sites.CreateRequest, templateID string) (*sites.Site, error) {
	if templateID == "" {
		// Before a stock build: a bad request is refused at once.
		if err := sites.Validate(r); err != nil {
			return nil, err
		}
	}
	src, err := st.sourceFor(ctx, r, templateID)
	if err != nil {
		return nil, err
	}
	return st.sites.Make(ctx, r, src)
}

// sourceFor is what a new site starts from (nil: an install).
func (st *Store) sourceFor(ctx context.Context, r sites.CreateRequest, templateID string) (*sites.Source, error) {
	if templateID != "" {
		t, err := st.made(templateID)
		if err != nil {
			return nil, err
		}
		return t.Source(false), nil
	}
	if !st.cfg.Stock {
		return nil, nil
	}
	if s := st.sites.Get(r.ID); s != nil && s.Template == "" {
		return nil, nil // begun as an install (before stock templates): finish it that way
	}
	t, err := st.Stock(ctx, r.PHPVersion)
	if err != nil {
		return nil, err
	}
	if r.WordPressVersion != "" && !strings.HasPrefix(t.WordPressVersion, r.WordPressVersion) {
		return nil, nil
	}
	return t.Source(true), nil
}

// Reset brings a site back to a fresh install of itself: a clone to its
// template, any other site installed afresh.
func (st *Store) Reset(ctx context.Context, id string) (*sites.Site, error) {
	s := st.sites.Get(id)
	if s == nil {
		return nil, sites.ErrNotFound
	}
	var src *sites.Source
	if s.Template != "" {
		t, err := st.Get(s.Template)
		if err != nil {
			return nil, fmt.Errorf("the template of site %s: %w", s.ID, err)
		}
		src = t.Source(s.Stock)
		// A reset keeps the PHP version the site was switched to.
		src.PHPVersion = s.PHPVersion
	}
	return st.sites.Remake(ctx, id, src)
}

// Restore replaces a site's files and database with a template's,
// keeping its id, URL, address and uid: the site becomes a clone of the
// template (its PHP version the template's), and its reset goes back
// there. A retry after a failure starts over from the template.
func (st *Store) Restore(ctx context.Context, id, templateID string) (*sites.Site, error) {
	t, err := st.made(templateID)
	if err != nil {
		return nil, err
	}
	return st.sites.Remake(ctx, id, t.Source(false))
}

// Freeze makes template id from a ready site: the site is stopped, its
// files copied out (safely: they are the tenant's) and its database
// copied inside MariaDB, then started again. Freezing an id that exists
// returns it.
func (st *Store) Freeze(ctx context.Context, siteID, id string) (*Template, error) {
	if IsStock(id) {
		return nil, fmt.Errorf("%w: template id %q is a stock template's", sites.ErrInvalid, id)
	}
	return st.freeze(ctx, siteID, id, true)
}

// freeze makes the template, starting the site again afterwards when
// restart says so.
func (st *Store) freeze(ctx context.Context, siteID, id string, restart bool) (*Template, error) {
	if t, err := st.Get(id); err == nil {
		return t, nil
	} else if !errors.Is(err, sites.ErrNotFound) {
		return nil, err
	}
	return st.build(ctx, id, ".tmp", func(tmp string) (*Template, error) {
		var t *Template
		// A consistent copy: nothing writes while it is taken.
		err := st.sites.Quiesced(ctx, siteID, restart, func(s *sites.Site) error {
			tree, err := sitefile.CopyTree(filepath.Join(st.sites.Data(s.ID), "wordpress"), filepath.Join(tmp, "files"), sites.TemplateUID, Limits)
			if err != nil {
				return fmt.Errorf("freeze %s: %w", s.ID, err)
			}
			if err := st.cfg.DB.CreateSiteDatabase(ctx, "", templateDB(id), templateDB(id), secret.New("")); err != nil {
				return err
			}
			if err := st.cfg.DB.CopyDatabase(ctx, s.DBName, templateDB(id)); err != nil {
				return err
			}
			t = &Template{ID: id, SourceSiteID: s.ID, URL: s.URL, PHPVersion: s.PHPVersion, WordPressVersion: s.WordPressVersion,
				DBName: templateDB(id), SizeBytes: tree.Bytes, CreatedAt: time.Now().UTC()}
			return nil
		})
		return t, err
	})
}

// build makes template id in a directory beside its place (its name
// ending in suffix) with fill, and moves it there with its record once
// fill is done: a failed build leaves neither files nor a database.
func (st *Store) build(ctx context.Context, id, suffix string, fill func(tmp string) (*Template, error)) (*Template, error) {
	// One build of an id at a time (a job retried while the first runs):
	// the second finds the first's template.
	l, _ := st.builds.LoadOrStore(id, &sync.Mutex{})
	l.(*sync.Mutex).Lock()
	defer l.(*sync.Mutex).Unlock()
	if t, err := st.Get(id); err == nil {
		return t, nil
	}
	dir := st.dir(id)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	}
	tmp := dir + suffix
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
			_ = st.cfg.DB.DropSiteDatabase(context.WithoutCancel(ctx), templateDB(id), templateDB(id))
		}
	}()
	t, err := fill(tmp)
	if err != nil {
		return nil, err
	}
	if err := writeRecord(tmp, t); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	ok = true
	return t, nil
}

// writeRecord writes a template's record into its (root-owned) directory.
func writeRecord(dir string, t *Template) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return sites.WriteOwned(filepath.Join(dir, "template.json"), b, 0o600, 0, 0)
}

// Delete removes a template this node holds: its tree and its database.
// Clones mounted over it keep their view (the kernel holds the tree
// until they unmount), so a template a site of this node (or one of its
// checkpoints) is made from is refused. It reports whether there was one.
func (st *Store) Delete(ctx context.Context, id string) (bool, error) {
	t, err := st.Get(id)
	if errors.Is(err, sites.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if user := st.sites.TemplateUser(id); user != "" {
		return true, fmt.Errorf("%w: template %s is under %s", sites.ErrInvalid, id, user)
	}
	if err := st.cfg.DB.DropSiteDatabase(ctx, t.DBName, t.DBName); err != nil {
		return true, err
	}
	return true, os.RemoveAll(st.dir(id))
}
