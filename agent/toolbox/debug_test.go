package toolbox_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxd/sandboxd/agent/sitenet"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/toolbox"
)

type offNetwork struct{}

func (offNetwork) Attach(context.Context, string, netip.Addr) (sitenet.Attachment, error) {
	return sitenet.Attachment{}, errors.New("no network")
}
func (offNetwork) Detach(context.Context, string) error { return nil }

type noUIDs struct{}

func (noUIDs) Claim(string) (int, error) { return 0, errors.New("no uids") }
func (noUIDs) Release(string) error      { return nil }

// TestTailDebugLog: the tail of a log the site wrote as it liked — a 4
// GiB sparse file with no newline at all (PHP's ftruncate), one whose
// last line is far past 4 GiB, a link, a FIFO — is one bounded read
// from the end: at most MaxDebugLogBytes, truncated when the log holds
// more, and nothing that is not a regular file in the site's tree.
func TestTailDebugLog(t *testing.T) {
	dir := t.TempDir()
	const id = "site_debugtail"
	if err := os.MkdirAll(filepath.Join(dir, "records"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "records", id+".json"), []byte(`{"id": "`+id+`", "uid": 2000001}`), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := sites.New(sites.Config{Dir: dir, Network: offNetwork{}, UIDs: noUIDs{}})
	if err != nil {
		t.Fatal(err)
	}
	wpContent := filepath.Join(m.Data(id), "wordpress", "wp-content")
	if err := os.MkdirAll(wpContent, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(wpContent, "debug.log")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("node secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const max = toolbox.MaxDebugLogBytes
	for _, c := range []struct {
		name      string
		make      func(t *testing.T, path string)
		lines     int
		exists    bool
		content   func(string) bool
		truncated bool
	}{
		{name: "no log", make: func(*testing.T, string) {}, lines: 1},
		{name: "a few lines", make: write("one\ntwo\nthree\n"), lines: 2, exists: true,
			content: equals("two\nthree\n")},
		{name: "no final newline", make: write("one\ntwo"), lines: 1, exists: true, content: equals("two")},
		{name: "fewer lines than asked", make: write("one\ntwo\n"), lines: 50, exists: true, content: equals("one\ntwo\n")},
		{name: "4 GiB sparse, no newline at all", make: sparse(4<<30, ""), lines: 1, exists: true, truncated: true,
			content: func(s string) bool { return len(s) == max && strings.Trim(s, "\x00") == "" }},
		{name: "4 GiB sparse, a last line", make: sparse(4<<30, "sandbox-last-line\n"), lines: 1, exists: true, truncated: true,
			content: func(s string) bool { return len(s) == max && strings.HasSuffix(s, "\x00sandbox-last-line\n") }},
		{name: "the lines asked for, before the bound", make: sparse(4<<30, "a\nb\nc"), lines: 2, exists: true, truncated: true,
			content: equals("b\nc")},
		{name: "invalid UTF-8 past the bound", make: sparse(8<<20, strings.Repeat("\xff", max)), lines: 1, exists: true, truncated: true,
			content: func(s string) bool { return len(s) <= max && strings.HasSuffix(s, "\uFFFD") }},
		{name: "a link to the node's files", make: func(t *testing.T, path string) {
			if err := os.Symlink(secret, path); err != nil {
				t.Fatal(err)
			}
		}, lines: 5},
		{name: "a FIFO", make: func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, lines: 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			_ = os.Remove(log)
			c.make(t, log)
			exists, content, truncated, err := toolbox.New(m).TailDebugLog(context.Background(), id, c.lines)
			if err != nil {
				t.Fatal(err)
			}
			if exists != c.exists || truncated != c.truncated || strings.Contains(content, "secret") ||
				(c.content == nil && content != "") || (c.content != nil && !c.content(content)) {
				t.Fatalf("exists %v truncated %v content (%d bytes) %.80q", exists, truncated, len(content), content)
			}
		})
	}
	if _, _, _, err := toolbox.New(m).TailDebugLog(context.Background(), "site_nope", 1); !errors.Is(err, sites.ErrNotFound) {
		t.Fatalf("an unknown site: %v", err)
	}
}

func equals(want string) func(string) bool { return func(s string) bool { return s == want } }

func write(data string) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sparse makes a log of size bytes of nothing, then tail written at its
// end (as PHP's ftruncate, then an append, makes it).
func sparse(size int64, tail string) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(tail), size); err != nil {
			t.Fatal(err)
		}
	}
}
