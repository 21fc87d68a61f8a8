package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/oauth2"

	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/runtime"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// liveSite is a WordPress outside the service, as a customer's live site
// is: WordPress from the PHP 8.2 image served by PHP's own web server in
// a container on the host's network (so it reaches the API on loopback,
// as a live site reaches the service over the internet), with a
// database of its own on the node's MariaDB.
type liveSite struct {
	url, dir, password, log string
	// db is its database and user on the node's MariaDB, a name of its
	// own: tests that share a dev system run side by side.
	db string
}

// liveSetup gives the live site what the connector must carry: posts
// with images, an attachment, an active plugin, serialized options
// holding its URL, a theme setting.
const liveSetup = `<?php
define('WP_INSTALLING', true);
$_SERVER['HTTP_HOST'] = getenv('LIVE_HOST');
require '/live/wp/wp-load.php';
require_once ABSPATH . 'wp-admin/includes/upgrade.php';
require_once ABSPATH . 'wp-admin/includes/plugin.php';
if (!is_blog_installed()) {
  wp_install('Live shop', 'owner', 'owner@example.com', false, '', getenv('LIVE_PASSWORD'));
}
$home = home_url();
$id = wp_insert_post(array('post_title' => 'Live post', 'post_status' => 'publish',
  'post_content' => '<p>Hello from the live site <img src="'.$home.'/wp-content/uploads/2024/02/live.png"></p>'));
$att = wp_insert_attachment(array('post_title' => 'live', 'post_mime_type' => 'image/png', 'post_status' => 'inherit',
  'guid' => $home.'/wp-content/uploads/2024/02/live.png'), '2024/02/live.png', $id);
update_post_meta($att, '_wp_attached_file', '2024/02/live.png');
update_option('live_settings', array('home' => $home.'/', 'pages' => array($home.'/shop', 'ünï ✓'), 'n' => 42));
update_option('permalink_structure', '');
$r = activate_plugin('live-marker/live-marker.php');
if (is_wp_error($r)) { fwrite(STDERR, $r->get_error_message()); exit(1); }
$r = activate_plugin('sandboxd-connector/sandboxd-connector.php');
if (is_wp_error($r)) { fwrite(STDERR, $r->get_error_message()); exit(1); }
echo "live ready\n";
`

// startLiveSite runs the live WordPress until the test ends.
func startLiveSite(t *testing.T, d *devSystem, dbPort string) *liveSite {
	t.Helper()
	ctx := context.Background()
	socket, _ := agenttest.Containerd(t)
	rt := agenttest.Runtime(t, socket)
	img, err := agenttest.Catalog(t).PHP(ctx, rt, "8.2")
	if err != nil {
		t.Fatal(err)
	}
	// The live site's own database and account, made by the node's
	// MariaDB administrator (the test stands in for a hosting company).
	admin := d.adminDB(t, dbPort)
	pw := secret.New("")
	db := "live_" + strings.ToLower(ids.Random(4))
	for _, q := range []string{"CREATE DATABASE " + db, "CREATE USER '" + db + "'@'127.0.0.1' IDENTIFIED BY '" + pw + "'",
		"GRANT ALL ON " + db + ".* TO '" + db + "'@'127.0.0.1'"} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + db)
		_, _ = admin.Exec("DROP USER IF EXISTS '" + db + "'@'127.0.0.1'")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	live := &liveSite{url: "http://" + addr, dir: t.TempDir(), password: "live-" + secret.New("")[:12], db: db}
	wp := filepath.Join(live.dir, "wp")
	for _, p := range []string{filepath.Join(wp, "wp-content", "plugins", "live-marker"), filepath.Join(wp, "wp-content", "uploads", "2024", "02")} {
		if err := os.MkdirAll(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	write := func(rel, body string) {
		if err := os.WriteFile(filepath.Join(live.dir, rel), []byte(body), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	write("wp/wp-content/plugins/live-marker/live-marker.php", "<?php\n/* Plugin Name: Live marker */\n"+
		"add_action('wp_footer', function () { $o = get_option('live_settings'); echo '<!-- live-marker ' . esc_html($o['home']) . ' -->'; });\n")
	write("wp/wp-content/uploads/2024/02/live.png", string(pngBytes))
	write("setup.php", liveSetup)
	write("wp-config.php", fmt.Sprintf(`<?php
define('DB_NAME', '%s'); define('DB_USER', '%s'); define('DB_PASSWORD', '%s');
define('DB_HOST', '127.0.0.1:%s'); define('DB_CHARSET', 'utf8mb4'); define('DB_COLLATE', '');
$table_prefix = 'shop_';
define('WP_HOME', '%s'); define('WP_SITEURL', '%s');
define('AUTH_KEY', '%s'); define('SECURE_AUTH_KEY', '%s'); define('LOGGED_IN_KEY', '%s'); define('NONCE_KEY', '%s');
define('FS_METHOD', 'direct'); define('DISABLE_WP_CRON', true);
if (!defined('ABSPATH')) { define('ABSPATH', '/live/wp/'); }
require_once ABSPATH . 'wp-settings.php';
`, db, db, pw, dbPort, live.url, live.url, secret.New(""), secret.New(""), secret.New(""), secret.New("")))
	// The connector plugin, as a site owner installs it.
	if out, err := exec.Command("cp", "-a", "../connector/plugin/sandboxd-connector", filepath.Join(wp, "wp-content", "plugins")).CombinedOutput(); err != nil {
		t.Fatalf("copy the connector: %v %s", err, out)
	}
	if err := os.Chmod(live.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	script := `set -e
cp -aL /usr/share/wordpress/. /live/wp/ 2>/dev/null || true
cp /live/wp-config.php /live/wp/wp-config.php
chmod -R a+rwX /live/wp
php /live/setup.php
exec php -S "$LIVE_HOST" -t /live/wp`
	logPath := filepath.Join(agenttest.ShortDir(t), "live.log")
	err = rt.Run(ctx, runtime.Spec{ID: "live-site", Image: img, Args: []string{"/bin/sh", "-c", script},
		Env:    []string{"LIVE_HOST=" + addr, "LIVE_PASSWORD=" + live.password, "PHP_CLI_SERVER_WORKERS=24", "HOME=/tmp"},
		Mounts: []runtime.Mount{{Source: live.dir, Target: "/live"}}, LogPath: logPath})
	if err != nil {
		t.Fatalf("start the live site: %v", err)
	}
	st.WaitFor(t, 2*time.Minute, "the live site", func() bool {
		resp, err := http.Get(live.url + "/")
		if err != nil {
			if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "Fatal") || strings.Contains(string(b), "exit") {
				t.Fatalf("live site: %s", b)
			}
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	live.log = logPath
	return live
}

// TestConnectorPlugin: a site owner installs the connector plugin on a
// live WordPress (not one of ours), connects it through the OAuth flow
// in a real browser (consent clicked on the service's page), and starts
// a copy; the plugin exports the database and files, uploads them in
// chunks, and the service restores a sandbox that serves the same
// content at its own URL with serialized options intact.
func TestConnectorPlugin(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)
	// A sandbox gives the node's MariaDB port.
	probe := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Probe"}).Must(t, 202)
	d.waitJob(t, probe.Str("jobId"))
	port := fmt.Sprint(d.owner.Do("GET", "/api/app/sites/"+probe.Str("site.id")+"/database", nil).Must(t, 200).Get("database.port"))
	live := startLiveSite(t, d, port)

	t0 := time.Now()
	if resp, err := http.Get(live.url + "/wp-login.php"); err != nil {
		t.Fatalf("live login page: %v", err)
	} else {
		resp.Body.Close()
		t.Logf("live login page: %d in %s", resp.StatusCode, time.Since(t0))
	}
	ctx, cancel := browserFor(t, 6*time.Minute)
	defer cancel()
	// The browser belongs to the first call's context: start it on the
	// test's, so a step's own time limit does not close it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	fail := func(what string, err error) {
		t.Helper()
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		logged, _ := os.ReadFile(live.log)
		t.Fatalf("%s: %v\nat %s\n%.2000s\nlive site log:\n%.3000s", what, err, loc, text, logged)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		// The plugin's page redraws itself as its status changes: an
		// action on an element the redraw replaced did nothing, and is
		// done again on the page as it now is. Each action of a step is
		// retried on its own, so none before it is done twice.
		for _, a := range actions {
			err := chromedp.Do(sctx, a)
			for try := 0; try < 20 && err != nil && staleNode(err); try++ {
				err = chromedp.Do(sctx, a)
			}
			if err != nil {
				fail(what, err)
			}
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		// The page's script may replace the element between finding it
		// and reading it: read the new one.
		for i := 0; i < 5 && err != nil && strings.Contains(err.Error(), "No node with given id"); i++ {
			time.Sleep(200 * time.Millisecond)
			v, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		}
		if err != nil {
			fail("read "+sel, err)
		}
		return v
	}
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	run("sign in to the live wp-admin",
		chromedp.Navigate(live.url+"/wp-login.php"),
		chromedp.WaitVisible(css("#user_login")),
		chromedp.SetValue(css("#user_login"), "owner"),
		chromedp.SetValue(css("#user_pass"), live.password),
		chromedp.Click(css("#wp-submit")),
		chromedp.WaitVisible(css("#wpadminbar")))
	run("set the service URL",
		chromedp.Navigate(live.url+"/wp-admin/tools.php?page=sandboxd-connector"),
		chromedp.WaitVisible(css("#sbx-service-url")),
		chromedp.SetValue(css("#sbx-service-url"), d.owner.Base),
		chromedp.Click(css("#sbx-save")),
		chromedp.WaitVisible(css("#sbx-connect")))
	run("connect: the service's consent page, signed in with a personal token",
		chromedp.Click(css("#sbx-connect")),
		chromedp.WaitVisible(css("#signin-token")),
		chromedp.SetValue(css("#token"), d.owner.Token),
		chromedp.Click(css("#signin-token")),
		chromedp.WaitVisible(css("#approve")))
	scopes, host := text("#scopes"), text("#redirect-host")
	if !strings.Contains(live.url, strings.TrimSpace(host)) || !strings.Contains(scopes, "imports") {
		t.Fatalf("consent shows host %q, scopes %q", host, scopes)
	}
	run("approve: back on the plugin, connected", chromedp.Click(css("#approve")), chromedp.WaitVisible(css("#sbx-start")))
	if status := text("#sbx-status"); !strings.Contains(status, "owner@") && !strings.Contains(strings.ToLower(status), "connected") {
		t.Fatalf("status after connecting: %q", status)
	}
	run("copy the site", chromedp.Click(css("#sbx-start")))
	// The page works through its steps; follow it as a person would.
	var state string
	clicked := time.Now()
	for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		a, err := chromedp.Run(ctx, chromedp.AttributeValue(css("#sbx-progress"), "data-state"))
		if err != nil {
			fail("read the progress", err)
		}
		state = a.Value
		// A click that came before the page's script took the button
		// starts nothing: after 10 s of nothing, click again, as a person
		// would.
		if state == "idle" && time.Since(clicked) > 10*time.Second {
			t.Logf("the copy had not started 10 s after the click: clicking again")
			run("copy the site, again", chromedp.Click(css("#sbx-start")))
			clicked = time.Now()
		}
		if state == "failed" {
			fail("the copy failed: "+text("#sbx-error"), nil)
		}
		if state == "ready" {
			break
		}
		if time.Now().After(deadline) {
			// It once timed out under load with nothing said: what the
			// page, the live site and the API saw then.
			imports := d.owner.Do("GET", "/api/app/imports", nil)
			fail(fmt.Sprintf("the copy is not ready after 4 minutes (progress %q; the API's imports: %.1500s)", state, imports.Raw), nil)
		}
	}
	result := text("#sbx-result-url")

	// The import, as the API sees it.
	list := d.owner.Do("GET", "/api/app/imports", nil).Must(t, 200).List("imports")
	if len(list) != 1 || list[0]["status"] != "ready" || list[0]["sourceKind"] != "remote_plugin" || list[0]["sourceUrl"] != live.url {
		t.Fatalf("imports: %v", list)
	}
	siteID, siteURL := list[0]["siteId"].(string), fmt.Sprint(list[0]["siteUrl"])
	if !strings.Contains(result, siteURL) {
		t.Fatalf("the plugin shows %q, the sandbox is %s", result, siteURL)
	}
	d.putFile(t, siteID, "live-check.php", `<?php require __DIR__.'/wp-load.php';
$p = get_posts(array('title' => 'Live post', 'numberposts' => 1));
echo json_encode(array('home' => home_url(), 'blogname' => get_option('blogname'), 'opt' => get_option('live_settings'),
  'content' => $p ? $p[0]->post_content : null, 'plugins' => get_option('active_plugins'),
  'pic' => file_exists(WP_CONTENT_DIR.'/uploads/2024/02/live.png'), 'owner' => (bool) get_user_by('login', 'owner')));`)
	code, body := served(t, siteURL+"/live-check.php")
	if code != 200 || !strings.Contains(body, `"blogname":"Live shop"`) || !strings.Contains(body, `"owner":true`) || !strings.Contains(body, `"pic":true`) ||
		!strings.Contains(body, `"home":"`+strings.ReplaceAll(siteURL, "/", `\/`)+`\/"`) || !strings.Contains(body, `"n":42`) ||
		!strings.Contains(body, `live-marker\/live-marker.php`) || strings.Contains(body, strings.ReplaceAll(live.url, "/", `\/`)) {
		t.Fatalf("the sandbox's content: %d %s", code, body)
	}
	code, page := served(t, siteURL+"/")
	if code != 200 || !strings.Contains(page, "live-marker "+siteURL+"/") {
		t.Fatalf("the sandbox's page: %d %.500s", code, page)
	}
	// The serialized option, as stored, reads back whole in PHP.
	var raw string
	if err := d.dbAccess(t, siteID).QueryRow("SELECT option_value FROM wp_options WHERE option_name = 'live_settings'").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if u := unserialized(t, raw); u["home"] != siteURL+"/" || fmt.Sprint(u["pages"]) != fmt.Sprint([]any{siteURL + "/shop", "ünï ✓"}) {
		t.Fatalf("serialized option: %s", raw)
	}
	// The connector's token is listed with the account's, as an oauth one.
	toks := d.owner.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens")
	found := false
	for _, tk := range toks {
		found = found || (tk["kind"] == "oauth" && strings.Contains(fmt.Sprint(tk["scope"]), "import:write"))
	}
	if !found {
		t.Fatalf("tokens: %v", toks)
	}
}

// TestOAuthInBrowser: golang.org/x/oauth2 as the client of a real
// `sandboxd dev`, consent given in Chromium: sign in with the one-time
// link mailed to the account (read from the outbox), approve, the
// browser lands on the client's loopback callback with the code, and the
// exchange with the verifier gives a token that works on the imports
// routes only. Denying in the browser sends access_denied.
func TestOAuthInBrowser(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)
	dir := d.dir
	got := make(chan url.Values, 4)
	cb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r) // the browser's favicon request
			return
		}
		got <- r.URL.Query()
		fmt.Fprint(w, "<html><body id=done>back at the client</body></html>")
	}))
	defer cb.Close()
	anon := st.NewClient(t, d.owner.Base, "")
	clientID := anon.Do("POST", "/api/connect/register", map[string]any{"client_name": "Browser test", "redirect_uris": []string{cb.URL + "/callback"}}).
		Must(t, 201).Str("client_id")
	cfg := &oauth2.Config{ClientID: clientID, RedirectURL: cb.URL + "/callback", Scopes: []string{"import:read", "import:write"},
		Endpoint: oauth2.Endpoint{AuthURL: d.owner.Base + "/connect/authorize", TokenURL: d.owner.Base + "/api/connect/token", AuthStyle: oauth2.AuthStyleInParams}}
	me := d.owner.Do("GET", "/api/account/me", nil).Must(t, 200).Str("user.email")

	ctx, cancel := browser(t)
	defer cancel()
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	verifier := oauth2.GenerateVerifier()
	if err := chromedp.Do(ctx, chromedp.Navigate(cfg.AuthCodeURL("state-1", oauth2.S256ChallengeOption(verifier))),
		chromedp.WaitVisible(css("#email")), chromedp.SendKeys(css("#email"), me), chromedp.Click(css("#signin-email")),
		chromedp.WaitVisible(css("#notice"))); err != nil {
		t.Fatalf("ask for a sign-in link: %v", err)
	}
	// No SMTP server: the operator's outbox holds the message.
	out, err := run(t, nil, "admin", "outbox", "--data-dir", dir)
	// The outbox is the shared system's: only this account's mail counts.
	var mine strings.Builder
	for _, m := range strings.Split(out, "\n---- ") {
		if strings.Contains(m, "\nTo: "+me+"\n") {
			mine.WriteString(m)
		}
	}
	links := regexp.MustCompile(`https?://\S+/connect/signin\?t=[A-Za-z0-9_%-]+`).FindAllString(mine.String(), -1)
	if err != nil || len(links) == 0 {
		t.Fatalf("no sign-in link mailed: %v\n%s", err, out)
	}
	link := links[len(links)-1]
	if err := chromedp.Do(ctx, chromedp.Navigate(link), chromedp.WaitVisible(css("#approve")), chromedp.Click(css("#approve")),
		chromedp.WaitVisible(css("#done"))); err != nil {
		t.Fatalf("approve: %v", err)
	}
	q := st.Await(t, got, 10*time.Second, "the callback")
	if q.Get("state") != "state-1" || q.Get("code") == "" {
		t.Fatalf("callback: %v", q)
	}
	tok, err := cfg.Exchange(context.Background(), q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	c := st.NewClient(t, d.owner.Base, tok.AccessToken)
	c.Do("GET", "/api/app/imports", nil).Must(t, 200)
	c.Do("GET", "/api/app/sites", nil).Must(t, 401)

	// Deny: the browser goes back with access_denied.
	if err := chromedp.Do(ctx, chromedp.Navigate(cfg.AuthCodeURL("state-2", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))),
		chromedp.WaitVisible(css("#deny")), chromedp.Click(css("#deny")), chromedp.WaitVisible(css("#done"))); err != nil {
		t.Fatalf("deny: %v", err)
	}
	if q := st.Await(t, got, 10*time.Second, "the callback"); q.Get("error") != "access_denied" || q.Get("state") != "state-2" {
		t.Fatalf("deny callback: %v", q)
	}
}
