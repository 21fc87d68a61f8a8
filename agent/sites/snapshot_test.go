package sites_test

import (
	"archive/tar"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/agent/dumpload"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sites/sitestest"
	"github.com/sandboxd/sandboxd/agent/toolbox"
)

// writerFunc is a writer made of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// snapshotEntry is one entry of a snapshot's files.
type snapshotEntry struct {
	typ  byte
	link string
	data string
}

// readSnapshotFiles decompresses a snapshot's files and reads its tar.
func readSnapshotFiles(t *testing.T, b []byte) map[string]snapshotEntry {
	t.Helper()
	if !bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		t.Fatalf("the files are not zstd: %x", b[:min(len(b), 8)])
	}
	zr, err := zstd.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	out := map[string]snapshotEntry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != "wp-content/" && !strings.HasPrefix(h.Name, "wp-content/") {
			t.Fatalf("entry %q is not under wp-content/", h.Name)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = snapshotEntry{typ: h.Typeflag, link: h.Linkname, data: string(data)}
	}
}

// TestSnapshot: a running site with a post, an option holding its URL
// (PHP-serialized), files of its own and hostile links in wp-content is
// snapshotted while it serves; the snapshot restores into another site,
// which then has the file, the post and the option with URLs moved to
// it, and none of the links that left wp-content. A snapshot holds the
// site's lock only to start (a restore waits for it, other operations do
// not), a cancelled one leaves no process behind, and an unknown or
// stopped site or a bound too small fail clearly.
func TestSnapshot(t *testing.T) {
	e := sitestest.SetUp(t)
	ctx := context.Background()
	t0 := time.Now()
	a, err := e.Sites.Make(ctx, sitestest.Req("site_snap0001", "snapsrc", "Snapshot Source"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), a.ID) })
	b, err := e.Sites.Make(ctx, sitestest.Req("site_snap0002", "snapdst", "Snapshot Target"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), b.ID) })
	t.Logf("two sites: %s", time.Since(t0))

	sh := func(s *sites.Site, script string) string {
		t.Helper()
		res, err := e.Sites.Exec(ctx, s.ID, []string{"sh", "-c", script}, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("sh in %s: %v %+v", s.ID, err, res)
		}
		return string(res.Stdout)
	}
	php := func(s *sites.Site, code string) string {
		t.Helper()
		return sh(s, `exec php -r 'require "/srv/site/wordpress/wp-load.php"; `+strings.ReplaceAll(code, "'", `'\''`)+`'`)
	}
	snapshot := func(ctx context.Context, id string, files io.Writer, limit int64) (*sites.SnapshotInfo, []byte, error) {
		var db bytes.Buffer
		info, err := e.Sites.Snapshot(ctx, id, files, &db, limit)
		return info, db.Bytes(), err
	}
	tars := func(s *sites.Site) string {
		t.Helper()
		var out []string
		for _, l := range strings.Split(sh(s, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done`), "\n") {
			if strings.HasPrefix(l, "tar ") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}

	// A fresh site, for its size and time.
	var fresh bytes.Buffer
	t0 = time.Now()
	info, db, err := snapshot(ctx, b.ID, &fresh, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a fresh site's snapshot: files %d bytes (%d entries), database %d bytes, in %s",
		info.FilesBytes, info.Entries, info.DatabaseBytes, time.Since(t0))
	if info.FilesBytes != int64(fresh.Len()) || info.DatabaseBytes != int64(len(db)) || info.Dropped != 0 {
		t.Fatalf("fresh snapshot: %+v, %d and %d bytes written", info, fresh.Len(), len(db))
	}

	php(a, `update_option("sbx_snap", array("home" => home_url("/shop"), "n" => 3)); wp_insert_post(array("post_title" => "Snapshot post", "post_status" => "publish", "post_content" => "<a href=\"".home_url("/about")."\">about</a>"));`)
	sh(a, `set -e; cd /srv/site/wordpress/wp-content
mkdir -p uploads/2024
echo "snapshot file" > uploads/2024/hello.txt
echo "odd name" > "uploads/2024/é x.txt"
ln uploads/2024/hello.txt hard.txt
ln -s / root-link
ln -s /etc/shadow shadow-link
ln -s ../../../wp-config.php uploads/2024/config-link
ln -s ../themes uploads/themes-link
mkfifo fifo
echo secret > unreadable.txt; chmod 000 unreadable.txt`)

	// The snapshot, with a request to the site while it streams.
	var files bytes.Buffer
	served := ""
	serving := writerFunc(func(p []byte) (int, error) {
		if served == "" {
			served = "no answer"
			r, _ := http.NewRequest("GET", "http://"+a.Addr()+"/", nil)
			r.Host = "snapsrc.localhost:8081"
			if resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(r); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				served = fmt.Sprintf("%d %t", resp.StatusCode, strings.Contains(string(body), "Snapshot post"))
			}
		}
		return files.Write(p)
	})
	before := time.Now()
	info, db, err = snapshot(ctx, a.ID, serving, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot: %+v in %s", info, time.Since(before))
	if served != "200 true" {
		t.Fatalf("the site during its snapshot: %s", served)
	}
	if info.FilesBytes != int64(files.Len()) || info.DatabaseBytes != int64(len(db)) || info.TakenAt.Before(before) || info.TakenAt.After(time.Now()) {
		t.Fatalf("snapshot info %+v: %d and %d bytes written, started %s", info, files.Len(), len(db), before)
	}
	ents := readSnapshotFiles(t, files.Bytes())
	for name, want := range map[string]snapshotEntry{
		"wp-content/uploads/2024/hello.txt": {typ: tar.TypeReg, data: "snapshot file\n"},
		"wp-content/uploads/2024/é x.txt":   {typ: tar.TypeReg, data: "odd name\n"},
		"wp-content/hard.txt":               {typ: tar.TypeReg, data: "snapshot file\n"},
		"wp-content/uploads/themes-link":    {typ: tar.TypeSymlink, link: "../themes"},
		"wp-content/mu-plugins/sandbox.php": {typ: tar.TypeReg},
	} {
		got, ok := ents[name]
		if want.data == "" && ok {
			want.data = got.data
		}
		if got != want {
			t.Errorf("%s: %+v (present %v), want %+v", name, got, ok, want)
		}
	}
	// Links that leave wp-content, the FIFO and what the site cannot read
	// are not in it, nor anything of their targets'.
	for _, name := range []string{"wp-content/root-link", "wp-content/shadow-link", "wp-content/uploads/2024/config-link",
		"wp-content/fifo", "wp-content/unreadable.txt"} {
		if _, ok := ents[name]; ok {
			t.Errorf("%s is in the snapshot", name)
		}
	}
	for name, ent := range ents {
		if strings.HasPrefix(ent.data, "root:") || strings.Contains(ent.data, "DB_PASSWORD") || strings.HasPrefix(name, "wp-content/root-link/") {
			t.Errorf("%s holds what lies outside wp-content", name)
		}
	}
	if info.Dropped != 4 || info.Entries != int64(len(ents))+info.Dropped {
		t.Errorf("%d entries, %d left out; %d in the tar", info.Entries, info.Dropped, len(ents))
	}
	if !bytes.HasPrefix(db, []byte("-- sandboxd: database "+a.DBName+" as of ")) || !bytes.Contains(db, []byte("Snapshot post")) {
		t.Fatalf("database part: %.300s", db)
	}

	// Restored into another site, as RestoreArchive takes an import.
	t0 = time.Now()
	res, err := e.Sites.RestoreArchive(ctx, b.ID, sites.RestoreRequest{JobID: "job_snap0001", SourceURL: a.URL,
		Parts: []sites.RestorePart{{Kind: "archive", Name: "files.tar.zst", Size: int64(files.Len())}, {Kind: "sql", Name: "database.sql", Size: int64(len(db))}}},
		io.MultiReader(bytes.NewReader(files.Bytes()), bytes.NewReader(db)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restore: %s, %+v", time.Since(t0), res)
	if res.Format != "tar.zst" || res.Prefix != "wp_" || res.Skipped != 0 {
		t.Fatalf("restore: %+v", res)
	}
	if _, body := sitestest.Get(t, b.Addr(), "snapdst.localhost:8081", "/wp-content/uploads/2024/hello.txt"); body != "snapshot file\n" {
		t.Fatalf("the restored file: %q", body)
	}
	resp, body := sitestest.Get(t, b.Addr(), "snapdst.localhost:8081", "/")
	if resp.StatusCode != 200 || !strings.Contains(body, "Snapshot post") || !strings.Contains(body, "Snapshot Source") ||
		!strings.Contains(body, b.URL) || strings.Contains(body, a.URL) {
		t.Fatalf("the restored site's home: %d %.400s", resp.StatusCode, body)
	}
	bs := e.Sites.Get(b.ID)
	pool, err := sql.Open("mysql", dumpload.DSN(bs.DBUser, bs.DBPassword, e.DB.Addr(), bs.DBName))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	shop := b.URL + "/shop"
	for q, want := range map[string]string{
		"SELECT option_value FROM wp_options WHERE option_name = 'siteurl'":    b.URL,
		"SELECT option_value FROM wp_options WHERE option_name = 'home'":       b.URL,
		"SELECT option_value FROM wp_options WHERE option_name = 'sbx_snap'":   fmt.Sprintf(`a:2:{s:4:"home";s:%d:"%s";s:1:"n";i:3;}`, len(shop), shop),
		"SELECT post_content FROM wp_posts WHERE post_title = 'Snapshot post'": `<a href="` + b.URL + `/about">about</a>`,
	} {
		var got string
		if err := pool.QueryRowContext(ctx, q).Scan(&got); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", q, got, err, want)
		}
	}
	content := filepath.Join(e.Sites.Data(b.ID), "wordpress", "wp-content")
	for _, name := range []string{"root-link", "shadow-link", "uploads/2024/config-link", "fifo"} {
		if _, err := os.Lstat(filepath.Join(content, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s in the restored site: %v", name, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(content, "uploads", "themes-link")); err != nil || l != "../themes" {
		t.Errorf("the link inside wp-content: %q %v", l, err)
	}

	t.Run("unknown site", func(t *testing.T) {
		_, _, err := snapshot(ctx, "site_none0000", io.Discard, 0)
		if !errors.Is(err, sites.ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("bound too small", func(t *testing.T) {
		// Too small for the files, and enough for them but not the
		// database: the bound is on both parts.
		for _, limit := range []int64{1000, info.FilesBytes + 1000} {
			var got bytes.Buffer
			_, _, err := snapshot(ctx, a.ID, &got, limit)
			if !errors.Is(err, sites.ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("over its bound of %d bytes", limit)) {
				t.Fatalf("limit %d: err = %v", limit, err)
			}
			if int64(got.Len()) > limit {
				t.Fatalf("limit %d: %d bytes written", limit, got.Len())
			}
			if p := tars(a); p != "" {
				t.Fatalf("limit %d: tar left running:\n%s", limit, p)
			}
		}
	})

	t.Run("lock and restore", func(t *testing.T) {
		// A snapshot held up in its files: the site's other operations
		// go on, a restore waits for it.
		started, release := make(chan struct{}), make(chan struct{})
		first := true
		held := writerFunc(func(p []byte) (int, error) {
			if first {
				first = false
				close(started)
				<-release
			}
			return len(p), nil
		})
		snapDone := make(chan error, 1)
		go func() {
			_, _, err := snapshot(ctx, a.ID, held, 0)
			snapDone <- err
		}()
		<-started
		if p := tars(a); !strings.Contains(p, "wp-content") {
			t.Fatalf("no tar at work during the snapshot: %q", p)
		}
		t0 := time.Now()
		on := true
		if _, err := e.Box.SetDebug(a.ID, toolbox.DebugPatch{WPDebug: &on}); err != nil || time.Since(t0) > 5*time.Second {
			t.Fatalf("an operation during a snapshot: %v after %s", err, time.Since(t0))
		}
		restoreDone := make(chan error, 1)
		go func() {
			_, err := e.Sites.RestoreArchive(ctx, a.ID, sites.RestoreRequest{JobID: "job_snap0002", SourceURL: a.URL,
				Parts: []sites.RestorePart{{Kind: "archive", Size: int64(files.Len())}, {Kind: "sql", Size: int64(len(db))}}},
				io.MultiReader(bytes.NewReader(files.Bytes()), bytes.NewReader(db)))
			restoreDone <- err
		}()
		select {
		case err := <-restoreDone:
			t.Fatalf("a restore ran during a snapshot: %v", err)
		case <-time.After(2 * time.Second):
		}
		close(release)
		if err := <-snapDone; err != nil {
			t.Fatal(err)
		}
		if err := <-restoreDone; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		// Enough that tar is still at work when the snapshot is cancelled.
		sh(a, "head -c 40000000 /dev/urandom > /srv/site/wordpress/wp-content/uploads/big.bin")
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		n := 0
		cancelling := writerFunc(func(p []byte) (int, error) {
			if n += len(p); n > 1<<20 {
				cancel()
			}
			return len(p), nil
		})
		_, _, err := snapshot(cctx, a.ID, cancelling, 0)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if p := tars(a); p != "" {
			t.Fatalf("tar left running:\n%s", p)
		}
		sh(a, "rm /srv/site/wordpress/wp-content/uploads/big.bin")
	})

	t.Run("stopped site", func(t *testing.T) {
		if _, err := e.Sites.Stop(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		_, _, err := snapshot(ctx, b.ID, io.Discard, 0)
		if !errors.Is(err, sites.ErrNotRunning) || !strings.Contains(err.Error(), "stopped") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestSnapshotOfClone: a site that is a clone of the node's stock
// install (its tree an overlay on the template's, as every site of an
// agent is) snapshots its merged wp-content, a file of its own included,
// and its own database.
func TestSnapshotOfClone(t *testing.T) {
	e := sitestest.SetUp(t, sitestest.Stock)
	ctx := context.Background()
	s, err := e.Templates.Create(ctx, sitestest.Req("site_snapcl01", "snapclone", "Snapshot Clone"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), s.ID) })
	if s.Template == "" {
		t.Fatal("the site is not a clone")
	}
	if res, err := e.Sites.Exec(ctx, s.ID, []string{"sh", "-c", "echo mine > /srv/site/wordpress/wp-content/uploads/mine.txt"}, nil); err != nil || res.ExitCode != 0 {
		t.Fatal(err, res)
	}
	var files, db bytes.Buffer
	t0 := time.Now()
	info, err := e.Sites.Snapshot(ctx, s.ID, &files, &db, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a fresh clone's snapshot: %+v in %s", info, time.Since(t0))
	ents := readSnapshotFiles(t, files.Bytes())
	if ents["wp-content/uploads/mine.txt"].data != "mine\n" || ents["wp-content/mu-plugins/sandbox.php"].typ != tar.TypeReg {
		t.Fatalf("the clone's files: %d entries", len(ents))
	}
	themes := 0
	for name := range ents {
		if strings.HasPrefix(name, "wp-content/themes/") && strings.HasSuffix(name, "/style.css") {
			themes++
		}
	}
	if themes == 0 || !bytes.Contains(db.Bytes(), []byte("Snapshot Clone")) || !bytes.Contains(db.Bytes(), []byte(s.URL)) {
		t.Fatalf("the clone's snapshot: %d themes; database %.300s", themes, db.Bytes())
	}
}
