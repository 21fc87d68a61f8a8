// Command images builds the runtime images (one per PHP version, plus
// MariaDB) from Debian packages with mmdebstrap, using the archive this
// machine's apt sources name, and writes them as OCI archives into a cache
// directory with a catalog.json. The agent imports them into containerd
// from there. An image whose recipe hash is already in the cache is not
// rebuilt. Run it with `make images`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/imagecache"
)

func main() {
	dir := flag.String("dir", imagecache.DefaultDir(), "cache directory for images and catalog.json")
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
	cat, err := imagecache.Read(dir)
	if err != nil {
		return err
	}
	mirror := ""
	for _, r := range Recipes {
		if len(want) > 0 && !want[r.Name] {
			continue
		}
		if e := cat.Find(r.Name); !force && e != nil && e.Hash == r.Hash() && exists(filepath.Join(dir, e.File)) {
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
		cat.Put(entry)
		if err := cat.Write(dir); err != nil {
			return err
		}
		fmt.Printf("%s: built %s in %s (%d MiB)\n", r.Name, entry.Ref, time.Since(start).Round(time.Second), entry.SizeBytes>>20)
	}
	return nil
}

func build(dir string, r Recipe, mirror string) (imagecache.Entry, error) {
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return imagecache.Entry{}, err
	}
	defer os.RemoveAll(tmp)
	rootfs := filepath.Join(tmp, "rootfs.tar")
	args := []string{"--variant=apt", "--include=" + strings.Join(r.Packages, ","), "--format=tar", "--quiet"}
	for _, ex := range pathExcludes {
		args = append(args, "--dpkgopt=path-exclude="+ex)
	}
	for _, from := range slices.Sorted(maps.Keys(r.Links)) {
		args = append(args, fmt.Sprintf(`--customize-hook=ln -sfn %q "$1"%q`, r.Links[from], from))
	}
	args = append(args, r.Suite, rootfs, fmt.Sprintf("deb %s %s main", mirror, r.Suite))
	cmd := exec.Command("mmdebstrap", args...)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = os.Stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return imagecache.Entry{}, fmt.Errorf("mmdebstrap is not installed (deploy/dev/install-deps.sh installs it)")
		}
		return imagecache.Entry{}, fmt.Errorf("mmdebstrap %s: %w\n%s", r.Suite, err, tail(stderr.String(), 20))
	}
	file := fmt.Sprintf("%s-%s.oci.tar", r.Name, r.Hash())
	part := filepath.Join(tmp, file)
	out, err := os.Create(part)
	if err != nil {
		return imagecache.Entry{}, err
	}
	now := time.Now().UTC()
	if err := WriteOCIArchive(out, rootfs, r.Ref, now); err != nil {
		out.Close()
		return imagecache.Entry{}, err
	}
	if err := out.Close(); err != nil {
		return imagecache.Entry{}, err
	}
	fi, err := os.Stat(part)
	if err != nil {
		return imagecache.Entry{}, err
	}
	if err := os.Rename(part, filepath.Join(dir, file)); err != nil {
		return imagecache.Entry{}, err
	}
	return imagecache.Entry{Name: r.Name, Ref: r.Ref, PHPVersion: r.PHPVersion, Suite: r.Suite, Hash: r.Hash(),
		File: file, SizeBytes: fi.Size(), BuiltAt: now}, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
