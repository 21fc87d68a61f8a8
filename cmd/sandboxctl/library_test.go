package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// zipDir zips a directory tree, paths relative to its parent (so the
// ZIP holds one top folder, as WordPress plugin ZIPs do).
func zipDir(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(filepath.Dir(dir), p)
		if err != nil {
			return err
		}
		w, err := zw.Create(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pluginZip builds a plugin ZIP from a directory holding one PHP file
// with a WordPress plugin header.
func pluginZip(t *testing.T, slug, name, version string) []byte {
	t.Helper()
	dir := filepath.Join(t.TempDir(), slug)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	php := "<?php\n/**\n * Plugin Name: " + name + "\n * Version: " + version + "\n */\n"
	if err := os.WriteFile(filepath.Join(dir, slug+".php"), []byte(php), 0o644); err != nil {
		t.Fatal(err)
	}
	return zipDir(t, dir)
}

// fakeReleases answers the two requests the Library makes of the code
// host: the latest release of acme/widgets, and its ZIP asset.
type fakeReleases struct {
	*httptest.Server
	mu  sync.Mutex
	tag string
	zip []byte
}

func newFakeReleases(t *testing.T) *fakeReleases {
	g := &fakeReleases{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /repos/acme/widgets/releases/latest", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"tag_name": g.tag,
			"assets": []map[string]any{{"name": "widgets.zip", "browser_download_url": g.URL + "/asset/widgets.zip", "size": len(g.zip)}}})
	})
	mux.HandleFunc("GET /asset/widgets.zip", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		defer g.mu.Unlock()
		_, _ = w.Write(g.zip)
	})
	g.Server = httptest.NewServer(mux)
	t.Cleanup(g.Close)
	return g
}

func (g *fakeReleases) publish(tag string, zip []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tag, g.zip = tag, zip
}

// TestLibrary runs the library family against a real server: a ZIP
// built here uploaded (with a license key from stdin), listed, read by
// slug; a key set and cleared from stdin, never echoed; a repository
// entry added and refreshed from a fake code host; deletes; and the
// refusals.
func TestLibrary(t *testing.T) {
	gh := newFakeReleases(t)
	gh.publish("v1.0.0", pluginZip(t, "widgets", "Acme Widgets", "1.0.0"))
	s := st.Single(t, st.Options{Configure: func(c *server.Config) {
		c.GitHubAPI = gh.URL
		c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	}})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	wsctlEnv(t, s.URL(), alice.Token)

	zipFile := filepath.Join(t.TempDir(), "hello-sandbox.zip")
	if err := os.WriteFile(zipFile, pluginZip(t, "hello-sandbox", "Hello Sandbox", "1.2.3"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := ctl(t, "", "library", "add", zipFile)
	if code != 0 || !strings.Contains(out, "added hello-sandbox") || !strings.Contains(out, "plugin") {
		t.Fatalf("library add: %d %s %s", code, out, errs)
	}
	wsctlNarrow(t, "library add", out)

	// A second upload, with a license key on stdin.
	const key1, key2 = "ACME-FIRST-KEY-0001-abcd", "ACME-SECOND-KEY-0002-wxyz"
	code, out, errs = ctl(t, key1+"\n", "library", "add", zipFile, "--license-key-stdin", "--json")
	v := wsctlJSON(t, "library add --json", out)
	p := v["plugin"].(map[string]any)
	if code != 0 || p["slug"] != "hello-sandbox-2" || p["hasLicenseKey"] != true || strings.Contains(out+errs, key1) {
		t.Fatalf("library add --license-key-stdin: %d %s %s", code, out, errs)
	}

	code, out, _ = ctl(t, "", "library", "list")
	if code != 0 || !strings.HasPrefix(out, "ID") || !strings.Contains(out, "hello-sandbox-2") || !strings.Contains(out, "••••abcd") {
		t.Fatalf("library list: %d %s", code, out)
	}
	wsctlNarrow(t, "library list", out)
	code, out, _ = ctl(t, "", "library", "get", "hello-sandbox", "--json")
	if v := wsctlJSON(t, "get --json", out); code != 0 || v["plugin"].(map[string]any)["name"] != "Hello Sandbox" {
		t.Fatalf("library get --json: %d %s", code, out)
	}

	// The key is read from stdin and appears nowhere in the output.
	code, out, errs = ctl(t, key2+"\n", "library", "license-key", "set", "hello-sandbox")
	if code != 0 || !strings.Contains(out, "license key of hello-sandbox set (••••wxyz)") || strings.Contains(out+errs, key2) {
		t.Fatalf("license-key set: %d %q %q", code, out, errs)
	}
	code, out, errs = ctl(t, "", "library", "get", "hello-sandbox")
	if code != 0 || !strings.Contains(out, "••••wxyz") || strings.Contains(out+errs, key2) {
		t.Fatalf("library get after set: %d %s", code, out)
	}
	code, out, _ = ctl(t, "", "library", "license-key", "clear", "hello-sandbox", "--json")
	if v := wsctlJSON(t, "clear", out); code != 0 || v["plugin"].(map[string]any)["hasLicenseKey"] != false {
		t.Fatalf("license-key clear: %d %s", code, out)
	}

	// A repository entry, then a newer release.
	code, out, errs = ctl(t, "", "library", "add-github", "acme/widgets")
	if code != 0 || !strings.Contains(out, "added acme-widgets") || !strings.Contains(out, "acme/widgets") || !strings.Contains(out, "v1.0.0") {
		t.Fatalf("library add-github: %d %s %s", code, out, errs)
	}
	if code, out, _ := ctl(t, "", "library", "refresh", "acme-widgets"); code != 0 || !strings.Contains(out, "latest release already (v1.0.0)") {
		t.Fatalf("refresh, no new release: %d %s", code, out)
	}
	gh.publish("v1.1.0", pluginZip(t, "widgets", "Acme Widgets", "1.1.0"))
	if code, out, _ := ctl(t, "", "library", "refresh", "acme-widgets"); code != 0 || out != "acme-widgets updated to v1.1.0\n" {
		t.Fatalf("refresh, new release: %d %q", code, out)
	}

	for _, tc := range []struct {
		name, stdin string
		args        []string
		code        int
		want        string
	}{
		{"unknown entry", "", []string{"library", "get", "nope"}, 1, "plugin_library_entry_not_found"},
		{"refresh an upload", "", []string{"library", "refresh", "hello-sandbox"}, 1, "invalid_request"},
		{"no release", "", []string{"library", "add-github", "acme/gadgets"}, 1, "invalid_request"},
		{"key for an unknown entry", "K-123456789012\n", []string{"library", "license-key", "set", "nope"}, 1, "plugin_library_entry_not_found"},
		{"not a ZIP", "", []string{"library", "add", "library_test.go"}, 1, "invalid_request"},
		{"missing file", "", []string{"library", "add", "/nonexistent/x.zip"}, 2, "read the ZIP"},
		{"no key on stdin", "", []string{"library", "license-key", "set", "hello-sandbox"}, 2, "no license key on stdin"},
		{"blank key on stdin", "  \n", []string{"library", "add", zipFile, "--license-key-stdin"}, 2, "no license key on stdin"},
		{"key as an argument", "", []string{"library", "license-key", "set", "hello-sandbox", "SECRET"}, 2, "accepts 1 arg"},
		{"add without a file", "", []string{"library", "add"}, 2, "accepts 1 arg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := ctl(t, tc.stdin, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("%v: exit %d (want %d), stderr %q (want %q), stdout %q", tc.args, code, tc.code, errs, tc.want, out)
			}
		})
	}

	for _, entry := range []string{"hello-sandbox", "hello-sandbox-2", "acme-widgets"} {
		if code, out, _ := ctl(t, "", "library", "delete", entry); code != 0 || !strings.Contains(out, "deleted library entry "+entry) {
			t.Fatalf("library delete %s: %d %s", entry, code, out)
		}
	}
	code, out, _ = ctl(t, "", "library", "list", "--json")
	if v := wsctlJSON(t, "list after deletes", out); code != 0 || len(v["plugins"].([]any)) != 0 {
		t.Fatalf("library list after deletes: %d %s", code, out)
	}
}
