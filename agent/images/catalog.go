// Package images is the agent's image catalogue: which image runs each PHP
// version (and MariaDB), where its archive is, and getting it into
// containerd. A PHP version with no image is an error naming the cure,
// never a fallback to another version.
package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/sandboxd/sandboxd/internal/imagecache"
)

// Entry is one image of the cache's catalog.json.
type Entry = imagecache.Entry

// ErrMissing is returned when an image is neither in containerd nor in
// the image cache.
var ErrMissing = errors.New("image missing")

// DefaultDir is the image cache `make images` fills.
func DefaultDir() string { return imagecache.DefaultDir() }

// Catalog maps PHP versions (and "mariadb") to images.
type Catalog struct {
	dir     string
	entries map[string]Entry // by name: php-8.2, mariadb
	// Overrides point a PHP version at an image reference an operator
	// pulls from a registry instead of the local cache.
	overrides map[string]string

	mu      sync.Mutex
	imports map[string]*sync.Mutex // one import at a time per image
}

// Load reads catalog.json from dir. A missing file gives an empty
// catalogue: every lookup then names `make images`.
func Load(dir string, overrides map[string]string) (*Catalog, error) {
	c := &Catalog{dir: dir, entries: map[string]Entry{}, overrides: overrides, imports: map[string]*sync.Mutex{}}
	file, err := imagecache.Read(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range file.Images {
		c.entries[e.Name] = e
	}
	return c, nil
}

// Only keeps the PHP versions given (and MariaDB): a node that offers
// fewer runtimes imports and advertises only those. A version with no
// image is an error that names the ones there are.
func (c *Catalog) Only(versions []string) error {
	if len(versions) == 0 {
		return nil
	}
	keep := map[string]bool{}
	have := c.PHPVersions()
	for _, v := range versions {
		if !slices.Contains(have, v) {
			return fmt.Errorf("%w: no image for PHP %s in %s (it has %v); build it with `make images`", ErrMissing, v, c.dir, have)
		}
		keep[v] = true
	}
	for name, e := range c.entries {
		if e.PHPVersion != "" && !keep[e.PHPVersion] {
			delete(c.entries, name)
		}
	}
	overrides := map[string]string{}
	for v, ref := range c.overrides {
		if keep[v] {
			overrides[v] = ref
		}
	}
	c.overrides = overrides
	return nil
}

// PHPVersions lists the PHP versions with an image, sorted.
func (c *Catalog) PHPVersions() []string {
	seen := map[string]bool{}
	for _, e := range c.entries {
		if e.PHPVersion != "" {
			seen[e.PHPVersion] = true
		}
	}
	for v := range c.overrides {
		seen[v] = true
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Store is where images are run from (containerd).
type Store interface {
	HasImage(ctx context.Context, ref string) (bool, error)
	ImportImage(ctx context.Context, ref, archive string) error
	PullImage(ctx context.Context, ref string) error
}

// PHP returns the image reference for a PHP version, importing it from
// the cache into the store first if needed.
func (c *Catalog) PHP(ctx context.Context, s Store, version string) (string, error) {
	if ref, ok := c.overrides[version]; ok {
		l := c.importLock("override-" + version)
		defer l.Unlock()
		has, err := s.HasImage(ctx, ref)
		if err != nil {
			return "", err
		}
		if !has {
			if err := s.PullImage(ctx, ref); err != nil {
				return "", fmt.Errorf("%w: the image %s configured for PHP %s: %w", ErrMissing, ref, version, err)
			}
		}
		return ref, nil
	}
	return c.ensure(ctx, s, "php-"+version, "PHP "+version)
}

// MariaDB returns the MariaDB image reference, importing it if needed.
func (c *Catalog) MariaDB(ctx context.Context, s Store) (string, error) {
	return c.ensure(ctx, s, "mariadb", "MariaDB")
}

func (c *Catalog) ensure(ctx context.Context, s Store, name, what string) (string, error) {
	e, ok := c.entries[name]
	if !ok {
		return "", fmt.Errorf("%w: no image for %s in %s; build it with `make images`", ErrMissing, what, c.dir)
	}
	// The recipe hash is part of the local name, so a rebuilt image is
	// imported anew instead of the old one being reused.
	ref := e.Ref + "-" + e.Hash
	l := c.importLock(name)
	defer l.Unlock()
	has, err := s.HasImage(ctx, ref)
	if err != nil {
		return "", err
	}
	if has {
		return ref, nil
	}
	archive := filepath.Join(c.dir, e.File)
	if _, err := os.Stat(archive); err != nil {
		return "", fmt.Errorf("%w: the archive of %s (%s) is gone; rebuild with `make images`", ErrMissing, what, archive)
	}
	if err := s.ImportImage(ctx, ref, archive); err != nil {
		return "", err
	}
	return ref, nil
}

// importLock serialises imports and pulls of one image; it returns the
// lock held.
func (c *Catalog) importLock(name string) *sync.Mutex {
	c.mu.Lock()
	l, ok := c.imports[name]
	if !ok {
		l = &sync.Mutex{}
		c.imports[name] = l
	}
	c.mu.Unlock()
	l.Lock()
	return l
}

// EnsureAll imports every catalogued image that the store lacks, so the
// first site of each version does not wait for an import.
func (c *Catalog) EnsureAll(ctx context.Context, s Store) error {
	var errs []error
	for name, e := range c.entries {
		if _, err := c.ensure(ctx, s, name, e.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
