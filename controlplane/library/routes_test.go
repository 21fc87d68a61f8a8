package library_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// fakeGitHub speaks the subset of the releases API the Library uses:
// GET /repos/{owner}/{repo}/releases/latest and the asset download.
type fakeGitHub struct {
	*httptest.Server
	mu  sync.Mutex
	tag string
	zip []byte
}

func newFakeGitHub(t *testing.T) *fakeGitHub {
	g := &fakeGitHub{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /repos/acme/widgets/releases/latest", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"tag_name": g.tag, "assets": []map[string]any{
			{"name": "notes.txt", "browser_download_url": g.URL + "/dl/notes.txt", "size": 3},
			{"name": "widgets.zip", "browser_download_url": g.URL + "/dl/widgets.zip", "size": len(g.zip)},
		}})
	})
	mux.HandleFunc("GET /dl/widgets.zip", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		_, _ = w.Write(g.zip)
	})
	g.Server = httptest.NewServer(mux)
	t.Cleanup(g.Close)
	return g
}

func (g *fakeGitHub) release(tag, version string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tag, g.zip = tag, wpzip.BuildPlugin("widgets", "Acme Widgets", version, "")
}

// TestLibrary covers uploads, repository entries, license keys and the MCP
// tool on one server; installing on a real site is in e2e.
func TestLibrary(t *testing.T) {
	var logs st.LogBuffer
	var dataDir string
	gh := newFakeGitHub(t)
	gh.release("v1.0.0", "1.0.0")
	s := st.Single(t, st.Options{Logs: &logs, Configure: func(c *server.Config) {
		dataDir, c.GitHubAPI = c.DataDir, gh.URL
		c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	}})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	bob := st.NewAccount(t, s, "bob@example.com", "paid")

	upload := func(c *st.Account, zip []byte, fields map[string]string) *st.Response {
		body, ct := st.Multipart(fields, "file", "hello.zip", zip)
		return c.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct)
	}
	hello := wpzip.BuildPlugin("hello-sandbox", "Hello Sandbox", "1.2.3", "")
	e := upload(alice, hello, nil).Must(t, 201)
	if e.Str("plugin.kind") != "plugin" || e.Str("plugin.slug") != "hello-sandbox" || e.Str("plugin.source") != "upload" ||
		e.Get("plugin.version") != nil || e.Get("plugin.hasLicenseKey") != false || e.Get("plugin.licenseKeyHint") != nil {
		t.Fatalf("upload: %s", e.Raw)
	}
	// Same name again: a unique slug.
	if slug := upload(alice, hello, nil).Must(t, 201).Str("plugin.slug"); slug != "hello-sandbox-2" {
		t.Fatalf("second slug %q", slug)
	}
	// Get by id and by slug; another workspace sees neither.
	alice.Do("GET", "/api/app/plugin-library/"+e.Str("plugin.id"), nil).Must(t, 200)
	alice.Do("GET", "/api/app/plugin-library/hello-sandbox", nil).Must(t, 200)
	for _, ref := range []string{e.Str("plugin.id"), "hello-sandbox"} {
		if r := bob.Do("GET", "/api/app/plugin-library/"+ref, nil).Must(t, 404); r.Code() != "plugin_library_entry_not_found" {
			t.Fatal(r.Raw)
		}
	}

	// Bad uploads are refused and store nothing.
	before := len(alice.Do("GET", "/api/app/plugin-library", nil).Must(t, 200).List("plugins"))
	for name, zip := range map[string][]byte{
		"not a zip":     []byte("hello"),
		"traversal":     wpzip.BuildRaw([2]string{"x/x.php", pluginHeader}, [2]string{"x/../../evil.php", "x"}),
		"absolute":      wpzip.BuildRaw([2]string{"/etc/cron.d/evil", "x"}),
		"two plugins":   wpzip.BuildRaw([2]string{"a/a.php", pluginHeader}, [2]string{"b/b.php", pluginHeader}),
		"no header":     wpzip.BuildPlugin("x", "", "", ""),
		"empty license": hello,
	} {
		fields := map[string]string{}
		if name == "empty license" {
			fields["licenseKey"] = " "
		}
		if r := upload(alice, zip, fields); r.Status != 400 || r.Code() != "invalid_request" {
			t.Fatalf("%s: %d %s", name, r.Status, r.Raw)
		}
	}
	body, ct := st.Multipart(map[string]string{"other": "x"}, "", "", nil)
	if r := alice.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct); r.Status != 400 || r.Details()["field"] != "other" {
		t.Fatalf("unknown field: %d %s", r.Status, r.Raw)
	}
	if r := alice.Do("POST", "/api/app/plugin-library", `{}`); r.Status != 400 {
		t.Fatalf("JSON upload: %d %s", r.Status, r.Raw)
	}
	if after := len(alice.Do("GET", "/api/app/plugin-library", nil).List("plugins")); after != before {
		t.Fatalf("refused uploads left entries: %d → %d", before, after)
	}

	// Repository entries: latest release's ZIP asset, tag as version.
	g := alice.Do("POST", "/api/app/plugin-library/github", map[string]any{"repository": "https://github.com/acme/widgets"}).Must(t, 201)
	if g.Str("plugin.source") != "github_release" || g.Str("plugin.githubRepository") != "acme/widgets" ||
		g.Str("plugin.version") != "v1.0.0" || g.Str("plugin.filename") != "widgets.zip" || g.Str("plugin.slug") != "acme-widgets" {
		t.Fatalf("github entry: %s", g.Raw)
	}
	for _, repo := range []string{"nope", "../etc", "https://evil.example/acme/widgets", "acme/missing"} {
		if r := alice.Do("POST", "/api/app/plugin-library/github", map[string]any{"repository": repo}); r.Status != 400 {
			t.Fatalf("repository %q: %d %s", repo, r.Status, r.Raw)
		}
	}
	if r := alice.Do("POST", "/api/app/plugin-library/acme-widgets/refresh", nil).Must(t, 200); r.Get("updated") != false {
		t.Fatalf("refresh without a new release: %s", r.Raw)
	}
	gh.release("v1.1.0", "1.1.0")
	if r := alice.Do("POST", "/api/app/plugin-library/acme-widgets/refresh", nil).Must(t, 200); r.Get("updated") != true || r.Str("plugin.version") != "v1.1.0" {
		t.Fatalf("refresh: %s", r.Raw)
	}
	if r := alice.Do("POST", "/api/app/plugin-library/hello-sandbox/refresh", nil); r.Status != 400 {
		t.Fatalf("refreshing an upload: %d %s", r.Status, r.Raw)
	}

	// License keys: set, hinted, never shown; read only through MCP.
	const key = "LIC-7f3a-SECRET-90ab"
	r := alice.Do("PUT", "/api/app/plugin-library/acme-widgets/license-key", map[string]string{"licenseKey": key}).Must(t, 200)
	if r.Get("plugin.hasLicenseKey") != true || r.Str("plugin.licenseKeyHint") != "••••••••••••••••90ab" || r.Get("plugin.licenseKeyLastReadAt") != nil {
		t.Fatalf("after PUT: %s", r.Raw)
	}
	short := upload(alice, wpzip.BuildPlugin("tiny", "Tiny", "1", ""), map[string]string{"licenseKey": "abc123"}).Must(t, 201)
	if short.Str("plugin.licenseKeyHint") != "••••••" {
		t.Fatalf("short key hint: %s", short.Raw)
	}
	responses := [][]byte{r.Raw, short.Raw, alice.Do("GET", "/api/app/plugin-library", nil).Raw,
		alice.Do("GET", "/api/app/plugin-library/acme-widgets", nil).Raw}

	readKey := func(c *st.Account, plugin string) (*mcp.CallToolResult, error) {
		client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		tr := &mcp.StreamableClientTransport{Endpoint: s.URL() + "/mcp", HTTPClient: &http.Client{Transport: st.Bearer{Token: c.Token}}}
		sess, err := client.Connect(context.Background(), tr, nil)
		if err != nil {
			return nil, err
		}
		defer sess.Close()
		return sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "service_get_plugin_license",
			Arguments: map[string]any{"plugin": plugin}})
	}
	res, err := readKey(alice, "acme-widgets")
	if err != nil || res.IsError {
		t.Fatalf("MCP read: %v %+v", err, res)
	}
	out, _ := json.Marshal(res.StructuredContent)
	if !bytes.Contains(out, []byte(key)) {
		t.Fatalf("MCP tool did not return the key: %s", out)
	}
	stamped := alice.Do("GET", "/api/app/plugin-library/acme-widgets", nil).Must(t, 200)
	if stamped.Get("plugin.licenseKeyLastReadAt") == nil {
		t.Fatalf("read not stamped: %s", stamped.Raw)
	}
	// Another workspace's agent cannot read it.
	if res, err := readKey(bob, "acme-widgets"); err != nil || !res.IsError {
		t.Fatalf("bob read alice's key: %v %+v", err, res)
	}
	// No token: refused before MCP.
	if resp, err := http.Post(s.URL()+"/mcp", "application/json", strings.NewReader(`{}`)); err != nil || resp.StatusCode != 401 {
		t.Fatalf("unauthenticated MCP: %v %v", resp, err)
	}
	// A new key resets the read time; DELETE removes the key.
	if r := alice.Do("PUT", "/api/app/plugin-library/acme-widgets/license-key", map[string]string{"licenseKey": key + "-2"}).Must(t, 200); r.Get("plugin.licenseKeyLastReadAt") != nil {
		t.Fatalf("key change kept the read time: %s", r.Raw)
	}
	if r := alice.Do("DELETE", "/api/app/plugin-library/acme-widgets/license-key", nil).Must(t, 200); r.Get("plugin.hasLicenseKey") != false || r.Get("plugin.licenseKeyHint") != nil {
		t.Fatalf("after DELETE: %s", r.Raw)
	}
	if r := alice.Do("DELETE", "/api/app/plugin-library/nope/license-key", nil); r.Status != 404 || r.Code() != "plugin_library_entry_not_found" {
		t.Fatal(r.Raw)
	}
	alice.Do("DELETE", "/api/app/plugin-library/hello-sandbox-2", nil).Must(t, 200)
	alice.Do("GET", "/api/app/plugin-library/hello-sandbox-2", nil).Must(t, 404)

	// The key is nowhere: responses, logs, Raft log and snapshot.
	if err := s.Node().Snapshot(); err != nil {
		t.Fatal(err)
	}
	for _, raw := range responses {
		if bytes.Contains(raw, []byte(key)) {
			t.Fatalf("key in a response: %s", raw)
		}
	}
	if strings.Contains(logs.String(), key) || !strings.Contains(logs.String(), "license key read") {
		t.Fatal("license key in the logs, or the read was not logged")
	}
	files := 0
	_ = filepath.Walk(filepath.Join(dataDir, "raft"), func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		files++
		if bytes.Contains(b, []byte(key)) || bytes.Contains(b, []byte("abc123")) {
			t.Errorf("license key plaintext in %s", p)
		}
		return nil
	})
	if files < 3 {
		t.Fatalf("only %d raft files", files)
	}
}

const pluginHeader = "<?php\n/* Plugin Name: X */"

// TestLibraryPlanLimit: a workspace holds at most its owner's plan's
// Library entries, and a refused upload leaves nothing behind.
func TestLibraryPlanLimit(t *testing.T) {
	limits := plans.Default()
	limits.Free.LibraryEntries = 2
	s := st.Single(t, st.Options{Plans: &limits})
	free := st.NewAccount(t, s, "free@example.com", "free")
	upload := func(dir string) *st.Response {
		body, ct := st.Multipart(nil, "file", dir+".zip", wpzip.BuildPlugin(dir, "P "+dir, "1", ""))
		return free.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct)
	}
	upload("a").Must(t, 201)
	upload("b").Must(t, 201)
	r := upload("c")
	if r.Status != 402 || r.Code() != "plan_limit_reached" || r.Details()["resource"] != "libraryEntries" || r.Details()["limit"] != float64(2) {
		t.Fatalf("third entry: %d %s", r.Status, r.Raw)
	}
	if n := len(free.Do("GET", "/api/app/plugin-library", nil).Must(t, 200).List("plugins")); n != 2 {
		t.Fatalf("%d entries", n)
	}
	// Deleting one frees a slot.
	free.Do("DELETE", "/api/app/plugin-library/p-a", nil).Must(t, 200)
	upload("c").Must(t, 201)
}
