package mariadb

import (
	"path/filepath"
	"testing"
)

// TestPersistentPortIsBelowTheEphemeralRange: the server's port is
// picked where outgoing connections never take it, and kept.
func TestPersistentPortIsBelowTheEphemeralRange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "port")
	p, err := persistentPort(path)
	if err != nil {
		t.Fatal(err)
	}
	if p < 10000 || p >= 32768 {
		t.Fatalf("port %d, want one in [10000, 32768)", p)
	}
	again, err := persistentPort(path)
	if err != nil || again != p {
		t.Fatalf("the port was not kept: %d then %d (%v)", p, again, err)
	}
}
