package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// magentaPlugin is the plugin the loop installs: a magenta band across
// the top of every front-end page.
const magentaPlugin = `<?php
/*
Plugin Name: MCP Band
Version: 1.0
*/
add_action('wp_footer', function () { echo '<div style="position:fixed;top:0;left:0;right:0;height:150px;background:#ff00ff;z-index:99999"></div>'; });
`

// callback is an OAuth client's loopback redirect URI: it hands the
// query the browser brought to whoever waits.
type callback struct {
	srv *httptest.Server
	got chan url.Values
}

func newCallback(t *testing.T) *callback {
	c := &callback{got: make(chan url.Values, 4)}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		c.got <- r.URL.Query()
		fmt.Fprint(w, "<html><body id=done>back at the client</body></html>")
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// consent does in a real browser what a person does on the service's
// consent page: sign in with a personal token, look at what is asked,
// approve. It returns the consent page's scope text.
func consent(t *testing.T, authURL, token string) string {
	t.Helper()
	ctx, cancel := browser(t)
	defer cancel()
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	if err := chromedp.Do(ctx, chromedp.Navigate(authURL), chromedp.WaitVisible(css("#signin-token")),
		chromedp.SetValue(css("#token"), token), chromedp.Click(css("#signin-token")), chromedp.WaitVisible(css("#approve"))); err != nil {
		t.Fatalf("consent page: %v", err)
	}
	scopes, err := chromedp.Run(ctx, chromedp.Text(css("#scopes")))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(css("#approve")), chromedp.WaitVisible(css("#done"))); err != nil {
		t.Fatalf("approve: %v", err)
	}
	return scopes
}

// decodePNG decodes a screenshot.
func decodePNG(t *testing.T, b []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG (%d bytes): %v", len(b), err)
	}
	return img
}

// magentaAt reports whether the picture is magenta at x, y.
func magentaAt(img image.Image, x, y int) bool {
	r, g, b := rgb(img, x, y)
	return r > 200 && g < 60 && b > 200
}

// TestMCPGoClientLoop: the MCP Go SDK's client, given only the
// endpoint's URL, finds the authorization server, registers, and signs in
// (consent clicked in Chromium); then it runs an agent's loop on a real
// site: make it (with progress), checkpoint it, install and activate a
// plugin, look at the front page (the screenshot, decoded, shows the
// plugin's band), run PHP and SQL, restore the checkpoint (the plugin is
// gone, the band too), and delete the site. Its token works at /mcp
// alone.
func TestMCPGoClientLoop(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)
	cb := newCallback(t)
	var scopes string
	handler, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "Go MCP e2e", RedirectURIs: []string{cb.srv.URL + "/callback"}, TokenEndpointAuthMethod: "none"}},
		RedirectURL: cb.srv.URL + "/callback",
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			scopes = consent(t, args.URL, d.owner.Token)
			q := st.Await(t, cb.got, 30*time.Second, "the OAuth callback")
			return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var progress []string
	client := mcp.NewClient(&mcp.Implementation{Name: "go-e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, fmt.Sprintf("%.0f %s", r.Params.Progress, r.Params.Message))
			mu.Unlock()
		}})
	ctx := context.Background()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.owner.Base + "/mcp", OAuthHandler: handler}, nil)
	if err != nil {
		t.Fatalf("connect with only the URL: %v", err)
	}
	defer cs.Close()
	if !strings.Contains(scopes, "MCP") {
		t.Fatalf("the consent page showed %q", scopes)
	}

	call := func(name string, args map[string]any, out any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: mcp.Meta{"progressToken": name}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.IsError {
			t.Fatalf("%s: %s", name, r.Content[0].(*mcp.TextContent).Text)
		}
		if out != nil {
			b, _ := json.Marshal(r.StructuredContent)
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		return r
	}
	t0 := time.Now()
	var made struct {
		Site     map[string]any `json:"site"`
		LoginURL string         `json:"loginUrl"`
	}
	call("site_create", map[string]any{"name": "MCP loop"}, &made)
	id, siteURL := made.Site["id"].(string), made.Site["url"].(string)
	t.Logf("site_create: %s", time.Since(t0))
	mu.Lock()
	if made.Site["status"] != "ready" || !strings.Contains(made.LoginURL, "sandbox_login=") || len(progress) == 0 {
		t.Fatalf("site_create: %+v, progress %v", made, progress)
	}
	mu.Unlock()
	var cp struct {
		Checkpoint map[string]any `json:"checkpoint"`
	}
	call("checkpoint_create", map[string]any{"siteId": id, "name": "clean"}, &cp)
	call("file_write", map[string]any{"siteId": id, "path": "wp-content/plugins/mcp-band/mcp-band.php", "text": magentaPlugin}, nil)
	var plugins struct {
		Plugins []map[string]any `json:"plugins"`
	}
	call("plugin_activate", map[string]any{"siteId": id, "slug": "mcp-band", "active": true}, &plugins)
	active := func() bool {
		for _, p := range plugins.Plugins {
			if p["slug"] == "mcp-band" {
				return p["active"] == true
			}
		}
		return false
	}
	if !active() {
		t.Fatalf("after plugin_activate: %v", plugins)
	}
	shot := call("screenshot", map[string]any{"siteId": id, "width": 1024, "height": 700}, nil)
	img, ok := shot.Content[0].(*mcp.ImageContent)
	if !ok || img.MIMEType != "image/png" {
		t.Fatalf("screenshot content: %#v", shot.Content)
	}
	if pic := decodePNG(t, img.Data); !magentaAt(pic, 500, 70) {
		t.Fatalf("the screenshot does not show the plugin's band: %v at its place", rgbString(pic, 500, 70))
	}
	var php struct {
		ExitCode int    `json:"exitCode"`
		Stdout   string `json:"stdout"`
	}
	call("php_run", map[string]any{"siteId": id, "code": "<?php require 'wp-load.php'; echo home_url();"}, &php)
	if php.ExitCode != 0 || php.Stdout != siteURL {
		t.Fatalf("php_run: %+v", php)
	}
	var sql struct {
		Rows [][]*string `json:"rows"`
	}
	call("sql_run", map[string]any{"siteId": id, "query": "SELECT option_value FROM wp_options WHERE option_name = 'active_plugins'"}, &sql)
	if len(sql.Rows) != 1 || sql.Rows[0][0] == nil || !strings.Contains(*sql.Rows[0][0], "mcp-band") {
		t.Fatalf("sql_run: %+v", sql)
	}
	t1 := time.Now()
	call("checkpoint_restore", map[string]any{"siteId": id, "checkpointId": cp.Checkpoint["id"]}, nil)
	t.Logf("checkpoint_restore: %s", time.Since(t1))
	call("plugins_list", map[string]any{"siteId": id}, &plugins)
	for _, p := range plugins.Plugins {
		if p["slug"] == "mcp-band" {
			t.Fatalf("the plugin is still there after the restore: %v", p)
		}
	}
	shot = call("screenshot", map[string]any{"siteId": id, "width": 1024, "height": 700}, nil)
	if pic := decodePNG(t, shot.Content[0].(*mcp.ImageContent).Data); magentaAt(pic, 500, 70) {
		t.Fatal("the band is still on the page after the restore")
	}
	call("site_delete", map[string]any{"siteId": id}, nil)
	t.Logf("the loop took %s", time.Since(t0))

	// The token works at /mcp alone.
	ts, err := handler.TokenSource(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ts.Token()
	if err != nil {
		t.Fatal(err)
	}
	if r := st.NewClient(t, d.owner.Base, tok.AccessToken).Do("GET", "/api/app/sites", nil); r.Status != 401 {
		t.Fatalf("the MCP token on the REST API: %d %s", r.Status, r.Raw)
	}
}

func rgbString(img image.Image, x, y int) string {
	r, g, b := rgb(img, x, y)
	return fmt.Sprintf("(%d,%d,%d)", r, g, b)
}

// mcpSDKDir is the MCP TypeScript SDK as deploy/dev/install-deps.sh
// installs it.
func mcpSDKDir(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "sandboxd", "mcp-sdk-1.32.2")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("the MCP TypeScript SDK is not installed (deploy/dev/install-deps.sh installs it): %v", err)
	}
	return dir
}

// TestMCPTypeScriptClientLoop: the MCP TypeScript SDK's client (under
// the machine's Node), given only the endpoint's URL, signs in by OAuth
// (consent clicked in Chromium) and runs the agent's loop on a real
// site: make, checkpoint, install and activate a plugin, screenshot (it
// shows the plugin's band), restore (plugin and band gone), delete.
func TestMCPTypeScriptClientLoop(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)
	dir := t.TempDir()
	script, err := os.ReadFile("testdata/mcp-client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(mcpSDKDir(t), "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(dir, "client.mjs"), d.owner.Base+"/mcp", magentaPlugin)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cancel()
	lines := map[string]json.RawMessage{}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 32<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("the client said %q", sc.Text())
		}
		for k, v := range m {
			lines[k] = v
		}
		if raw, ok := m["authorize"]; ok {
			var u string
			_ = json.Unmarshal(raw, &u)
			if !strings.HasPrefix(u, d.owner.Base+"/connect/authorize?") || !strings.Contains(u, "resource=") {
				t.Fatalf("the client was sent to %s", u)
			}
			consent(t, u, d.owner.Token)
		}
		if _, ok := m["error"]; ok {
			t.Fatalf("the TypeScript client failed: %s\n%s", m["error"], stderr.String())
		}
		if _, ok := m["done"]; ok {
			break
		}
	}
	if _, ok := lines["done"]; !ok {
		t.Fatalf("the client ended early (%v): %s", sc.Err(), stderr.String())
	}
	var tools []string
	_ = json.Unmarshal(lines["tools"], &tools)
	if !slices.Contains(tools, "checkpoint_restore") || !slices.Contains(tools, "screenshot") {
		t.Fatalf("tools: %v", tools)
	}
	var shot, after string
	_ = json.Unmarshal(lines["screenshot"], &shot)
	_ = json.Unmarshal(lines["screenshotAfter"], &after)
	b, err := base64.StdEncoding.DecodeString(shot)
	if err != nil {
		t.Fatal(err)
	}
	if pic := decodePNG(t, b); !magentaAt(pic, 500, 70) {
		t.Fatalf("the TypeScript client's screenshot does not show the plugin's band: %s", rgbString(pic, 500, 70))
	}
	if b, err = base64.StdEncoding.DecodeString(after); err != nil || magentaAt(decodePNG(t, b), 500, 70) {
		t.Fatalf("the band is still there after the restore (%v)", err)
	}
	var left []string
	_ = json.Unmarshal(lines["afterRestore"], &left)
	if slices.Contains(left, "mcp-band") {
		t.Fatalf("plugins after the restore: %v", left)
	}
	t.Logf("TypeScript loop: %s", lines["loopMs"])
}
