package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
