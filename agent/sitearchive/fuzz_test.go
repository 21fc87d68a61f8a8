package sitearchive

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzRead: whatever the bytes, Read does not panic, refuses with one of
// its sentinels, keeps its promises to the handler and removes its spool.
func FuzzRead(f *testing.F) {
	siteTar := tarOf(f, site(true)...)
	f.Add(siteTar)
	f.Add(gzipOf(f, siteTar))
	f.Add(zstdOf(f, siteTar))
	f.Add(zipOf(f, site(false)...))
	f.Add(tarOf(f, wholeRoot(f)...))
	f.Add(zipOf(f, file(`wp-content\a`, "b"), symlink("wp-content/l", "a"), file("db.sql.gz", string(gzipOf(f, []byte("x"))))))
	f.Add(tarOf(f, symlink("wp-content/l", "../.."), hardlink("wp-content/h", "../x")))
	lim := Limits{MaxEntries: 20, MaxBytes: 1 << 16, MaxFileBytes: 1 << 14, MaxArchiveBytes: 1 << 16}
	spool := f.TempDir() // inputs run one at a time in each process
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := &recorder{}
		sum, err := Read(bytes.NewReader(data), spool, lim, rec)
		if err != nil && !errors.Is(err, ErrUnsafe) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrFormat) {
			t.Errorf("error without a sentinel: %v", err)
		}
		if (err == nil) == (sum == nil) {
			t.Errorf("summary %v with error %v", sum, err)
		}
		if sum != nil {
			calls := map[string]int{}
			for _, l := range rec.log {
				calls[strings.Fields(l)[0]]++
			}
			if sum.Bytes != rec.bytes || sum.Files != calls["file"] || sum.Dirs != calls["dir"] ||
				sum.Links != calls["symlink"]+calls["hardlink"] || len(sum.Dumps) != calls["sql"] {
				t.Errorf("summary %+v, handler got %v and %d bytes", sum, calls, rec.bytes)
			}
		}
		if len(rec.broken) > 0 {
			t.Errorf("broken promises: %q", rec.broken)
		}
		if left, _ := os.ReadDir(spool); len(left) > 0 {
			t.Errorf("spool left %v", left)
		}
	})
}
