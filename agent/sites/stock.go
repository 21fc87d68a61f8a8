package sites

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/internal/urlrewrite"
)

// A stock template is a fresh WordPress install of one runtime image,
// frozen once per node: a fresh site is a clone of it with its own
// title and administrator, so no install runs on the request path and
// every fresh site shares WordPress's files below its overlay.

// stockPrefix starts every stock template id; the control plane never
// sees these (they are not reported), so it never collects them.
const stockPrefix = "tpl_stock"

// stockID names the stock template of an image: a rebuilt image (its
// reference carries its recipe hash) gets a stock of its own.
func stockID(php, image string) string {
	h := sha256.Sum256([]byte(image))
	return stockPrefix + strings.ReplaceAll(php, ".", "") + hex.EncodeToString(h[:4])
}

// stockSitePrefix starts the id of the hidden site a stock template is
// made from.
const stockSitePrefix = "site_stock"

// IsStock reports whether a template id is a node's stock template.
func IsStock(id string) bool { return strings.HasPrefix(id, stockPrefix) }

// IdentitySetter gives a copied database its own title and administrator.
type IdentitySetter interface {
	SetIdentity(ctx context.Context, db string, id mariadb.Identity) error
}

// stockLocks serialises the making of each stock template.
var stockLocks sync.Map

// Stock returns the stock template of a PHP version's image, making it
// first if this node has none: a hidden site is installed, frozen and
// deleted. Concurrent callers wait for one build.
func (m *Manager) Stock(ctx context.Context, php string) (*Template, error) {
	img, err := m.cfg.Images.PHP(ctx, m.cfg.Runtime, php)
	if err != nil {
		return nil, err
	}
	id := stockID(php, img)
	if t, err := m.Template(id); err == nil {
		return t, nil
	}
	l, _ := stockLocks.LoadOrStore(m.templateDir(id), &sync.Mutex{})
	l.(*sync.Mutex).Lock()
	defer l.(*sync.Mutex).Unlock()
	if t, err := m.Template(id); err == nil {
		return t, nil
	}
	suffix := id[len(stockPrefix):]
	r := CreateRequest{ID: stockSitePrefix + suffix, Slug: "stock-" + suffix, Name: "WordPress", PHPVersion: php,
		URL: "http://stock-" + suffix + ".invalid", AdminUser: "admin", AdminEmail: "admin@example.com"}
	// A build cut short (the agent stopped) left its site: start over.
	if _, err := m.Delete(ctx, r.ID); err != nil {
		return nil, fmt.Errorf("stock template for PHP %s: an earlier build's site: %w", php, err)
	}
	defer func() {
		if _, err := m.Delete(context.WithoutCancel(ctx), r.ID); err != nil {
			m.log.Warn("stock template: delete its site", "site_id", r.ID, "err", err)
		}
	}()
	if _, err := m.create(ctx, r, func(ctx context.Context, s *Site) error { return m.provision(ctx, s, "") }); err != nil {
		return nil, fmt.Errorf("stock template for PHP %s: install: %w", php, err)
	}
	t, err := m.freeze(ctx, r.ID, id, false)
	if err != nil {
		return nil, fmt.Errorf("stock template for PHP %s: %w", php, err)
	}
	m.log.Info("stock template made", "template_id", t.ID, "php", php, "wordpress", t.WordPressVersion, "size_bytes", t.SizeBytes)
	m.dropOldStock(ctx, php, id)
	return t, nil
}

// dropOldStock removes the stock templates of a PHP version's earlier
// images that no site lies over any more.
func (m *Manager) dropOldStock(ctx context.Context, php, keep string) {
	prefix := stockPrefix + strings.ReplaceAll(php, ".", "")
	for _, id := range m.allTemplates() {
		if id == keep || !strings.HasPrefix(id, prefix) || len(id) != len(keep) {
			continue
		}
		if _, err := m.DeleteTemplate(ctx, id); err != nil && !errors.Is(err, ErrInvalid) {
			m.log.Warn("old stock template", "template_id", id, "err", err)
		}
	}
}

// createFromStock makes a fresh site as a clone of its runtime's stock
// template, when the stock has the WordPress version asked for. It
// reports false when the site must be installed instead.
func (m *Manager) createFromStock(ctx context.Context, r CreateRequest) (*Site, bool, error) {
	if !m.cfg.StockTemplates {
		return nil, false, nil
	}
	if s := m.get(r.ID); s != nil && s.Template == "" {
		return nil, false, nil // begun as an install (before stock templates): finish it that way
	}
	t, err := m.Stock(ctx, r.PHPVersion)
	if err != nil {
		return nil, false, err
	}
	if r.WordPressVersion != "" && !strings.HasPrefix(t.WordPressVersion, r.WordPressVersion) {
		return nil, false, nil
	}
	s, err := m.clone(ctx, r, t, true)
	return s, true, err
}

// setIdentity gives a stock clone its own title and administrator.
func (m *Manager) setIdentity(ctx context.Context, s *Site) error {
	is, ok := m.cfg.DB.(IdentitySetter)
	if !ok {
		return errors.New("stock templates: the database server cannot set a site's identity")
	}
	return is.SetIdentity(ctx, s.DBName, mariadb.Identity{Title: orDefault(s.Name, s.Slug), AdminUser: s.AdminUser, AdminEmail: s.AdminEmail})
}

// rewriterFor moves a template's content to a site's URL.
func rewriterFor(t *Template, s *Site) (*urlrewrite.Rewriter, error) {
	rw, err := urlrewrite.New(t.URL, s.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return rw, nil
}
