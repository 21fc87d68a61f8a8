package blobs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestPutGetDelete(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sha, err := s.Put([]byte("zip bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Put([]byte("zip bytes")); again != sha {
		t.Fatal("same content, different name")
	}
	if got, err := s.Get(sha); err != nil || string(got) != "zip bytes" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	p, _ := s.path(sha)
	if err := os.WriteFile(p, []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(sha); err == nil {
		t.Fatal("corrupt blob read back")
	}
	if err := s.Delete(sha); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(sha); !errors.Is(err, ErrMissing) {
		t.Fatalf("after delete: %v", err)
	}
	for _, bad := range []string{"../x", "", filepath.Join("ab", "cd")} {
		if _, err := s.Get(bad); err == nil || errors.Is(err, ErrMissing) {
			t.Fatalf("Get(%q) = %v", bad, err)
		}
	}
}
