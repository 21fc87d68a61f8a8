package sites_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sites/sitestest"
)

// countingReader counts what was read of it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestImportDumpBombIsRefusedAtItsCap: a multipart import's "sql" part
// that is a .sql.gz decompressing far past the dump bound (a gzip bomb:
// under 2 MiB that inflate to 512 MiB) is refused as too large once the
// bound is passed - not inflated to its end, spooled or loaded - and
// leaves nothing in the spool; a dump within the bound loads.
func TestImportDumpBombIsRefusedAtItsCap(t *testing.T) {
	e := sitestest.SetUp(t)
	ctx := context.Background()
	old := sites.ImportLimits
	sites.ImportLimits.MaxFileBytes = 8 << 20
	t.Cleanup(func() { sites.ImportLimits = old })
	site := &sites.Site{ID: "site_bomb", URL: "http://bomb.localhost:8081", DBName: "wp_bomb", DBUser: "wp_bomb", DBPassword: "pw-bomb"}
	if err := e.DB.CreateSiteDatabase(ctx, "", site.DBName, site.DBUser, site.DBPassword); err != nil {
		t.Fatal(err)
	}
	if err := e.DB.StageDatabase(ctx, "", site.DBName+"_i", site.DBUser); err != nil {
		t.Fatal(err)
	}
	// gz compresses times copies of line.
	gz := func(line string, times int) []byte {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		chunk := []byte(strings.Repeat(line, min(times, max(1, (1<<20)/len(line)))))
		for n := 0; n < times; n += len(chunk) / len(line) {
			if _, err := zw.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	restore := func(name string, dump []byte) (*countingReader, error) {
		cr := &countingReader{r: bytes.NewReader(dump)}
		_, err := e.Sites.UnpackForTests(ctx, site, sites.RestoreRequest{JobID: "job_bomb", SourceURL: "https://old.example",
			Parts: []sites.RestorePart{{Kind: "sql", Name: name, Size: int64(len(dump))}}}, cr)
		return cr, err
	}
	bomb := gz("-- "+strings.Repeat("a", 61)+"\n", (512<<20)/64)
	t.Logf("the bomb: %d KiB, 512 MiB inflated", len(bomb)>>10)
	cr, err := restore("db.sql.gz", bomb)
	if !errors.Is(err, sites.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "larger than 8388608 bytes") {
		t.Fatalf("a dump inflating to 512 MiB with a bound of 8 MiB: %v", err)
	}
	// Refused after its bound: what was read inflates to little more.
	if cr.n > int64(len(bomb))/8 {
		t.Fatalf("%d of the bomb's %d bytes were read (inflated) before the refusal", cr.n, len(bomb))
	}
	if left, _ := filepath.Glob(filepath.Join(e.Cfg.Dir, "spool", "*")); len(left) > 0 {
		t.Fatalf("left in the spool: %v", left)
	}
	// Whatever its name, a gzip stream is inflated (and bounded).
	if _, err := restore("db.sql", bomb); !errors.Is(err, sites.ErrPayloadTooLarge) {
		t.Fatalf("the bomb named .sql: %v", err)
	}
	// A plain dump past the bound is refused too; one within it loads.
	if _, err := restore("big.sql", bytes.Repeat([]byte("-- padding\n"), 1<<20)); !errors.Is(err, sites.ErrPayloadTooLarge) {
		t.Fatalf("a 11 MiB dump: %v", err)
	}
	small := "CREATE TABLE wp_options (option_id int PRIMARY KEY, option_name varchar(64), option_value text);\n" +
		"INSERT INTO wp_options VALUES (1, 'siteurl', 'https://old.example');\n"
	if _, err := restore("ok.sql.gz", gz(small, 1)); err != nil {
		t.Fatalf("a small .sql.gz: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.Cfg.Dir, "spool")); err != nil {
		t.Fatal(err)
	}
}
