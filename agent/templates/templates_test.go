package templates_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sites/sitestest"
	"github.com/sandboxd/sandboxd/agent/templates"
)

// TestFreezeAndClone: a site with a file of its own and an option holding
// its URL (PHP-serialized) is frozen into a template; a clone made from
// it serves at its own URL with the file and the option moved there, its
// writes stay its own, a reset brings it back to the template, and the
// template's files are the template uid's, never the site's.
func TestFreezeAndClone(t *testing.T) {
	e := sitestest.SetUp(t)
	ctx := context.Background()
	t0 := time.Now()
	src, err := e.Templates.Create(ctx, sitestest.Req("site_tpls0001", "tplsource", "Template Source"), "")
	t.Logf("source: %s", time.Since(t0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), src.ID) })
	php := func(s *sites.Site, code string) string {
		t.Helper()
		res, err := e.Sites.Exec(ctx, s.ID, []string{"php", "-r", `require "/srv/site/wordpress/wp-load.php"; ` + code}, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("php in %s: %v %s %s", s.ID, err, res.Stdout, res.Stderr)
		}
		return string(res.Stdout)
	}
	php(src, `update_option("sbx_links", array("home" => home_url("/shop"), "n" => 3)); wp_insert_post(array("post_title" => "Frozen post", "post_status" => "publish", "post_content" => "<a href=\"".home_url("/about")."\">about</a>"));`)
	if res, err := e.Sites.Exec(ctx, src.ID, []string{"sh", "-c", "echo original > /srv/site/wordpress/hello.txt"}, nil); err != nil || res.ExitCode != 0 {
		t.Fatal(err, res)
	}

	t0 = time.Now()
	tpl, err := e.Templates.Freeze(ctx, src.ID, "tpl_abcd0001")
	t.Logf("freeze: %s", time.Since(t0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := e.Templates.Delete(context.Background(), tpl.ID); err != nil {
			t.Error(err)
		}
	})
	if tpl.URL != src.URL || tpl.SizeBytes == 0 || tpl.WordPressVersion == "" {
		t.Fatalf("template %+v", tpl)
	}
	// The source serves again after the freeze.
	if resp, _ := sitestest.Get(t, src.Addr(), "tplsource.localhost:8081", "/"); resp.StatusCode != 200 {
		t.Fatalf("source after freeze: %d", resp.StatusCode)
	}

	r := sitestest.Req("site_clone001", "clone-one", "")
	t0 = time.Now()
	clone, err := e.Templates.Create(ctx, r, tpl.ID)
	t.Logf("clone to its first answer: %s", time.Since(t0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), clone.ID) })
	resp, body := sitestest.Get(t, clone.Addr(), "clone-one.localhost:8081", "/")
	if resp.StatusCode != 200 || !strings.Contains(body, "Template Source") || !strings.Contains(body, "Frozen post") {
		t.Fatalf("clone: %d %.300s", resp.StatusCode, body)
	}
	if _, body := sitestest.Get(t, clone.Addr(), "clone-one.localhost:8081", "/hello.txt"); body != "original\n" {
		t.Fatalf("clone's hello.txt: %q", body)
	}
	if got := php(clone, `$o = get_option("sbx_links"); echo $o["home"], "|", get_option("siteurl");`); got != r.URL+"/shop|"+r.URL {
		t.Fatalf("clone's URLs: %q", got)
	}
	if got := php(clone, `echo get_posts(array("title" => "Frozen post"))[0]->post_content;`); !strings.Contains(got, r.URL+"/about") {
		t.Fatalf("clone's post: %q", got)
	}

	// The clone's writes are its own.
	if res, err := e.Sites.Exec(ctx, clone.ID, []string{"sh", "-c", "echo changed > /srv/site/wordpress/hello.txt"}, nil); err != nil || res.ExitCode != 0 {
		t.Fatal(err, res)
	}
	if _, body := sitestest.Get(t, src.Addr(), "tplsource.localhost:8081", "/hello.txt"); body != "original\n" {
		t.Fatalf("the clone's write reached the source: %q", body)
	}
	files := filepath.Join(e.Cfg.Dir, "templates", tpl.ID, "files")
	if b, _ := os.ReadFile(filepath.Join(files, "hello.txt")); string(b) != "original\n" {
		t.Fatalf("the clone's write reached the template: %q", b)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(files, "hello.txt"), &st); err != nil || st.Uid != sites.TemplateUID {
		t.Fatalf("template file owner %d %v", st.Uid, err)
	}

	// Reset goes back to the template.
	t0 = time.Now()
	if _, err := e.Templates.Reset(ctx, clone.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("reset: %s", time.Since(t0))
	if _, body := sitestest.Get(t, clone.Addr(), "clone-one.localhost:8081", "/hello.txt"); body != "original\n" {
		t.Fatalf("after reset: %q", body)
	}

	// A template under a site stays.
	if _, err := e.Templates.Delete(ctx, tpl.ID); err == nil {
		t.Fatal("a template deleted under its clone")
	}

	// Restore replaces the source's content with the template's, keeping
	// its id and URL; the source is a clone of the template afterwards.
	php(src, `update_option("blogname", "Changed after the freeze");`)
	t0 = time.Now()
	restored, err := e.Templates.Restore(ctx, src.ID, tpl.ID)
	t.Logf("restore: %s", time.Since(t0))
	if err != nil {
		t.Fatal(err)
	}
	if restored.URL != src.URL || restored.Template != tpl.ID || restored.UID != src.UID {
		t.Fatalf("restored %+v", restored)
	}
	if got := php(restored, `echo get_option("blogname"), "|", get_option("home");`); got != "Template Source|"+src.URL {
		t.Fatalf("restored options: %q", got)
	}
	if _, err := e.Templates.Restore(ctx, src.ID, "tpl_none0000"); err == nil {
		t.Fatal("a restore from an unknown template")
	}
	if _, err := e.Templates.Restore(ctx, "site_none0000", tpl.ID); err == nil {
		t.Fatal("a restore of an unknown site")
	}

	// Unknown and malformed templates are refused.
	if _, err := e.Templates.Create(ctx, sitestest.Req("site_clone002", "clone-two", ""), "tpl_none0000"); err == nil {
		t.Fatal("a clone of an unknown template")
	}
	if _, err := e.Templates.Create(ctx, sitestest.Req("site_clone003", "clone-three", ""), "../etc"); err == nil {
		t.Fatal("a clone of a path")
	}

	// Once no site is made from it, the template goes.
	for _, id := range []string{clone.ID, src.ID} {
		if _, err := e.Sites.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if existed, err := e.Templates.Delete(ctx, tpl.ID); err != nil || !existed {
		t.Fatalf("delete template: %v %v", existed, err)
	}
	if _, err := os.Stat(filepath.Join(e.Cfg.Dir, "templates", tpl.ID)); !os.IsNotExist(err) {
		t.Fatalf("template tree left: %v", err)
	}
}

// TestStockClones: with stock templates, fresh sites are clones of one
// install per runtime image, made once: each has its own title, admin
// email and an unusable password hash of its own, the hidden site the
// stock was made from is gone, a reset keeps the identity, and the stock
// is the node's own (not listed for the control plane, refused as a
// template id from outside).
func TestStockClones(t *testing.T) {
	e := sitestest.SetUp(t, sitestest.Stock)
	ctx := context.Background()
	// A caller that gives up waiting leaves the build to the builder,
	// which finishes it for the next (one build: the first create below
	// finds it made or under way).
	if _, err := e.Sites.Image(ctx, "8.2"); err != nil { // imported, so only the build is waited for
		t.Fatal(err)
	}
	gone, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if _, err := e.Templates.Stock(gone, "8.2"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a caller that gave up: %v", err)
	}
	cancel()
	var made []*sites.Site
	for i, name := range []string{"First Fresh", "Second Fresh"} {
		r := sitestest.Req(fmt.Sprintf("site_stockuse%d", i), fmt.Sprintf("fresh-%d", i), name)
		r.AdminEmail = fmt.Sprintf("owner%d@example.com", i)
		t0 := time.Now()
		s, err := e.Templates.Create(ctx, r, "")
		t.Logf("create %d (stock made on the first): %s", i, time.Since(t0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = e.Sites.Delete(context.Background(), s.ID) })
		made = append(made, s)
	}
	a, b := made[0], made[1]
	if !templates.IsStock(a.Template) || a.Template != b.Template || !a.Stock || a.WordPressVersion == "" {
		t.Fatalf("sites %+v %+v", a, b)
	}
	if ids := e.Templates.List(); len(ids) != 0 {
		t.Fatalf("stock listed for the control plane: %v", ids)
	}
	if begun, made := strings.Count(e.Logs.String(), "stock template: making it"), strings.Count(e.Logs.String(), "stock template made"); begun != 1 || made != 1 {
		t.Fatalf("%d stock builds begun and %d made, want 1 of each", begun, made)
	}
	if n := len(e.Sites.List()); n != 2 {
		t.Fatalf("%d sites on the node; the stock's own site stayed?", n)
	}
	who := func(s *sites.Site) string {
		t.Helper()
		res, err := e.Sites.Exec(ctx, s.ID, []string{"php", "-r", `require "/srv/site/wordpress/wp-load.php"; $u = get_userdata(1);
			echo get_option("blogname"), "|", get_option("admin_email"), "|", $u->user_login, "|", $u->user_email, "|", $u->user_pass, "|", home_url();`}, nil)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("php: %v %s %s", err, res.Stdout, res.Stderr)
		}
		return string(res.Stdout)
	}
	wa, wb := strings.Split(who(a), "|"), strings.Split(who(b), "|")
	if wa[0] != "First Fresh" || wa[1] != "owner0@example.com" || wa[2] != "admin" || wa[3] != "owner0@example.com" || wa[5] != a.URL {
		t.Fatalf("first site's identity %q", wa)
	}
	if wb[0] != "Second Fresh" || wb[3] != "owner1@example.com" || wb[5] != b.URL {
		t.Fatalf("second site's identity %q", wb)
	}
	if wa[4] == wb[4] || !strings.HasPrefix(wa[4], "$sbx$") {
		t.Fatalf("password hashes %q %q", wa[4], wb[4])
	}
	if resp, body := sitestest.Get(t, a.Addr(), "fresh-0.localhost:8081", "/"); resp.StatusCode != 200 || !strings.Contains(body, "First Fresh") {
		t.Fatalf("first site: %d %.200s", resp.StatusCode, body)
	}
	if _, err := e.Templates.Reset(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if w := strings.Split(who(a), "|"); w[0] != "First Fresh" || w[1] != "owner0@example.com" || w[4] == wa[4] {
		t.Fatalf("after reset %q", w)
	}
	for _, f := range []func() error{
		func() error {
			_, err := e.Templates.Create(ctx, sitestest.Req("site_stockx01", "stock-x", ""), a.Template)
			return err
		},
		func() error { _, err := e.Templates.Freeze(ctx, a.ID, a.Template); return err },
		func() error { _, err := e.Templates.Restore(ctx, b.ID, a.Template); return err },
	} {
		if err := f(); !errors.Is(err, sites.ErrInvalid) {
			t.Fatalf("a stock template id from outside: %v", err)
		}
	}
}
