package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/sitepath"
)

// sitesCase is one command line against the fake API: its exit code,
// what stdout must (and must not) hold, what stderr must hold, and what
// the request must have been.
type sitesCase struct {
	name   string
	stdin  string
	args   []string
	code   int
	out    []string
	notOut []string
	errs   string
	check  func(t *testing.T, f *sitesFake, out string)
}

func runSitesCases(t *testing.T, f *sitesFake, cases []sitesCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.reset()
			code, out, errs := ctl(t, tc.stdin, tc.args...)
			if code != tc.code {
				t.Fatalf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", tc.args, code, tc.code, out, errs)
			}
			for _, s := range tc.out {
				if !strings.Contains(out, s) {
					t.Errorf("%v: stdout lacks %q:\n%s", tc.args, s, out)
				}
			}
			for _, s := range tc.notOut {
				if strings.Contains(out, s) {
					t.Errorf("%v: stdout holds %q:\n%s", tc.args, s, out)
				}
			}
			if !strings.Contains(errs, tc.errs) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, errs, tc.errs)
			}
			for _, line := range strings.Split(out, "\n") {
				if slices.Contains(tc.args, "--json") {
					break // the API's objects, unchanged
				}
				if len([]rune(line)) > 80 && !strings.Contains(line, os.TempDir()) {
					t.Errorf("%v: a line wider than 80 columns: %q", tc.args, line)
				}
			}
			if tc.check != nil {
				tc.check(t, f, out)
			}
		})
	}
}

// jsonBody decodes a recorded request's JSON body.
func jsonBody(t *testing.T, r *sitesFakeReq) map[string]any {
	t.Helper()
	if r == nil {
		t.Fatal("no such request")
	}
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q: %v", r.Body, err)
	}
	return m
}

// TestSitesToolsFake: restore, php, debug, mail, plugins, db, ssh and
// domain against a fake API answering like the real handlers: the
// requests they send, what they print, and their exit codes for a wrong
// command line (2) and an API refusal (1, the code on stderr).
func TestSitesToolsFake(t *testing.T) {
	f := newSitesFake(t)
	bin := t.TempDir()
	// Stand-ins for the local clients: they print how they were run.
	for _, name := range []string{"mysql", "ssh"} {
		script := "#!/bin/sh\necho \"" + name + " $*\"\necho \"MYSQL_PWD=$MYSQL_PWD\"\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)

	runSitesCases(t, f, []sitesCase{
		{name: "restore", args: []string{"sites", "restore", "site_1", "--template", "tpl_1"}, out: []string{"restoring site_1 from tpl_1 (job job_ok)"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				r := f.last("POST", "/api/app/sites/site_1/restore")
				if jsonBody(t, r)["templateId"] != "tpl_1" || !strings.HasPrefix(r.Header.Get("Idempotency-Key"), "sandboxctl-") {
					t.Errorf("restore request: %s %v", r.Body, r.Header)
				}
			}},
		{name: "restore wait json", args: []string{"sites", "restore", "site_1", "--template", "tpl_1", "--wait", "--json"},
			out: []string{`"status": "ready"`}, check: func(t *testing.T, f *sitesFake, _ string) {
				if f.last("GET", "/api/app/jobs/job_ok") == nil {
					t.Error("--wait did not poll the job")
				}
			}},
		{name: "restore without template", args: []string{"sites", "restore", "site_1"}, code: 2, errs: "template"},
		{name: "restore unknown template", args: []string{"sites", "restore", "site_1", "--template", "tpl_x"}, code: 1, errs: "template_not_found"},
		{name: "restore unknown site", args: []string{"sites", "restore", "site_x", "--template", "tpl_1"}, code: 1, errs: "site_not_found"},

		{name: "php", args: []string{"sites", "php", "site_1"}, out: []string{"PHP 8.2", "memory_limit", "256M"}},
		{name: "php json", args: []string{"sites", "php", "site_1", "--json"}, check: func(t *testing.T, _ *sitesFake, out string) {
			var v struct {
				Site      struct{ PHPVersion string }
				PHPConfig struct{ Settings map[string]string }
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil || v.Site.PHPVersion != "8.2" || v.PHPConfig.Settings["memory_limit"] != "256M" {
				t.Errorf("php --json: %v %s", err, out)
			}
		}},
		{name: "php no site", args: []string{"sites", "php"}, code: 2},
		{name: "set-version", args: []string{"sites", "php", "set-version", "site_1", "8.4", "--wait"}, out: []string{"site_1 runs PHP 8.4"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				if jsonBody(t, f.last("PUT", "/php-version"))["phpVersion"] != "8.4" {
					t.Error("set-version body")
				}
			}},
		{name: "set-version job fails", args: []string{"sites", "php", "set-version", "site_1", "8.5", "--wait"}, code: 1,
			errs: "php_version_unavailable: no node has PHP 8.5"},
		{name: "set-version refused", args: []string{"sites", "php", "set-version", "site_1", "5.6"}, code: 1, errs: "invalid_request"},
		{name: "set-version no version", args: []string{"sites", "php", "set-version", "site_1"}, code: 2},
		{name: "php config show", args: []string{"sites", "php", "config", "site_1"}, out: []string{"SETTING", "upload_max_filesize"}},
		{name: "php config set", args: []string{"sites", "php", "config", "site_1", "memory_limit=512M", "max_input_vars=3000"},
			out: []string{"changing php.ini of site_1 (job job_ok)", "512M"}, check: func(t *testing.T, f *sitesFake, _ string) {
				s, _ := jsonBody(t, f.last("PUT", "/php-config"))["settings"].(map[string]any)
				if s["memory_limit"] != "512M" || s["max_input_vars"] != "3000" || len(s) != 2 {
					t.Errorf("php-config body: %v", s)
				}
			}},
		{name: "php config not a pair", args: []string{"sites", "php", "config", "site_1", "memory_limit"}, code: 2},
		{name: "php config refused", args: []string{"sites", "php", "config", "site_1", "nonsense=1"}, code: 1, errs: "invalid_request"},

		{name: "debug show", args: []string{"sites", "debug", "site_1"}, out: []string{"WP_DEBUG ", "yes", "SCRIPT_DEBUG"}},
		{name: "debug on", args: []string{"sites", "debug", "on", "site_1"}, check: func(t *testing.T, f *sitesFake, _ string) {
			b := jsonBody(t, f.last("PUT", "/debug"))
			if b["wpDebug"] != true || b["wpDebugLog"] != true || len(b) != 2 {
				t.Errorf("debug on body: %v", b)
			}
		}},
		{name: "debug off", args: []string{"sites", "debug", "off", "site_1", "--json"}, out: []string{`"wpDebug": false`},
			check: func(t *testing.T, f *sitesFake, _ string) {
				b := jsonBody(t, f.last("PUT", "/debug"))
				if b["wpDebug"] != false || b["wpDebugLog"] != false || b["wpDebugDisplay"] != false || b["scriptDebug"] != false {
					t.Errorf("debug off body: %v", b)
				}
			}},
		{name: "debug on no site", args: []string{"sites", "debug", "on"}, code: 2},
		{name: "debug log", args: []string{"sites", "debug", "log", "site_1", "--lines", "50"}, out: []string{"PHP Notice: one\n", "PHP Notice: two\n"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				if r := f.last("GET", "/debug/log"); r.Query["lines"][0] != "50" {
					t.Errorf("log query: %v", r.Query)
				}
			}},
		{name: "debug log default tail", args: []string{"sites", "debug", "log", "site_1"}, check: func(t *testing.T, f *sitesFake, _ string) {
			if r := f.last("GET", "/debug/log"); len(r.Query) != 0 {
				t.Errorf("log query without --lines: %v", r.Query)
			}
		}},
		{name: "debug log too many lines", args: []string{"sites", "debug", "log", "site_1", "-n", "5000"}, code: 2},
		{name: "debug log follow json", args: []string{"sites", "debug", "log", "site_1", "-f", "--json"}, code: 2},
		{name: "debug log clear", args: []string{"sites", "debug", "log", "site_1", "--clear"}, out: []string{"cleared the debug log"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				if f.last("DELETE", "/api/app/sites/site_1/debug/log") == nil {
					t.Error("no DELETE")
				}
			}},
		{name: "debug log unknown site", args: []string{"sites", "debug", "log", "site_x"}, code: 1, errs: "site_not_found"},

		{name: "mail", args: []string{"sites", "mail", "site_1"}, out: []string{"#", "WHEN", "alice@example.com", "Password reset", "2m ago", "…"}},
		{name: "mail one", args: []string{"sites", "mail", "site_1", "1"}, out: []string{"Subject: Password reset", "Someone asked"}},
		{name: "mail one json", args: []string{"sites", "mail", "site_1", "2", "--json"}, out: []string{`"email": {`, `"id": "1767225500000000001-b"`, `"html"`}},
		{name: "mail no such", args: []string{"sites", "mail", "site_1", "9"}, code: 1, errs: "no message 9"},
		{name: "mail clear", args: []string{"sites", "mail", "site_1", "--clear"}, out: []string{"cleared the mail of site_1"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				if f.last("DELETE", "/email") == nil {
					t.Error("no DELETE")
				}
			}},
		{name: "mail clear one", args: []string{"sites", "mail", "site_1", "1", "--clear"}, code: 2},
		{name: "mail too many", args: []string{"sites", "mail", "site_1", "1", "2"}, code: 2},

		{name: "plugins", args: []string{"sites", "plugins", "site_1"}, out: []string{"akismet", "theme", "yes", "Akismet Anti-spam: …"}},
		{name: "plugins add", args: []string{"sites", "plugins", "add", "site_1", "my-plugin", "--activate", "--wait"}, out: []string{"deployed to site_1"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				r := f.last("POST", "/plugins")
				b := jsonBody(t, r)
				if b["libraryPlugin"] != "my-plugin" || b["activate"] != true || r.Header.Get("Idempotency-Key") == "" {
					t.Errorf("plugins add: %v %v", b, r.Header)
				}
			}},
		{name: "plugins add zip", args: []string{"sites", "plugins", "add", "site_1", "--zip-url", "https://example.com/p.zip"},
			out: []string{"deploying to site_1 (job job_ok)"}, check: func(t *testing.T, f *sitesFake, _ string) {
				if b := jsonBody(t, f.last("POST", "/plugins")); b["zipUrl"] != "https://example.com/p.zip" || b["activate"] != nil {
					t.Errorf("plugins add --zip-url: %v", b)
				}
			}},
		{name: "plugins add nothing", args: []string{"sites", "plugins", "add", "site_1"}, code: 2},
		{name: "plugins add both", args: []string{"sites", "plugins", "add", "site_1", "x", "--zip-url", "https://e.com/p.zip"}, code: 2},
		{name: "plugins add unknown", args: []string{"sites", "plugins", "add", "site_1", "nope"}, code: 1, errs: "library_entry_not_found"},

		{name: "db masked", args: []string{"sites", "db", "site_1"}, out: []string{"10.0.0.5", "3306", "u_site_1", "********", "adminer/once/abc"},
			notOut: []string{"s3cret-pw"}},
		{name: "db shown", args: []string{"sites", "db", "site_1", "--show-password"}, out: []string{"s3cret-pw"}},
		{name: "db json", args: []string{"sites", "db", "site_1", "--json"}, out: []string{`"password": "s3cret-pw"`}},
		{name: "db shell", args: []string{"sites", "db", "site_1", "--shell"},
			out: []string{"mysql --host 10.0.0.5 --port 3306 --user u_site_1 wp_site_1\n", "MYSQL_PWD=s3cret-pw"}},
		{name: "db shell json", args: []string{"sites", "db", "site_1", "--shell", "--json"}, code: 2},
		{name: "db unknown site", args: []string{"sites", "db", "site_x"}, code: 1, errs: "site_not_found"},

		{name: "ssh prints off a terminal", args: []string{"sites", "ssh", "site_1"},
			out: []string{"ssh -p 2222 site_1@node1.example.com", "sftp -P 2222", "SHA256:abc", "[node1.example.com]:2222"}},
		{name: "ssh runs a command", args: []string{"sites", "ssh", "site_1", "--", "wp", "plugin", "list"},
			out: []string{"ssh -p 2222 -o UserKnownHostsFile=", "/known_hosts -o StrictHostKeyChecking=yes site_1@node1.example.com wp plugin list\n"}},
		{name: "ssh print", args: []string{"sites", "ssh", "site_1", "--print", "--", "ls"}, out: []string{"sftp -P 2222"}},
		{name: "ssh without dash", args: []string{"sites", "ssh", "site_1", "ls"}, code: 2},
		{name: "ssh unknown site", args: []string{"sites", "ssh", "site_x"}, code: 1, errs: "site_not_found"},

		{name: "domain none", args: []string{"sites", "domain", "site_1"}, out: []string{"site_1 has no custom domain"}},
		{name: "domain connect", args: []string{"sites", "domain", "site_1", "shop.example.com"},
			out: []string{"shop.example.com: pending_dns", "CNAME  shop.example.com  demo.localhost"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				if jsonBody(t, f.last("PUT", "/domain"))["hostname"] != "shop.example.com" {
					t.Error("domain body")
				}
			}},
		{name: "domain another", args: []string{"sites", "domain", "site_1", "www.example.org"}, code: 1, errs: "conflict"},
		{name: "domain check", args: []string{"sites", "domain", "site_1", "--check"},
			out: []string{"pending_dns (checked ", "last check: shop.example.com has no CNAME record"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				if f.last("POST", "/domain/check") == nil {
					t.Error("no check")
				}
			}},
		{name: "domain two actions", args: []string{"sites", "domain", "site_1", "shop.example.com", "--remove"}, code: 2},
		{name: "domain remove", args: []string{"sites", "domain", "site_1", "--remove"}, out: []string{"removed shop.example.com from site_1"}},
		{name: "domain remove again", args: []string{"sites", "domain", "site_1", "--remove"}, code: 1, errs: "invalid_request"},
	})

	// Neither database client installed: a clear error, not a usage one.
	t.Setenv("PATH", t.TempDir())
	if code, _, errs := ctl(t, "", "sites", "db", "site_1", "--shell"); code != 1 || !strings.Contains(errs, "neither is on PATH") {
		t.Fatalf("db --shell without a client: %d %s", code, errs)
	}
	// A terminal on stdin: ssh runs.
	t.Setenv("PATH", bin)
	old := sitesIsTerminal
	sitesIsTerminal = func(io.Reader) bool { return true }
	t.Cleanup(func() { sitesIsTerminal = old })
	if code, out, errs := ctl(t, "", "sites", "ssh", "site_1"); code != 0 || !strings.HasPrefix(out, "ssh -p 2222 -o UserKnownHostsFile=") ||
		!strings.Contains(out, "StrictHostKeyChecking=yes site_1@node1.example.com\n") {
		t.Fatalf("ssh on a terminal: %d %q %s", code, out, errs)
	}
}

// TestSitesFilesFake: the file manager commands send paths as unpadded
// base64url query parameters, as given (a ".." too: refusing it is the
// server's, and its refusal is exit 1), write content in standard base64
// and upload in multipart; listings read like ls -l.
func TestSitesFilesFake(t *testing.T) {
	f := newSitesFake(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(local, []byte("hello\x00world"), 0o600); err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(dir, "wp-config.php")
	// "a?>b.txt" is "YT8+Yi50eHQ" in standard base64: the URL alphabet
	// must say "YT8-Yi50eHQ", with no padding after it.
	odd := "wp-content/uploads/a?>b.txt"
	query := func(r *sitesFakeReq, name string) string {
		if r == nil || len(r.Query[name]) != 1 {
			t.Fatalf("no %s in %v", name, r)
		}
		return r.Query[name][0]
	}

	runSitesCases(t, f, []sitesCase{
		{name: "ls root", args: []string{"sites", "files", "ls", "site_1"}, out: []string{"d 4096  1h ago    wp-content/\n", "- 3012  3m ago    wp-config.php\n"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				if r := f.last("GET", "/files"); len(r.Query) != 0 {
					t.Errorf("ls of the root sent %v", r.Query)
				}
			}},
		{name: "ls dir", args: []string{"sites", "files", "ls", "site_1", "wp-content"},
			out: []string{"d     4096  ", "plugins/\n", "- 12000000  ", "dump.sql\n", "l        8  ", "latest\n"}, notOut: []string{"e+07"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				if q := query(f.last("GET", "/files"), "path"); q != "d3AtY29udGVudA" {
					t.Errorf("path %q", q)
				}
			}},
		{name: "ls json", args: []string{"sites", "files", "ls", "site_1", "--json"}, out: []string{`"entries": [`}},
		{name: "ls missing", args: []string{"sites", "files", "ls", "site_1", "nope"}, code: 1, errs: "file_not_found"},
		{name: "get", args: []string{"sites", "files", "get", "site_1", "wp-config.php"}, out: []string{"<?php\ndefine('DB_NAME', 'wp');\n"}},
		{name: "get to a file", args: []string{"sites", "files", "get", "site_1", "wp-config.php", "-o", saved},
			out: []string{"saved wp-config.php to " + saved + " (31 bytes)"}, check: func(t *testing.T, _ *sitesFake, _ string) {
				if b, err := os.ReadFile(saved); err != nil || !strings.HasPrefix(string(b), "<?php") {
					t.Errorf("saved file: %q %v", b, err)
				}
			}},
		{name: "get dotdot", args: []string{"sites", "files", "get", "site_1", "../wp-config.php"}, code: 1, errs: "invalid_request",
			check: func(t *testing.T, f *sitesFake, _ string) {
				if q := query(f.last("GET", "/files/content"), "path"); q != sitepath.Encode("../wp-config.php") || q != "Li4vd3AtY29uZmlnLnBocA" {
					t.Errorf("path %q", q)
				}
			}},
		{name: "get absolute", args: []string{"sites", "files", "get", "site_1", "/etc/passwd"}, code: 1, errs: "absolute"},
		{name: "get no path", args: []string{"sites", "files", "get", "site_1"}, code: 2},
		{name: "put upload", args: []string{"sites", "files", "put", "site_1", local, odd}, out: []string{"wrote " + odd + " (11 bytes)"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				r := f.last("POST", "/files/upload")
				if q := query(r, "path"); q != "d3AtY29udGVudC91cGxvYWRzL2E_PmIudHh0" || strings.ContainsAny(q, "+/=") {
					t.Errorf("path %q", q)
				}
				mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
				if mt != "multipart/form-data" {
					t.Fatalf("content type %q", mt)
				}
				part, err := multipart.NewReader(strings.NewReader(string(r.Body)), params["boundary"]).NextPart()
				if err != nil {
					t.Fatal(err)
				}
				data, _ := io.ReadAll(part)
				if part.FormName() != "file" || part.FileName() != "notes.txt" || string(data) != "hello\x00world" {
					t.Errorf("part %s %s %q", part.FormName(), part.FileName(), data)
				}
			}},
		{name: "put into a directory", args: []string{"sites", "files", "put", "site_1", local, "wp-content/"}, out: []string{"wrote wp-content/notes.txt"}},
		{name: "put stdin", stdin: "<?php phpinfo();\n", args: []string{"sites", "files", "put", "site_1", "-", "info.php"}, out: []string{"wrote info.php (17 bytes)"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				r := f.last("POST", "/files/write")
				if q := query(r, "path"); q != "aW5mby5waHA" {
					t.Errorf("path %q", q)
				}
				if b := jsonBody(t, r); b["contentBase64"] != base64.StdEncoding.EncodeToString([]byte("<?php phpinfo();\n")) {
					t.Errorf("write body %v", b)
				}
			}},
		{name: "put missing local", args: []string{"sites", "files", "put", "site_1", filepath.Join(dir, "nope"), "x"}, code: 1, errs: "nope"},
		{name: "put outside", args: []string{"sites", "files", "put", "site_1", local, "../../etc/x"}, code: 1, errs: "invalid_request"},
		{name: "put two args", args: []string{"sites", "files", "put", "site_1", local}, code: 2},
		{name: "rm file", args: []string{"sites", "files", "rm", "site_1", "wp-config.php"}, out: []string{"deleted wp-config.php"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				if q := query(f.last("POST", "/files/delete"), "path"); q != "d3AtY29uZmlnLnBocA" {
					t.Errorf("path %q", q)
				}
			}},
		{name: "rm dir needs -r", args: []string{"sites", "files", "rm", "site_1", "wp-content"}, code: 2, errs: "rm -r",
			check: func(t *testing.T, f *sitesFake, _ string) {
				if f.last("POST", "/files/delete") != nil {
					t.Error("deleted a directory without -r")
				}
			}},
		{name: "rm -r dir", args: []string{"sites", "files", "rm", "-r", "site_1", "wp-content"}, out: []string{"deleted wp-content"}},
		{name: "rm root", args: []string{"sites", "files", "rm", "-r", "site_1", "."}, code: 1, errs: "the WordPress root itself"},
		{name: "mkdir", args: []string{"sites", "files", "mkdir", "site_1", "wp-content/x", "--json"}, out: []string{`"ok": true`}},
		{name: "mv", args: []string{"sites", "files", "mv", "site_1", "a.txt", "b.txt"}, out: []string{"moved a.txt to b.txt"},
			check: func(t *testing.T, f *sitesFake, _ string) {
				r := f.last("POST", "/files/rename")
				if query(r, "from") != "YS50eHQ" || query(r, "to") != "Yi50eHQ" {
					t.Errorf("mv query %v", r.Query)
				}
			}},
		{name: "cp over existing", args: []string{"sites", "files", "cp", "site_1", "a.txt", "wp-config.php"}, code: 1, errs: "conflict"},
		{name: "mv one arg", args: []string{"sites", "files", "mv", "site_1", "a.txt"}, code: 2},
		{name: "files unknown site", args: []string{"sites", "files", "ls", "site_x"}, code: 1, errs: "site_not_found"},
	})
}

// TestSitesDebugLogFollow: --follow prints each line once across polls
// of a log that grows (a last line is printed once it is complete), then
// is truncated and grows again; the truncation is said once on stderr.
func TestSitesDebugLogFollow(t *testing.T) {
	f := newSitesFake(t)
	logs := []string{
		"a\nb\nc\n",
		"a\nb\nc\nd\n",
		"a\nb\nc\nd\n",
		"a\nb\nc\nd\ne\nf", // f is being written
		"a\nb\nc\nd\ne\nf\n",
		"", // truncated
		"g\n",
		"g\nh\n",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.mu.Lock()
	f.logs, f.afterLogs = logs, cancel
	f.mu.Unlock()
	oldCtx, oldEvery := sitesInterrupted, sitesLogPollEvery
	sitesInterrupted = func() (context.Context, context.CancelFunc) { return ctx, func() {} }
	sitesLogPollEvery = time.Millisecond
	t.Cleanup(func() { sitesInterrupted, sitesLogPollEvery = oldCtx, oldEvery })

	code, out, errs := ctl(t, "", "sites", "debug", "log", "site_1", "--follow", "--lines", "2")
	if code != 0 || out != "b\nc\nd\ne\nf\ng\nh\n" {
		t.Fatalf("follow: %d %q %s", code, out, errs)
	}
	if strings.Count(errs, "truncated") != 1 {
		t.Fatalf("follow stderr: %q", errs)
	}
	if r := f.last("GET", "/debug/log"); r.Query["lines"][0] != "2000" {
		t.Fatalf("follow asks for %v", r.Query)
	}
}

// TestSitesLogFollower: lining up successive tails when the log is longer
// than what one tail holds.
func TestSitesLogFollower(t *testing.T) {
	type poll struct {
		content string
		byteCut bool
		fresh   string
		reset   bool
	}
	for _, tc := range []struct {
		name  string
		polls []poll
	}{
		{"grows past the window", []poll{{content: "a\nb\n", fresh: "a,b"}, {content: "b\nc\nd\n", fresh: "c,d"}, {content: "d\ne\nf\n", fresh: "e,f"}}},
		{"window slides", []poll{{content: "a\nb\nc\n", fresh: "a,b,c"}, {content: "c\nd\ne\n", fresh: "d,e"}, {content: "c\nd\ne\n", fresh: ""}}},
		{"full window, then shorter: truncated", []poll{{content: "a\nb\nc\n", fresh: "a,b,c"}, {content: "x\n", fresh: "x", reset: true}}},
		{"full window, no overlap: rotated", []poll{{content: "a\nb\nc\n", fresh: "a,b,c"}, {content: "x\ny\nz\n", fresh: "x,y,z", reset: true}}},
		{"whole log rewritten", []poll{{content: "a\nb\n", fresh: "a,b"}, {content: "x\nb\n", fresh: "x,b", reset: true}}},
		{"missing, then created", []poll{{content: "", fresh: ""}, {content: "a\n", fresh: "a"}}},
		{"byte-cut tails drop their first piece", []poll{{content: "…tail of a\nb\nc\n", byteCut: true, fresh: "b,c"},
			{content: "ail of b\nc\nd\n", byteCut: true, fresh: "d"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f sitesLogFollower
			for i, p := range tc.polls {
				fresh, reset := f.next(p.content, true, p.byteCut, 3)
				if strings.Join(fresh, ",") != p.fresh || reset != p.reset {
					t.Fatalf("poll %d: %q %v, want %q %v", i, fresh, reset, p.fresh, p.reset)
				}
			}
		})
	}
}

// TestSitesToolsAgainstServer: what the control plane answers on its own
// (no node agent answers: the site never becomes ready) through the real
// handlers: php settings and the refusals of a bad version, an unknown
// template, a ".." path, SSH where the node has none, a site that is not
// ready; a custom domain connected, checked (no DNS answers) and removed.
func TestSitesToolsAgainstServer(t *testing.T) {
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.DNSResolver = "127.0.0.1:1" }})
	node := state.Node{ID: "node-fake", Address: "http://127.0.0.1:1", BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}}
	if _, err := s.Node().Apply(context.Background(), fsm.UpsertNode{Node: node}); err != nil {
		t.Fatal(err)
	}
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	t.Setenv("SANDBOXCTL_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	t.Setenv("SANDBOX_URL", s.URL())
	t.Setenv("SANDBOX_TOKEN", alice.Token)
	code, out, errs := ctl(t, "", "sites", "create", "--name", "tools", "--json")
	var made struct{ Site struct{ ID string } }
	if code != 0 || json.Unmarshal([]byte(out), &made) != nil || made.Site.ID == "" {
		t.Fatalf("create: %d %s %s", code, out, errs)
	}
	id := made.Site.ID

	for _, tc := range []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"sites", "php", id}, 0, "PHP 8.2", ""},
		{[]string{"sites", "php", "config", id, "--json"}, 0, `"settings"`, ""},
		{[]string{"sites", "php", "set-version", id, "5.6"}, 1, "", "invalid_request"},
		{[]string{"sites", "php", "set-version", id, "8.2"}, 1, "", "invalid_request"}, // not ready
		{[]string{"sites", "restore", id, "--template", "tpl_nope"}, 1, "", "template_not_found"},
		{[]string{"sites", "files", "get", id, "../wp-config.php"}, 1, "", "invalid_request: path"},
		{[]string{"sites", "files", "ls", id, "/etc"}, 1, "", "absolute"},
		{[]string{"sites", "ssh", id}, 1, "", "SSH is not enabled"},
		{[]string{"sites", "debug", "log", id}, 1, "", "invalid_request"},
		{[]string{"sites", "mail", id}, 1, "", "invalid_request"},
		{[]string{"sites", "db", "site_nope"}, 1, "", "site_not_found"},
		{[]string{"sites", "domain", id}, 0, "has no custom domain", ""},
		{[]string{"sites", "domain", id, "shop.example.com"}, 0, "shop.example.com: pending_dns", ""},
		{[]string{"sites", "domain", id, "shop.example.com", "--json"}, 0, `"records": [`, ""},
		{[]string{"sites", "domain", id, "--check"}, 0, "last check: ", ""},
		{[]string{"sites", "domain", id, "--remove"}, 0, "removed shop.example.com", ""},
		{[]string{"sites", "domain", id, "--check"}, 1, "", "invalid_request"},
	} {
		code, out, errs := ctl(t, "", tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errs, tc.errs) {
			t.Errorf("%v: %d %q %q", tc.args, code, out, errs)
		}
	}
}
