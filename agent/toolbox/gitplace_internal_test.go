package toolbox

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/agent/sites"
)

// TestCleanTar: what reaches the site's tar is directories and regular
// files under checked names, the folder's prefix taken off; uploads/ of
// a wp-content tree is left out.
func TestCleanTar(t *testing.T) {
	mk := func(hdrs ...*tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hdrs {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Size > 0 {
				_, _ = tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		_ = tw.Close()
		return buf.Bytes()
	}
	read := func(b []byte) []string {
		var out []string
		tr := tar.NewReader(bytes.NewReader(b))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, h.Name+" "+string(h.Typeflag)+" "+(map[bool]string{true: "x", false: "-"})[h.Mode&0o100 != 0])
		}
	}
	var out bytes.Buffer
	tops, err := cleanTar(&out, bytes.NewReader(mk(
		&tar.Header{Typeflag: tar.TypeDir, Name: "p/", Mode: 0o777},
		&tar.Header{Typeflag: tar.TypeReg, Name: "p/a.php", Mode: 0o4777, Size: 3, Uid: 0, Uname: "root"},
		&tar.Header{Typeflag: tar.TypeDir, Name: "p/inc/", Mode: 0o700},
		&tar.Header{Typeflag: tar.TypeReg, Name: "p/inc/b.php", Mode: 0o600, Size: 1},
	)), "p")
	want := []string{"a.php 0 x", "inc/ 5 x", "inc/b.php 0 -"}
	if err != nil || !slices.Equal(read(out.Bytes()), want) || !slices.Equal(tops, []string{"a.php", "inc"}) {
		t.Fatalf("%v %v %v", read(out.Bytes()), tops, err)
	}
	out.Reset()
	tops, err = cleanTar(&out, bytes.NewReader(mk(
		&tar.Header{Typeflag: tar.TypeReg, Name: "uploads/x.jpg", Mode: 0o644, Size: 1},
		&tar.Header{Typeflag: tar.TypeReg, Name: "mu-plugins/x.php", Mode: 0o644, Size: 1},
	)), "")
	if err != nil || !slices.Equal(tops, []string{"mu-plugins"}) || len(read(out.Bytes())) != 1 {
		t.Fatalf("%v %v", tops, err)
	}
	for _, name := range []string{"p/../x", "/p/x", "p/./x", "p//x", "q/x", "px", "p/a\\b"} {
		_, err := cleanTar(io.Discard, bytes.NewReader(mk(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: 1})), "p")
		if !errors.Is(err, sites.ErrInvalid) {
			t.Errorf("%q: %v", name, err)
		}
	}
	whole := mk(&tar.Header{Typeflag: tar.TypeReg, Name: "p/a", Mode: 0o644, Size: 1})
	if _, err := cleanTar(io.Discard, bytes.NewReader(whole[:len(whole)-1024]), "p"); !errors.Is(err, sites.ErrInvalid) {
		t.Errorf("no end-of-archive blocks: %v", err)
	}
	for _, typ := range []byte{tar.TypeSymlink, tar.TypeLink, tar.TypeChar, tar.TypeBlock, tar.TypeFifo} {
		_, err := cleanTar(io.Discard, bytes.NewReader(mk(&tar.Header{Typeflag: typ, Name: "p/x", Linkname: "/etc/passwd"})), "p")
		if !errors.Is(err, sites.ErrInvalid) {
			t.Errorf("type %c: %v", typ, err)
		}
	}
}
