package templates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/agent/sites"
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

// stockLocks serialises the making of each stock template.
var stockLocks sync.Map

// Stock returns the stock template of a PHP version's image, making it
// first if this node has none: a hidden site is installed, frozen and
// deleted. Concurrent callers wait for one build.
func (st *Store) Stock(ctx context.Context, php string) (*Template, error) {
	img, err := st.sites.Image(ctx, php)
	if err != nil {
		return nil, err
	}
	id := stockID(php, img)
	if t, err := st.Get(id); err == nil {
		return t, nil
	}
	l, _ := stockLocks.LoadOrStore(st.dir(id), &sync.Mutex{})
	l.(*sync.Mutex).Lock()
	defer l.(*sync.Mutex).Unlock()
	if t, err := st.Get(id); err == nil {
		return t, nil
	}
	suffix := id[len(stockPrefix):]
	r := sites.CreateRequest{ID: stockSitePrefix + suffix, Slug: "stock-" + suffix, Name: "WordPress", PHPVersion: php,
		URL: "http://stock-" + suffix + ".invalid", AdminUser: "admin", AdminEmail: "admin@example.com", Scratch: true}
	// A build cut short (the agent stopped) left its site: start over.
	if _, err := st.sites.Delete(ctx, r.ID); err != nil {
		return nil, fmt.Errorf("stock template for PHP %s: an earlier build's site: %w", php, err)
	}
	defer func() {
		if _, err := st.sites.Delete(context.WithoutCancel(ctx), r.ID); err != nil {
			st.log.Warn("stock template: delete its site", "site_id", r.ID, "err", err)
		}
	}()
	if _, err := st.sites.Make(ctx, r, nil); err != nil {
		return nil, fmt.Errorf("stock template for PHP %s: install: %w", php, err)
	}
	t, err := st.freeze(ctx, r.ID, id, false)
	if err != nil {
		return nil, fmt.Errorf("stock template for PHP %s: %w", php, err)
	}
	st.log.Info("stock template made", "template_id", t.ID, "php", php, "wordpress", t.WordPressVersion, "size_bytes", t.SizeBytes)
	st.dropOldStock(ctx, php, id)
	return t, nil
}

// dropOldStock removes the stock templates of a PHP version's earlier
// images that no site lies over any more.
func (st *Store) dropOldStock(ctx context.Context, php, keep string) {
	prefix := stockPrefix + strings.ReplaceAll(php, ".", "")
	for _, id := range st.all() {
		if id == keep || !strings.HasPrefix(id, prefix) || len(id) != len(keep) {
			continue
		}
		if _, err := st.Delete(ctx, id); err != nil && !errors.Is(err, sites.ErrInvalid) {
			st.log.Warn("old stock template", "template_id", id, "err", err)
		}
	}
}
