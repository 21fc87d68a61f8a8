package sites

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestTouchOwnedRefusesWhatTheSitePlanted: a link out of the state
// directory, a FIFO or a directory under a marker's name fails the call
// and touches nothing on the host.
func TestTouchOwnedRefusesWhatTheSitePlanted(t *testing.T) {
	hosttest.Root(t)
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(outside, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"link", "fifo", "sub"} {
		if err := touchOwned(dir, 2099020, name); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(outside, &st); err != nil || st.Uid != 0 || st.Mode&0o777 != 0o600 {
		t.Fatalf("the host file changed: uid %d mode %o %v", st.Uid, st.Mode&0o777, err)
	}
	if err := touchOwned(dir, 2099020, "installed"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(dir, "installed"), &st); err != nil || st.Uid != 2099020 {
		t.Fatalf("marker owner %d %v", st.Uid, err)
	}
}
