package toolbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/gitdeploy"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sites/sitestest"
	"github.com/sandboxd/sandboxd/agent/toolbox"
)

// TestPlaceTree places plugins, a theme and a wp-content tree in a real
// site, checks each on the host side (owned by the site's uid, on the
// site's disk) and through WordPress, and checks that refused and failed
// placements leave the site as it was.
func TestPlaceTree(t *testing.T) {
	e := sitestest.SetUp(t)
	// It once hung in CI for 38 minutes in a refused placement: should it
	// hang again, the test says where.
	ctx := sitestest.Watch(t, 8*time.Minute)
	s, err := e.Templates.Create(ctx, sitestest.Req("site_gitp0001", "gitplace", "Git Place"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), s.ID) })
	wpContent := filepath.Join(e.Sites.Data(s.ID), "wordpress", "wp-content")
	sh := func(script string) string {
		t.Helper()
		res, err := e.Sites.Exec(ctx, s.ID, []string{"/bin/sh", "-c", script}, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %v %s %s", script, err, res.Stdout, res.Stderr)
		}
		return string(res.Stdout)
	}
	php := func(code string) string {
		t.Helper()
		res, err := e.Sites.Exec(ctx, s.ID, []string{"php", "-r", `require "/srv/site/wordpress/wp-load.php"; ` +
			`require_once ABSPATH . "wp-admin/includes/plugin.php"; ` + code}, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("php: %v %s %s", err, res.Stdout, res.Stderr)
		}
		return string(res.Stdout)
	}
	// owned checks a placed path on the host: there, on the site's disk,
	// the site's uid's, with the content wanted ("" for a directory).
	owned := func(t *testing.T, rel, content string) {
		t.Helper()
		p := filepath.Join(wpContent, rel)
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if !strings.HasPrefix(real, e.Sites.Data(s.ID)+"/") {
			t.Fatalf("%s is at %s, off the site's disk", rel, real)
		}
		fi, err := os.Lstat(real)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != s.UID || int(st.Gid) != s.UID {
			t.Fatalf("%s is owned by %d:%d, not the site's %d", rel, st.Uid, st.Gid, s.UID)
		}
		if content == "" {
			if !fi.IsDir() {
				t.Fatalf("%s is not a directory", rel)
			}
			return
		}
		if b, err := os.ReadFile(real); err != nil || string(b) != content {
			t.Fatalf("%s: %q %v", rel, b, err)
		}
	}
	absent := func(t *testing.T, rel string) {
		t.Helper()
		if _, err := os.Lstat(filepath.Join(wpContent, rel)); !os.IsNotExist(err) {
			t.Fatalf("%s is there (%v)", rel, err)
		}
	}
	noLeftovers := func(t *testing.T) {
		t.Helper()
		left, _ := filepath.Glob(filepath.Join(wpContent, ".sandbox-*"))
		if len(left) > 0 {
			t.Fatalf("left in wp-content: %v", left)
		}
	}
	home := func() string {
		t.Helper()
		resp, body := sitestest.Get(t, s.Addr(), "gitplace.localhost:8081", "/")
		if resp.StatusCode != 200 {
			t.Fatalf("home: %d %.300s", resp.StatusCode, body)
		}
		return body
	}

	v1 := helloPlugin("1.0", map[string]string{"old-only.php": "<?php // only in 1.0\n"})
	if err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlacePlugin, "hello-git", bytes.NewReader(tree(t, "hello-git", v1))); err != nil {
		t.Fatal(err)
	}
	owned(t, "plugins/hello-git", "")
	owned(t, "plugins/hello-git/inc", "")
	owned(t, "plugins/hello-git/old-only.php", v1["old-only.php"])
	if fi, err := os.Stat(filepath.Join(wpContent, "plugins/hello-git/bin/build.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("build.sh: %v %v", fi, err)
	}
	noLeftovers(t)
	if out := php(`$r = activate_plugin("hello-git/hello-git.php"); echo is_wp_error($r) ? $r->get_error_message() : "activated";`); out != "activated" {
		t.Fatalf("activate 1.0: %s", out)
	}
	if body := home(); !strings.Contains(body, "hello-git 1.0") {
		t.Fatalf("the 1.0 plugin does not run: %.300s", body)
	}

	t.Run("a new version replaces the old", func(t *testing.T) {
		// What a placement killed midway left goes with the next one.
		sh(`mkdir -p /srv/site/wordpress/wp-content/.sandbox-place-stale/inc && echo x > /srv/site/wordpress/wp-content/.sandbox-place-stale/inc/a`)
		v2 := helloPlugin("2.0", map[string]string{"new-only.php": "<?php // only in 2.0\n"})
		if err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlacePlugin, "hello-git", bytes.NewReader(tree(t, "hello-git", v2))); err != nil {
			t.Fatal(err)
		}
		absent(t, "plugins/hello-git/old-only.php")
		owned(t, "plugins/hello-git/new-only.php", v2["new-only.php"])
		owned(t, "plugins/hello-git/hello-git.php", v2["hello-git.php"])
		noLeftovers(t)
		out := php(`$r = activate_plugin("hello-git/hello-git.php"); $d = get_plugin_data(WP_PLUGIN_DIR . "/hello-git/hello-git.php");` +
			`echo is_wp_error($r) ? $r->get_error_message() : (is_plugin_active("hello-git/hello-git.php") ? "active " . $d["Version"] : "inactive");`)
		if out != "active 2.0" {
			t.Fatalf("2.0: %s", out)
		}
		if body := home(); !strings.Contains(body, "hello-git 2.0") {
			t.Fatalf("the 2.0 plugin does not run: %.300s", body)
		}
	})

	t.Run("a branch fetched with git", func(t *testing.T) {
		// The deploy's whole path: gitdeploy fetches from a smart-HTTP
		// server and writes the tree into PlaceTree through a pipe.
		url, head, ca := gitRepoServer(t, helloPlugin("4.0", map[string]string{"git-only.php": "<?php // from git\n"}))
		f := &gitdeploy.Fetcher{Dir: t.TempDir(), CAFile: ca}
		tr, err := f.Fetch(ctx, gitdeploy.Source{RepoID: "rep_place", URL: url, Branch: "main"})
		if err != nil || tr.SHA != head {
			t.Fatalf("fetch: %v %v", tr, err)
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tr.WriteTar(ctx, pw, "hello-git")) }()
		err = e.Box.PlaceTree(ctx, s.ID, toolbox.PlacePlugin, "hello-git", pr)
		pr.CloseWithError(errors.New("placement ended")) // a writer still writing stops
		if err != nil {
			t.Fatal(err)
		}
		owned(t, "plugins/hello-git/git-only.php", "<?php // from git\n")
		absent(t, "plugins/hello-git/new-only.php")
		if fi, err := os.Stat(filepath.Join(wpContent, "plugins/hello-git/bin/build.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
			t.Fatalf("build.sh: %v %v", fi, err)
		}
		if body := home(); !strings.Contains(body, "hello-git 4.0") {
			t.Fatalf("the fetched plugin does not run: %.300s", body)
		}
		// Back to 2.0, which the cases below expect.
		v2 := helloPlugin("2.0", map[string]string{"new-only.php": "<?php // only in 2.0\n"})
		if err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlacePlugin, "hello-git", bytes.NewReader(tree(t, "hello-git", v2))); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a theme", func(t *testing.T) {
		theme := map[string]string{
			"style.css": "/*\nTheme Name: Git Theme\nVersion: 1.2\n*/\n",
			"index.php": "<?php echo '<html><body>git-theme-index'; wp_footer(); echo '</body></html>';\n",
		}
		if err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlaceTheme, "git-theme", bytes.NewReader(tree(t, "git-theme", theme))); err != nil {
			t.Fatal(err)
		}
		owned(t, "themes/git-theme/style.css", theme["style.css"])
		noLeftovers(t)
		if out := php(`$t = wp_get_theme("git-theme"); switch_theme("git-theme"); echo $t->exists() && !$t->errors() ? $t->get("Version") . " " . get_stylesheet() : "broken";`); out != "1.2 git-theme" {
			t.Fatalf("theme: %s", out)
		}
		if body := home(); !strings.Contains(body, "git-theme-index") {
			t.Fatalf("the theme does not serve: %.300s", body)
		}
	})

	t.Run("a wp-content tree keeps uploads and what it lacks", func(t *testing.T) {
		sh(`mkdir -p /srv/site/wordpress/wp-content/uploads/2024/05 && echo photo > /srv/site/wordpress/wp-content/uploads/2024/05/photo.jpg`)
		files := map[string]string{
			"mu-plugins/x.php":    "<?php add_action('wp_footer', function () { echo '<p>mu-x-loaded</p>'; });\n",
			"uploads/planted.txt": "not placed\n",
			"languages/README":    "translations\n",
		}
		if err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlaceWPContent, "", bytes.NewReader(tree(t, "", files))); err != nil {
			t.Fatal(err)
		}
		owned(t, "mu-plugins/x.php", files["mu-plugins/x.php"])
		owned(t, "languages/README", files["languages/README"])
		owned(t, "uploads/2024/05/photo.jpg", "photo\n")
		absent(t, "uploads/planted.txt")
		owned(t, "plugins/hello-git/new-only.php", "<?php // only in 2.0\n")
		owned(t, "themes/git-theme/index.php", "<?php echo '<html><body>git-theme-index'; wp_footer(); echo '</body></html>';\n")
		// The sandbox's own mu-plugin is back (login links rely on it).
		if _, err := os.Stat(filepath.Join(wpContent, "mu-plugins/sandbox.php")); err != nil {
			t.Fatal(err)
		}
		noLeftovers(t)
		if body := home(); !strings.Contains(body, "mu-x-loaded") {
			t.Fatalf("mu-plugins/x.php does not run: %.300s", body)
		}
	})

	// Each failure below must leave plugin 2.0 as it is.
	intact := func(t *testing.T) {
		t.Helper()
		owned(t, "plugins/hello-git/new-only.php", "<?php // only in 2.0\n")
		absent(t, "plugins/hello-git/old-only.php")
		absent(t, "plugins/hello-git/evil")
		noLeftovers(t)
	}
	v3 := helloPlugin("3.0", nil)
	good := tree(t, "hello-git", v3)

	t.Run("failed placements leave the old version", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			tar  []byte
			want error
		}{
			{"a symlink", rawTar(t, &tar.Header{Typeflag: tar.TypeDir, Name: "hello-git/", Mode: 0o755},
				&tar.Header{Typeflag: tar.TypeReg, Name: "hello-git/a.php", Mode: 0o644},
				&tar.Header{Typeflag: tar.TypeSymlink, Name: "hello-git/evil", Linkname: "/srv/site/secrets"}), sites.ErrInvalid},
			{"a hard link", rawTar(t, &tar.Header{Typeflag: tar.TypeReg, Name: "hello-git/a.php", Mode: 0o644},
				&tar.Header{Typeflag: tar.TypeLink, Name: "hello-git/evil", Linkname: "/srv/site/wp-config.php"}), sites.ErrInvalid},
			{"a device", rawTar(t, &tar.Header{Typeflag: tar.TypeChar, Name: "hello-git/evil", Devmajor: 1, Devminor: 3}), sites.ErrInvalid},
			{"a path out", rawTar(t, &tar.Header{Typeflag: tar.TypeReg, Name: "hello-git/../../evil", Mode: 0o644}), sites.ErrInvalid},
			{"an absolute path", rawTar(t, &tar.Header{Typeflag: tar.TypeReg, Name: "/srv/site/wordpress/evil", Mode: 0o644}), sites.ErrInvalid},
			{"outside the folder", rawTar(t, &tar.Header{Typeflag: tar.TypeReg, Name: "other/evil", Mode: 0o644}), sites.ErrInvalid},
			{"the same file twice", rawTar(t, &tar.Header{Typeflag: tar.TypeReg, Name: "hello-git/a.php", Mode: 0o644},
				&tar.Header{Typeflag: tar.TypeReg, Name: "hello-git/a.php", Mode: 0o644}), sites.ErrInvalid},
			{"a truncated tar", good[:len(good)/2], sites.ErrInvalid},
			{"a tar cut at an entry's end", good[:len(good)-1024], sites.ErrInvalid},
			{"not a tar", []byte(strings.Repeat("garbage ", 200)), sites.ErrInvalid},
			{"empty", nil, sites.ErrInvalid},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlacePlugin, "hello-git", bytes.NewReader(tc.tar))
				t.Log(err)
				if !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
				intact(t)
			})
		}
	})

	t.Run("a full disk leaves the old version", func(t *testing.T) {
		// Fill the site's disk but 1 MiB; the new version needs 4.
		sh(`a=$(df -k --output=avail /srv/site/tmp | tail -n 1); fallocate -l $(( (a - 1024) * 1024 )) /srv/site/tmp/fill`)
		defer sh(`rm -f /srv/site/tmp/fill`)
		big := helloPlugin("3.0", map[string]string{"big.bin": strings.Repeat("0123456789abcdef", 4<<16)})
		err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlacePlugin, "hello-git", bytes.NewReader(tree(t, "hello-git", big)))
		t.Log(err)
		if !errors.Is(err, sites.ErrDiskFull) {
			t.Fatalf("got %v, want ErrDiskFull", err)
		}
		intact(t)
	})

	t.Run("a cancelled placement leaves the old version", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		// A reader that gives half the tree, then cancels and stalls
		// until the placement gives up on it.
		r := io.MultiReader(bytes.NewReader(good[:len(good)/2]), readerFunc(func([]byte) (int, error) {
			cancel()
			<-cctx.Done()
			return 0, cctx.Err()
		}))
		if err := e.Box.PlaceTree(cctx, s.ID, toolbox.PlacePlugin, "hello-git", r); err == nil {
			t.Fatal("no error")
		}
		intact(t)
	})

	t.Run("folder names and destinations refused", func(t *testing.T) {
		for _, name := range []string{"", ".", "..", "../x", "../../../etc", "a/b", "/abs", ".hidden", "-rf", "a b", "a\x00b", "a\nb",
			strings.Repeat("x", 101), "~", "$(id)", "`id`", "a;b", "plugins/../..", "é", "a\\b", "*"} {
			err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlacePlugin, name, bytes.NewReader(tree(t, "x", map[string]string{"a.php": "<?php\n"})))
			if !errors.Is(err, sites.ErrInvalid) {
				t.Errorf("folder %q: %v", name, err)
			}
		}
		for _, dest := range []string{"", "mu-plugin", "plugins", "uploads", "../plugin"} {
			if err := e.Box.PlaceTree(ctx, s.ID, dest, "hello-git", bytes.NewReader(good)); !errors.Is(err, sites.ErrInvalid) {
				t.Errorf("destination %q: %v", dest, err)
			}
		}
		wpc := []*tar.Header{
			{Typeflag: tar.TypeReg, Name: ".sandbox-old-x/a", Mode: 0o644},
			{Typeflag: tar.TypeReg, Name: "-rf", Mode: 0o644},
			{Typeflag: tar.TypeReg, Name: "a b/c", Mode: 0o644},
		}
		for _, h := range wpc {
			if err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlaceWPContent, "", bytes.NewReader(rawTar(t, h))); !errors.Is(err, sites.ErrInvalid) {
				t.Errorf("wp-content entry %q: %v", h.Name, err)
			}
		}
		if err := e.Box.PlaceTree(ctx, "site_nope0000", toolbox.PlacePlugin, "hello-git", bytes.NewReader(good)); !errors.Is(err, sites.ErrNotFound) {
			t.Errorf("unknown site: %v", err)
		}
		intact(t)
	})
}

// TestPlaceTreeOnClone: a site cloned from the stock install has its
// tree as an overlay over the template's; placing over a directory of
// the template (the active theme, the whole plugins directory) replaces
// it in the site and nowhere else.
func TestPlaceTreeOnClone(t *testing.T) {
	e := sitestest.SetUp(t, sitestest.Stock)
	ctx := context.Background()
	s, err := e.Templates.Create(ctx, sitestest.Req("site_gitpc001", "gitclone", "Git Clone"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), s.ID) })
	if s.Template == "" {
		t.Fatal("not a clone")
	}
	wpContent := filepath.Join(e.Sites.Data(s.ID), "wordpress", "wp-content")
	res, err := e.Sites.Exec(ctx, s.ID, []string{"php", "-r", `require "/srv/site/wordpress/wp-load.php"; echo get_stylesheet();`}, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("php: %v %+v", err, res)
	}
	theme := string(res.Stdout)
	before, err := os.ReadDir(filepath.Join(wpContent, "themes", theme))
	if err != nil || len(before) < 3 {
		t.Fatalf("the stock theme %q: %v %v", theme, before, err)
	}
	files := map[string]string{
		"style.css": "/*\nTheme Name: Replaced\n*/\n",
		"index.php": "<?php echo '<html><body>replaced-stock-theme</body></html>';\n",
	}
	if err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlaceTheme, theme, bytes.NewReader(tree(t, theme, files))); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadDir(filepath.Join(wpContent, "themes", theme))
	if err != nil || len(after) != 2 {
		t.Fatalf("the theme holds %v (%v)", after, err)
	}
	for _, f := range after {
		fi, _ := f.Info()
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != s.UID {
			t.Fatalf("%s owned by %d", f.Name(), st.Uid)
		}
	}
	resp, body := sitestest.Get(t, s.Addr(), "gitclone.localhost:8081", "/")
	if resp.StatusCode != 200 || !strings.Contains(body, "replaced-stock-theme") {
		t.Fatalf("home: %d %.300s", resp.StatusCode, body)
	}

	// The whole plugins directory, from the template, goes.
	own := map[string]string{"plugins/own/own.php": "<?php\n/*\nPlugin Name: Own\n*/\n"}
	if err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlaceWPContent, "", bytes.NewReader(tree(t, "", own))); err != nil {
		t.Fatal(err)
	}
	plugins, err := os.ReadDir(filepath.Join(wpContent, "plugins"))
	if err != nil || len(plugins) != 1 || plugins[0].Name() != "own" {
		t.Fatalf("plugins: %v %v", plugins, err)
	}
	// A refused tree leaves the theme as placed.
	bad := rawTar(t, &tar.Header{Typeflag: tar.TypeSymlink, Name: theme + "/index.php", Linkname: "/srv/site/secrets"})
	if err := e.Box.PlaceTree(ctx, s.ID, toolbox.PlaceTheme, theme, bytes.NewReader(bad)); !errors.Is(err, sites.ErrInvalid) {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(wpContent, "themes", theme, "index.php")); err != nil || string(b) != files["index.php"] {
		t.Fatalf("index.php: %q %v", b, err)
	}
	left, _ := filepath.Glob(filepath.Join(wpContent, ".sandbox-*"))
	if len(left) > 0 {
		t.Fatalf("left in wp-content: %v", left)
	}
}
