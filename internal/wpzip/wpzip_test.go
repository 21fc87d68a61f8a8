package wpzip

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
)

type entry struct {
	name, body string
	mode       fs.FileMode
}

func build(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.mode != 0 {
			h.SetMode(e.mode)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const pluginHead = "<?php\n/**\n * Plugin Name: Hello Sandbox\n * Version: 1.2.3\n */\n"

func TestInspect(t *testing.T) {
	big := strings.Repeat("a", 2<<20)
	tests := []struct {
		name    string
		zip     []byte
		lim     Limits
		kind    string
		dir     string
		version string
		wantErr string
	}{
		{name: "plugin", zip: build(t, entry{name: "hello/"}, entry{name: "hello/hello.php", body: pluginHead},
			entry{name: "hello/inc/x.php", body: "<?php // Plugin Name: not me"}), kind: "plugin", dir: "hello", version: "1.2.3"},
		{name: "single file plugin", zip: build(t, entry{name: "solo.php", body: pluginHead}), kind: "plugin", dir: "solo"},
		{name: "theme", zip: build(t, entry{name: "blank/style.css", body: "/*\nTheme Name: Blank\nVersion: 2\n*/"},
			entry{name: "blank/index.php", body: "<?php"}), kind: "theme", dir: "blank", version: "2"},
		{name: "traversal", zip: build(t, entry{name: "hello/../../evil.php", body: pluginHead}), wantErr: "leaves"},
		{name: "absolute", zip: build(t, entry{name: "/etc/cron.d/x", body: "x"}), wantErr: "absolute"},
		{name: "drive letter", zip: build(t, entry{name: "C:/x.php", body: "x"}), wantErr: "absolute"},
		{name: "backslash", zip: build(t, entry{name: `hello\..\x.php`, body: "x"}), wantErr: "backslash"},
		{name: "symlink", zip: build(t, entry{name: "hello/hello.php", body: pluginHead},
			entry{name: "hello/link", body: "/etc/passwd", mode: fs.ModeSymlink | 0o777}), wantErr: "symlink"},
		{name: "entry count bomb", zip: build(t, entry{name: "a/a.php", body: pluginHead}, entry{name: "a/b"}, entry{name: "a/c"}),
			lim: Limits{MaxEntries: 2, MaxBytes: 1 << 20}, wantErr: "entries"},
		{name: "size bomb", zip: build(t, entry{name: "a/a.php", body: pluginHead}, entry{name: "a/big", body: big}),
			lim: Limits{MaxEntries: 10, MaxBytes: 1 << 20}, wantErr: "more than the limit"},
		{name: "two top-level dirs", zip: build(t, entry{name: "a/a.php", body: pluginHead}, entry{name: "b/b.php", body: pluginHead}), wantErr: "top-level"},
		{name: "no header", zip: build(t, entry{name: "a/a.php", body: "<?php echo 1;"}), wantErr: "Plugin Name"},
		{name: "not a zip", zip: []byte("hello"), wantErr: "not a ZIP"},
		{name: "bad dir name", zip: build(t, entry{name: ".hidden/a.php", body: pluginHead}), wantErr: "not a valid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := tt.lim
			if lim.MaxEntries == 0 {
				lim = DefaultLimits
			}
			info, err := Inspect(tt.zip, lim)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v; want ErrInvalid mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.Kind != tt.kind || info.Dir != tt.dir || (tt.version != "" && info.Version != tt.version) {
				t.Fatalf("got %+v", info)
			}
		})
	}
}

// A ZIP whose header understates an entry's size is caught while
// decompressing, so the declared sizes cannot smuggle a bomb past the limit.
func TestInspectLyingSize(t *testing.T) {
	data := build(t, entry{name: "a/a.php", body: pluginHead + strings.Repeat("x", 4096)})
	// Patch the central directory's uncompressed size of the only entry to 10.
	i := bytes.LastIndex(data, []byte("PK\x01\x02"))
	copy(data[i+24:i+28], []byte{10, 0, 0, 0})
	if _, err := Inspect(data, DefaultLimits); !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
}

// TestWalk: Walk hands over every file with its clean name, counts the
// bytes a callback leaves unread, and stops a bomb at the limit.
func TestWalk(t *testing.T) {
	var seen []string
	err := Walk(BuildRaw([2]string{"a/b.txt", "hello"}, [2]string{"c/", ""}, [2]string{"./d.txt", "x"}), DefaultLimits, func(name string, r io.Reader) error {
		seen = append(seen, name)
		return nil
	})
	if err != nil || strings.Join(seen, ",") != "a/b.txt,d.txt" {
		t.Fatalf("walk: %v %v", seen, err)
	}
	bomb := BuildRaw([2]string{"zeros", strings.Repeat("\x00", 4<<20)})
	if len(bomb) > 64<<10 {
		t.Fatalf("the bomb is %d bytes compressed", len(bomb))
	}
	err = Walk(bomb, Limits{MaxEntries: 10, MaxBytes: 1 << 20}, func(string, io.Reader) error { return nil })
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "more than the limit") {
		t.Fatalf("bomb unread by the callback: %v", err)
	}
	err = Walk(bomb, Limits{MaxEntries: 10, MaxBytes: 1 << 20}, func(_ string, r io.Reader) error { _, err := io.Copy(io.Discard, r); return err })
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("bomb read by the callback: %v", err)
	}
	for _, bad := range [][2]string{{"../x", "x"}, {"/abs", "x"}, {`a\b`, "x"}} {
		if err := Walk(BuildRaw(bad), DefaultLimits, func(string, io.Reader) error { return nil }); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", bad[0], err)
		}
	}
	if err := Walk(BuildRaw([2]string{"a", "1"}, [2]string{"b", "2"}), Limits{MaxEntries: 1, MaxBytes: 100}, func(string, io.Reader) error { return nil }); err == nil {
		t.Error("too many entries")
	}
}
