// Command images builds the runtime images (one per PHP version, plus
// MariaDB) from Debian packages with mmdebstrap, using the archive this
// machine's apt sources name, and writes them as OCI archives into a cache
// directory with a catalog.json. The agent imports them into containerd
// from there. An image whose recipe hash is already in the cache is not
// rebuilt. Run it with `make images`.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// CatalogEntry describes one built image; the agent reads these.
type CatalogEntry struct {
	Name       string    `json:"name"`
	Ref        string    `json:"ref"`
	PHPVersion string    `json:"phpVersion,omitempty"`
	Suite      string    `json:"suite"`
	Hash       string    `json:"hash"`
	File       string    `json:"file"`
	SizeBytes  int64     `json:"sizeBytes"`
	BuiltAt    time.Time `json:"builtAt"`
}

// Catalog is catalog.json.
type Catalog struct {
	Images []CatalogEntry `json:"images"`
}

// DefaultDir is where images are cached unless SANDBOXD_IMAGES_DIR says.
func DefaultDir() string {
	if d := os.Getenv("SANDBOXD_IMAGES_DIR"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "sandboxd", "images")
	}
	return filepath.Join(os.TempDir(), "sandboxd-images")
}

func main() {
	dir := flag.String("dir", DefaultDir(), "cache directory for images and catalog.json")
	only := flag.String("only", "", "comma-separated image names to build (default: all)")
	force := flag.Bool("force", false, "rebuild even when the recipe hash is cached")
	list := flag.Bool("list", false, "print the recipes and exit")
	flag.Parse()
	if *list {
		for _, r := range Recipes {
			fmt.Printf("%-8s %-28s %-9s %s\n", r.Name, r.Ref, r.Suite, r.Hash())
		}
		return
	}
	if err := run(*dir, *only, *force); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(dir, only string, force bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	cat, err := readCatalog(dir)
	if err != nil {
		return err
	}
	mirror := ""
	for _, r := range Recipes {
		if len(want) > 0 && !want[r.Name] {
			continue
		}
		if e := cat.find(r.Name); !force && e != nil && e.Hash == r.Hash() && exists(filepath.Join(dir, e.File)) {
			fmt.Printf("%s: cached (%s)\n", r.Name, e.Hash)
			continue
		}
		if mirror == "" {
			if mirror, err = Mirror("/"); err != nil {
				return err
			}
		}
		start := time.Now()
		entry, err := build(dir, r, mirror)
		if err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		cat.put(entry)
		if err := writeCatalog(dir, cat); err != nil {
			return err
		}
		fmt.Printf("%s: built %s in %s (%d MiB)\n", r.Name, entry.Ref, time.Since(start).Round(time.Second), entry.SizeBytes>>20)
	}
	return nil
}

func build(dir string, r Recipe, mirror string) (CatalogEntry, error) {
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return CatalogEntry{}, err
	}
	defer os.RemoveAll(tmp)
	rootfs := filepath.Join(tmp, "rootfs.tar")
	args := []string{"--variant=apt", "--include=" + strings.Join(r.Packages, ","), "--format=tar", "--quiet"}
	for _, ex := range pathExcludes {
		args = append(args, "--dpkgopt=path-exclude="+ex)
	}
	args = append(args, r.Suite, rootfs, fmt.Sprintf("deb %s %s main", mirror, r.Suite))
	cmd := exec.Command("mmdebstrap", args...)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = os.Stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return CatalogEntry{}, fmt.Errorf("mmdebstrap is not installed (deploy/dev/install-deps.sh installs it)")
		}
		return CatalogEntry{}, fmt.Errorf("mmdebstrap %s: %w\n%s", r.Suite, err, tail(stderr.String(), 20))
	}
	file := fmt.Sprintf("%s-%s.oci.tar", r.Name, r.Hash())
	part := filepath.Join(tmp, file)
	out, err := os.Create(part)
	if err != nil {
		return CatalogEntry{}, err
	}
	now := time.Now().UTC()
	if err := WriteOCIArchive(out, rootfs, r.Ref, now); err != nil {
		out.Close()
		return CatalogEntry{}, err
	}
	if err := out.Close(); err != nil {
		return CatalogEntry{}, err
	}
	fi, err := os.Stat(part)
	if err != nil {
		return CatalogEntry{}, err
	}
	if err := os.Rename(part, filepath.Join(dir, file)); err != nil {
		return CatalogEntry{}, err
	}
	return CatalogEntry{Name: r.Name, Ref: r.Ref, PHPVersion: r.PHPVersion, Suite: r.Suite, Hash: r.Hash(),
		File: file, SizeBytes: fi.Size(), BuiltAt: now}, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func readCatalog(dir string) (*Catalog, error) {
	var c Catalog
	b, err := os.ReadFile(filepath.Join(dir, "catalog.json"))
	if errors.Is(err, os.ErrNotExist) {
		return &c, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("catalog.json: %w", err)
	}
	return &c, nil
}

func (c *Catalog) find(name string) *CatalogEntry {
	for i := range c.Images {
		if c.Images[i].Name == name {
			return &c.Images[i]
		}
	}
	return nil
}

func (c *Catalog) put(e CatalogEntry) {
	if old := c.find(e.Name); old != nil {
		*old = e
		return
	}
	c.Images = append(c.Images, e)
}

// writeCatalog replaces catalog.json atomically and removes archives no
// entry points at any more.
func writeCatalog(dir string, c *Catalog) error {
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
