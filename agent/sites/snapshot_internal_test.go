package sites

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/agent/sitearchive"
)

// TestCopySnapshotTar: what a site's tar may hold (or a tar the site
// tampered with) against what the snapshot copies: links that leave
// wp-content and special files are left out, names outside wp-content
// and a wp-content that is not a directory are refused, the bounds a
// restore has are kept, and only names, modes, sizes, times, data and
// link targets pass.
func TestCopySnapshotTar(t *testing.T) {
	type ent struct {
		name, link string
		typ        byte
		data       string
	}
	dir := func(n string) ent { return ent{name: n, typ: tar.TypeDir} }
	file := func(n, d string) ent { return ent{name: n, typ: tar.TypeReg, data: d} }
	sym := func(n, l string) ent { return ent{name: n, typ: tar.TypeSymlink, link: l} }
	for _, tc := range []struct {
		name    string
		in      []ent
		lim     sitearchive.Limits
		want    string // the copy's entries: "name type [target|data]", one a line
		dropped int64
		err     string
	}{
		{name: "a site", in: []ent{dir("wp-content/"), dir("wp-content/uploads/"), file("wp-content/uploads/a.txt", "hello"),
			sym("wp-content/uploads/t", "../themes"), sym("wp-content/l", "uploads/a.txt")},
			want: "wp-content/ 5\nwp-content/uploads/ 5\nwp-content/uploads/a.txt 0 hello\nwp-content/uploads/t 2 ../themes\nwp-content/l 2 uploads/a.txt\n"},
		{name: "links that leave", in: []ent{dir("wp-content/"), sym("wp-content/root", "/"), sym("wp-content/shadow", "/etc/shadow"),
			sym("wp-content/up", ".."), sym("wp-content/a/up", "../../wp-config.php"), file("wp-content/x", "x")},
			want: "wp-content/ 5\nwp-content/x 0 x\n", dropped: 4},
		{name: "special files and hard links", in: []ent{dir("wp-content/"), {name: "wp-content/fifo", typ: tar.TypeFifo},
			{name: "wp-content/dev", typ: tar.TypeChar}, file("wp-content/a", "a"), {name: "wp-content/h", typ: tar.TypeLink, link: "wp-content/a"}},
			want: "wp-content/ 5\nwp-content/a 0 a\n", dropped: 3},
		{name: "no wp-content", in: nil, err: "no wp-content"},
		{name: "outside wp-content", in: []ent{dir("wp-content/"), file("wp-config.php", "x")}, err: "not under wp-content"},
		{name: "climbing", in: []ent{file("wp-content/../../etc/x", "x")}, err: "not under wp-content"},
		{name: "absolute", in: []ent{file("/wp-content/x", "x")}, err: "not under wp-content"},
		{name: "wp-content a link", in: []ent{sym("wp-content", "/")}, err: "not a directory"},
		{name: "too many entries", in: []ent{dir("wp-content/"), file("wp-content/a", "a"), file("wp-content/b", "b")},
			lim: sitearchive.Limits{MaxEntries: 2}, err: "more than 2 entries"},
		{name: "a file too large", in: []ent{dir("wp-content/"), file("wp-content/a", "abcdef")},
			lim: sitearchive.Limits{MaxFileBytes: 5}, err: "over the 5 a restore takes"},
		{name: "too many bytes", in: []ent{dir("wp-content/"), file("wp-content/a", "abc"), file("wp-content/b", "abc")},
			lim: sitearchive.Limits{MaxBytes: 5}, err: "more than 5 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in bytes.Buffer
			tw := tar.NewWriter(&in)
			for _, e := range tc.in {
				h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o4755, Size: int64(len(e.data)),
					Uid: 1234, Uname: "site", PAXRecords: map[string]string{"SCHILY.xattr.user.x": "y"}}
				if err := tw.WriteHeader(h); err != nil {
					t.Fatal(err)
				}
				if _, err := io.WriteString(tw, e.data); err != nil {
					t.Fatal(err)
				}
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			lim := sitearchive.Limits{MaxEntries: 100, MaxBytes: 1 << 20, MaxFileBytes: 1 << 20}
			if tc.lim.MaxEntries > 0 {
				lim.MaxEntries = tc.lim.MaxEntries
			}
			if tc.lim.MaxBytes > 0 {
				lim.MaxBytes = tc.lim.MaxBytes
			}
			if tc.lim.MaxFileBytes > 0 {
				lim.MaxFileBytes = tc.lim.MaxFileBytes
			}
			var out bytes.Buffer
			info := &SnapshotInfo{}
			err := copySnapshotTar(&in, &out, lim, info)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				if strings.Contains(tc.err, "more than") || strings.Contains(tc.err, "over the") {
					if !errors.Is(err, ErrTooLarge) {
						t.Fatalf("a bound's error is not ErrTooLarge: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			copied := out.Bytes()
			var got strings.Builder
			tr := tar.NewReader(bytes.NewReader(copied))
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if h.Uid != 0 || h.Uname != "" || len(h.PAXRecords) != 0 || h.Mode&^0o777 != 0 {
					t.Errorf("%s: more than the copy passes on: %+v", h.Name, h)
				}
				data, _ := io.ReadAll(tr)
				got.WriteString(h.Name + " " + string(rune(h.Typeflag)))
				if h.Linkname != "" {
					got.WriteString(" " + h.Linkname)
				}
				if len(data) > 0 {
					got.WriteString(" " + string(data))
				}
				got.WriteString("\n")
			}
			if got.String() != tc.want || info.Dropped != tc.dropped || info.Entries != int64(len(tc.in)) {
				t.Fatalf("copy:\n%s(want\n%s), %d dropped (want %d), %d entries", got.String(), tc.want, info.Dropped, tc.dropped, info.Entries)
			}
			// What the copy holds, a restore takes.
			if _, err := sitearchive.Read(bytes.NewReader(copied), t.TempDir(), sitearchive.DefaultLimits, nopHandler{}); err != nil {
				t.Fatalf("the copy is not an import's archive: %v", err)
			}
		})
	}
}

type nopHandler struct{}

func (nopHandler) Dir(string, fs.FileMode) error                    { return nil }
func (nopHandler) File(string, fs.FileMode, int64, io.Reader) error { return nil }
func (nopHandler) Symlink(string, string) error                     { return nil }
func (nopHandler) Hardlink(string, string) error                    { return nil }
func (nopHandler) SQL(string, io.Reader) error                      { return nil }
