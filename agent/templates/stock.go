package templates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

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

// stockBuild is one stock template asked of the builder, and its outcome
// once done is closed.
type stockBuild struct {
	php, id string
	done    chan struct{}
	t       *Template
	err     error
}

// Stock returns the stock template of a PHP version's image. A node
// without it yet asks the store's builder (Run) and waits: concurrent
// callers wait for one build, and a caller that gives up (its ctx ends)
// leaves the build to finish for the next.
func (st *Store) Stock(ctx context.Context, php string) (*Template, error) {
	img, err := st.sites.Image(ctx, php)
	if err != nil {
		return nil, err
	}
	id := stockID(php, img)
	if t, err := st.Get(id); err == nil {
		return t, nil
	}
	b := st.want(php, id)
	select {
	case <-b.done:
		return b.t, b.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// want queues a stock build for the builder, or finds the one queued.
func (st *Store) want(php, id string) *stockBuild {
	st.stockMu.Lock()
	defer st.stockMu.Unlock()
	if b, ok := st.building[id]; ok {
		return b
	}
	b := &stockBuild{php: php, id: id, done: make(chan struct{})}
	st.building[id] = b
	st.queue = append(st.queue, b)
	select {
	case st.wake <- struct{}{}:
	default: // the builder is already told
	}
	return b
}

// next takes the oldest build asked for, or nil.
func (st *Store) next() *stockBuild {
	st.stockMu.Lock()
	defer st.stockMu.Unlock()
	if len(st.queue) == 0 {
		return nil
	}
	b := st.queue[0]
	st.queue = st.queue[1:]
	return b
}

// finished hands a build's outcome to its waiters; the next ask after a
// failure starts over.
func (st *Store) finished(b *stockBuild, t *Template, err error) {
	st.stockMu.Lock()
	delete(st.building, b.id)
	st.stockMu.Unlock()
	b.t, b.err = t, err
	close(b.done)
}

// Run is the stock template builder: it makes the stock templates asked
// for, one at a time and off every request's path, until ctx ends (what
// is still asked for then fails with ctx's error).
func (st *Store) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			for b := st.next(); b != nil; b = st.next() {
				st.finished(b, nil, fmt.Errorf("stock template for PHP %s: %w", b.php, ctx.Err()))
			}
			return
		case <-st.wake:
		}
		for ctx.Err() == nil {
			b := st.next() // taken only when it will be built
			if b == nil {
				break
			}
			t, err := st.buildStock(ctx, b.php, b.id)
			st.finished(b, t, err)
		}
	}
}

// buildStock makes stock template id of a PHP version: a hidden site is
// installed, frozen and deleted.
func (st *Store) buildStock(ctx context.Context, php, id string) (*Template, error) {
	if t, err := st.Get(id); err == nil {
		return t, nil
	}
	st.log.Info("stock template: making it", "template_id", id, "php", php)
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
