// Package imagecache is the on-disk image cache that `make images` fills
// and agents import from: where it is, and its catalog.json, one format
// shared by the builder and the agent.
package imagecache

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Entry describes one built image.
type Entry struct {
	Name       string    `json:"name"`
	Ref        string    `json:"ref"`
	PHPVersion string    `json:"phpVersion,omitempty"`
	Suite      string    `json:"suite,omitempty"`
	Hash       string    `json:"hash"`
	File       string    `json:"file"`
	SizeBytes  int64     `json:"sizeBytes,omitempty"`
	BuiltAt    time.Time `json:"builtAt,omitempty"`
}

// Catalog is catalog.json.
type Catalog struct {
	Images []Entry `json:"images"`
}

// DefaultDir is SANDBOXD_IMAGES_DIR, else sandboxd/images in the user
// cache dir.
func DefaultDir() string {
	if d := os.Getenv("SANDBOXD_IMAGES_DIR"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sandboxd", "images")
	}
	return filepath.Join(os.TempDir(), "sandboxd-images")
}

// Read loads dir/catalog.json; a missing file is an empty catalogue.
func Read(dir string) (*Catalog, error) {
	var c Catalog
	b, err := os.ReadFile(filepath.Join(dir, "catalog.json"))
	if errors.Is(err, os.ErrNotExist) {
		return &c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read image catalogue: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("image catalogue in %s: %w", dir, err)
	}
	return &c, nil
}

// Find returns the entry with this name, or nil.
func (c *Catalog) Find(name string) *Entry {
	for i := range c.Images {
		if c.Images[i].Name == name {
			return &c.Images[i]
		}
	}
	return nil
}

// Put adds or replaces an entry.
func (c *Catalog) Put(e Entry) {
	if old := c.Find(e.Name); old != nil {
		*old = e
		return
	}
	c.Images = append(c.Images, e)
}

// Write replaces dir/catalog.json atomically and removes archives no entry
// points at any more.
func (c *Catalog) Write(dir string) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "catalog.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "catalog.json")); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, e := range c.Images {
		keep[e.File] = true
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.oci.tar"))
	for _, f := range old {
		if !keep[filepath.Base(f)] {
			_ = os.Remove(f)
		}
	}
	return nil
}
