package logwriter

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestWriterRotatesAtItsCap(t *testing.T) {
	p := filepath.Join(t.TempDir(), "container.log")
	w, err := Open(p, 4096)
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.Repeat([]byte("x"), 99)
	line = append(line, '\n')
	for i := 0; i < 1000; i++ { // 100 KB through a 4 KiB cap
		if n, err := w.Write(line); err != nil || n != len(line) {
			t.Fatalf("write: %d %v", n, err)
		}
	}
	if n, err := w.Write(bytes.Repeat([]byte("y"), 10000)); err != nil || n != 10000 {
		t.Fatalf("big write: %d %v", n, err)
	}
	w.Close()
	var total int64
	for _, f := range []string{p, p + ".1"} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 4096 {
			t.Fatalf("%s is %d bytes, over the cap", f, st.Size())
		}
		total += st.Size()
	}
	b, _ := os.ReadFile(p)
	if !bytes.HasSuffix(b, []byte("yyyy")) {
		t.Fatal("the newest output is not kept")
	}
	// Reopened, it continues from the size on disk.
	w, err = Open(p, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.size != int64(len(b)) {
		t.Fatalf("reopened at %d, file has %d", w.size, len(b))
	}
}
