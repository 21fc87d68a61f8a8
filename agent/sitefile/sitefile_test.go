package sitefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHostileTree plants what a tenant would in its tree (links out, a
// FIFO, a huge sparse file) and checks each read refuses or stays bounded.
func TestHostileTree(t *testing.T) {
	tree, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(tree, "ok.log"), []byte("line1\nline2\nline3\n"), 0o644))
	must(os.Symlink(secret, filepath.Join(tree, "abs-link")))
	must(os.Symlink("../"+filepath.Base(outside)+"/secret", filepath.Join(tree, "rel-link")))
	must(os.Symlink("ok.log", filepath.Join(tree, "inner-link")))
	must(os.Mkdir(filepath.Join(tree, "sub"), 0o755))
	must(os.Symlink(outside, filepath.Join(tree, "dir-link")))
	must(syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o644))
	sparse, err := os.Create(filepath.Join(tree, "sparse.log"))
	must(err)
	must(sparse.Truncate(4 << 30))
	_, err = sparse.WriteAt([]byte("last line\n"), 4<<30)
	must(err)
	sparse.Close()

	for _, tc := range []struct {
		rel  string
		want error
	}{
		{"abs-link", ErrUnsafePath},
		{"rel-link", ErrUnsafePath},
		{"inner-link", ErrUnsafePath}, // no symlink at all, even one that stays inside
		{"dir-link/secret", ErrUnsafePath},
		{"../" + filepath.Base(outside) + "/secret", ErrUnsafePath},
		{secret, ErrUnsafePath},
		{"/proc/self/environ", ErrUnsafePath},
		{"fifo", ErrNotRegular},
		{"sub", ErrNotRegular},
		{"missing", os.ErrNotExist},
	} {
		if _, _, err := Tail(tree, tc.rel, 100); !errors.Is(err, tc.want) {
			t.Errorf("Tail(%q) = %v, want %v", tc.rel, err, tc.want)
		}
	}
	if b, trunc, err := Tail(tree, "ok.log", 12); err != nil || !trunc || string(b) != "line2\nline3\n" {
		t.Errorf("tail ok.log: %q %v %v", b, trunc, err)
	}
	b, trunc, err := Tail(tree, "sparse.log", 64)
	if err != nil || !trunc || !strings.HasSuffix(string(b), "last line\n") || len(b) != 64 {
		t.Errorf("tail of a 4 GiB sparse file: %d bytes, truncated %v, %v", len(b), trunc, err)
	}
	b, trunc, err = Head(tree, "ok.log", 5)
	if err != nil || !trunc || string(b) != "line1" {
		t.Errorf("head: %q %v %v", b, trunc, err)
	}
	b, trunc, err = Head(tree, "ok.log", 1000)
	if err != nil || trunc || len(b) != 18 {
		t.Errorf("whole head: %q %v %v", b, trunc, err)
	}
}
