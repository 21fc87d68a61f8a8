package sites

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// tokenSite is a Manager holding one site record (no container: token
// files are all these tests touch) with its login directory.
func tokenSite(t *testing.T) (*Manager, string) {
	t.Helper()
	m := &Manager{cfg: Config{Dir: t.TempDir()}, sites: map[string]*Site{}, locks: map[string]*sync.Mutex{},
		content: map[string]*sync.RWMutex{}, presences: map[string]*presence{}, now: time.Now}
	m.sites["site_a"] = &Site{ID: "site_a", UID: 2099040, AdminUser: "admin"}
	dir := filepath.Join(m.FS("site_a"), "login")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	return m, dir
}

func tokenHash(i int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "token-%d", i))
	return hex.EncodeToString(sum[:])
}

func tokenFiles(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

// TestLoginTokensAreBounded: every read of a ready import (and every
// login or database link) mints a one-time token the agent keeps as a
// file; a flood of them keeps at most maxLiveTokens per site (the
// newest, so the link just handed out works), and a token is collected
// once it has expired, not a day later.
func TestLoginTokensAreBounded(t *testing.T) {
	hosttest.Root(t)
	m, dir := tokenSite(t)
	live := time.Now().Add(5 * time.Minute)
	const minted = 500
	for i := range minted {
		add := func() error { return m.AddLoginToken("site_a", tokenHash(i), live, "", "") }
		if i%5 == 0 {
			add = func() error { return m.AddAdminerToken("site_a", tokenHash(i), live) }
		}
		if err := add(); err != nil {
			t.Fatal(err)
		}
	}
	files := tokenFiles(t, dir)
	if len(files) > maxLiveTokens {
		t.Fatalf("%d tokens minted left %d files in the login directory; at most %d may be kept", minted, len(files), maxLiveTokens)
	}
	for i := minted - maxLiveTokens; i < minted; i++ {
		name := tokenHash(i) + ".json"
		if i%5 == 0 {
			name = "adminer-" + name
		}
		if !files[name] {
			t.Fatalf("token %d of the newest %d was dropped", i, maxLiveTokens)
		}
	}

	// Expired tokens go at the next write.
	m2, dir2 := tokenSite(t)
	past := time.Now().Add(-time.Second)
	for i := range 3 {
		if err := m2.AddLoginToken("site_a", tokenHash(i), past, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := m2.AddLoginToken("site_a", tokenHash(99), live, "", ""); err != nil {
		t.Fatal(err)
	}
	if got := tokenFiles(t, dir2); len(got) != 1 || !got[tokenHash(99)+".json"] {
		t.Fatalf("expired tokens were kept: %v", got)
	}
}
