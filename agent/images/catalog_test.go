package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type fakeStore struct {
	has      map[string]bool
	imported []string
	pullable map[string]bool
}

func (f *fakeStore) PullImage(_ context.Context, ref string) error {
	if !f.pullable[ref] {
		return errors.New("not found in registry")
	}
	f.has[ref] = true
	return nil
}

func (f *fakeStore) HasImage(_ context.Context, ref string) (bool, error) { return f.has[ref], nil }
func (f *fakeStore) ImportImage(_ context.Context, ref, archive string) error {
	if _, err := os.Stat(archive); err != nil {
		return err
	}
	f.imported = append(f.imported, ref)
	f.has[ref] = true
	return nil
}

func TestCatalog(t *testing.T) {
	dir := t.TempDir()
	cat := `{"images":[{"name":"php-8.2","ref":"sandboxd.local/php:8.2","phpVersion":"8.2","hash":"h1","file":"php-8.2-h1.oci.tar"},
	{"name":"php-7.4","ref":"sandboxd.local/php:7.4","phpVersion":"7.4","hash":"h2","file":"gone.oci.tar"}]}`
	if err := os.WriteFile(filepath.Join(dir, "catalog.json"), []byte(cat), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "php-8.2-h1.oci.tar"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir, map[string]string{"8.3": "registry.example/php:8.3"})
	if err != nil {
		t.Fatal(err)
	}
	if v := c.PHPVersions(); len(v) != 3 || v[0] != "7.4" || v[2] != "8.3" {
		t.Fatalf("versions %v", v)
	}
	s := &fakeStore{has: map[string]bool{}, pullable: map[string]bool{}}
	ctx := context.Background()
	ref, err := c.PHP(ctx, s, "8.2")
	if err != nil || ref != "sandboxd.local/php:8.2-h1" || len(s.imported) != 1 {
		t.Fatalf("8.2: %q %v %v", ref, err, s.imported)
	}
	if _, err := c.PHP(ctx, s, "8.2"); err != nil || len(s.imported) != 1 {
		t.Fatal("imported twice")
	}
	for _, v := range []string{"7.4", "8.1", "8.3"} {
		if _, err := c.PHP(ctx, s, v); !errors.Is(err, ErrMissing) {
			t.Fatalf("%s: %v", v, err)
		}
	}
	s.pullable["registry.example/php:8.3"] = true
	if ref, err := c.PHP(ctx, s, "8.3"); err != nil || ref != "registry.example/php:8.3" || !s.has[ref] {
		t.Fatalf("override: %q %v", ref, err)
	}
	empty, err := Load(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := empty.MariaDB(ctx, s); !errors.Is(err, ErrMissing) {
		t.Fatal("empty catalogue")
	}
}

// TestOnly: a node that offers some PHP versions imports and advertises
// only those (MariaDB stays); one the cache lacks is refused by name.
func TestOnly(t *testing.T) {
	dir := t.TempDir()
	cat := `{"images":[{"name":"php-8.2","ref":"r/php:8.2","phpVersion":"8.2","hash":"h1","file":"a.tar"},
	{"name":"php-7.4","ref":"r/php:7.4","phpVersion":"7.4","hash":"h2","file":"b.tar"},
	{"name":"mariadb","ref":"r/mariadb","hash":"h3","file":"c.tar"}]}`
	if err := os.WriteFile(filepath.Join(dir, "catalog.json"), []byte(cat), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.tar", "b.tar", "c.tar"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	overrides := map[string]string{"8.3": "registry.example/php:8.3"}
	c, err := Load(dir, overrides)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Only([]string{"8.1"}); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "PHP 8.1") {
		t.Fatalf("a version the cache lacks: %v", err)
	}
	if err := c.Only([]string{"8.2"}); err != nil {
		t.Fatal(err)
	}
	if v := c.PHPVersions(); len(v) != 1 || v[0] != "8.2" {
		t.Fatalf("versions %v", v)
	}
	s := &fakeStore{has: map[string]bool{}, pullable: map[string]bool{}}
	if err := c.EnsureAll(context.Background(), s); err != nil || len(s.imported) != 2 {
		t.Fatalf("imported %v (%v): want PHP 8.2 and MariaDB", s.imported, err)
	}
	if _, err := c.PHP(context.Background(), s, "7.4"); !errors.Is(err, ErrMissing) {
		t.Fatalf("7.4 left out: %v", err)
	}
	if len(overrides) != 1 {
		t.Fatal("Only changed the caller's overrides")
	}
}
