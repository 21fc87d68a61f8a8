package blobs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPutGetDelete(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sha, err := s.Put(context.Background(), []byte("zip bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Put(context.Background(), []byte("zip bytes")); again != sha {
		t.Fatal("same content, different name")
	}
	if got, err := s.Get(context.Background(), sha); err != nil || string(got) != "zip bytes" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	p, _ := s.path(sha)
	if err := os.WriteFile(p, []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), sha); err == nil {
		t.Fatal("corrupt blob read back")
	}
	if err := s.Delete(context.Background(), sha); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), sha); !errors.Is(err, ErrMissing) {
		t.Fatalf("after delete: %v", err)
	}
	for _, bad := range []string{"../x", "", filepath.Join("ab", "cd")} {
		if _, err := s.Get(context.Background(), bad); err == nil || errors.Is(err, ErrMissing) {
			t.Fatalf("Get(%q) = %v", bad, err)
		}
	}
}

// TestSweep: only blobs nobody keeps go, and only once they are older
// than the grace; storing a blob again restarts its grace.
func TestSweep(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(data string, age time.Duration) string {
		t.Helper()
		sha, err := s.Put(context.Background(), []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := s.path(sha)
		at := time.Now().Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return sha
	}
	kept, orphan, young, restored := put("kept", 2*time.Hour), put("orphan", 2*time.Hour), put("young", time.Minute), put("restored", 2*time.Hour)
	if _, err := s.Put(context.Background(), []byte("restored")); err != nil { // stored again: new to its writer
		t.Fatal(err)
	}
	stale := filepath.Join(s.dir, ".put-123")
	if err := os.WriteFile(stale, []byte("cut short"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	_ = os.Chtimes(stale, old, old)

	n, err := s.Sweep(context.Background(), func(sha string) bool { return sha == kept }, time.Now().Add(-time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want 2 (the orphan and the unfinished put)", n, err)
	}
	for sha, want := range map[string]bool{kept: true, orphan: false, young: true, restored: true} {
		if s.Has(context.Background(), sha) != want {
			t.Errorf("blob %s…: present = %v, want %v", sha[:8], !want, want)
		}
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Error("an unfinished put survived")
	}
}
