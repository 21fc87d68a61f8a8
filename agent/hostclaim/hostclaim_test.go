package hostclaim

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func owner(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClaims(t *testing.T) {
	dir, owners := t.TempDir(), t.TempDir()
	r, err := Open(dir, "uid", 100, 3)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c, d := owner(t, owners, "a"), owner(t, owners, "b"), owner(t, owners, "c"), owner(t, owners, "d")
	for _, tc := range []struct {
		owner string
		want  int
	}{{a, 100}, {b, 101}, {a, 100}, {c, 102}} {
		n, err := r.Claim(tc.owner)
		if err != nil || n != tc.want {
			t.Fatalf("claim %s: %d %v, want %d", filepath.Base(tc.owner), n, err, tc.want)
		}
	}
	if _, err := r.Claim(d); !errors.Is(err, ErrExhausted) {
		t.Fatalf("full range: %v", err)
	}
	// Released numbers and numbers of vanished owners are reused.
	if err := r.Release(b); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Claim(d); err != nil || n != 101 {
		t.Fatalf("after release: %d %v", n, err)
	}
	os.Remove(c)
	e := owner(t, owners, "e")
	if n, err := r.Claim(e); err != nil || n != 102 {
		t.Fatalf("stale claim not taken over: %d %v", n, err)
	}
	if err := r.ClaimNumber(100, e); err == nil {
		t.Fatal("claimed a number a live owner holds")
	}
	if got := r.Others(e); len(got) != 2 {
		t.Fatalf("others: %v", got)
	}
	if err := r.ReleaseUnder(owners); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Held(a); ok {
		t.Fatal("ReleaseUnder left a claim")
	}
	if _, err := r.Claim("relative"); err == nil {
		t.Fatal("relative owner accepted")
	}
}

func TestConcurrentClaimsAreUnique(t *testing.T) {
	dir, owners := t.TempDir(), t.TempDir()
	var wg sync.WaitGroup
	got := make([]int, 20)
	for i := range got {
		o := owner(t, owners, "o"+string(rune('a'+i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each goroutine opens its own registry, as separate agents do.
			r, err := Open(dir, "uid", 1000, 50)
			if err != nil {
				t.Error(err)
				return
			}
			n, err := r.Claim(o)
			if err != nil {
				t.Error(err)
			}
			got[i] = n
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, n := range got {
		if seen[n] {
			t.Fatalf("number %d handed out twice: %v", n, got)
		}
		seen[n] = true
	}
}
