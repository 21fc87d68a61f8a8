package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/sitepath"
)

// sitesFake answers the site toolbox routes the way the real handlers in
// controlplane/api do (same paths, bodies, JSON shapes and error
// envelopes), for the commands that need a running site, which st.Single
// (no node agent) cannot give. It knows one site, site_1, one template,
// tpl_1, and the jobs job_ok and job_bad; it records every request.
type sitesFake struct {
	t   *testing.T
	srv *httptest.Server

	mu     sync.Mutex
	reqs   []sitesFakeReq
	domain map[string]any
	// logs is the debug log's content at each GET …/debug/log in turn
	// (the last one repeats); afterLogs runs at the first GET past them.
	logs      []string
	logGets   int
	afterLogs func()
}

// sitesFakeReq is one request the fake received.
type sitesFakeReq struct {
	Method, Path string
	Query        map[string][]string
	Header       http.Header
	Body         []byte
}

const sitesFakeToken = "sbx_fake"

func newSitesFake(t *testing.T) *sitesFake {
	f := &sitesFake{t: t}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Setenv("SANDBOXCTL_CONFIG", t.TempDir()+"/config.json")
	t.Setenv("SANDBOX_URL", f.srv.URL)
	t.Setenv("SANDBOX_TOKEN", sitesFakeToken)
	return f
}

// last is the last request whose path ends with suffix.
func (f *sitesFake) last(method, suffix string) *sitesFakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.reqs) - 1; i >= 0; i-- {
		if r := f.reqs[i]; r.Method == method && strings.HasSuffix(r.Path, suffix) {
			return &r
		}
	}
	return nil
}

func (f *sitesFake) reset() {
	f.mu.Lock()
	f.reqs = nil
	f.mu.Unlock()
}

func sitesFakeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func sitesFakeError(w http.ResponseWriter, status int, code, field, msg string) {
	details := map[string]any{}
	if field != "" {
		details["field"] = field
	}
	sitesFakeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg, "details": details}})
}

var sitesFakeSite = map[string]any{"id": "site_1", "name": "demo", "status": "ready", "url": "http://demo.localhost:8081",
	"phpVersion": "8.2", "wordpressVersion": "6.1", "templateId": "tpl_1", "createdAt": "2026-01-01T00:00:00Z"}

// sitesFakeFiles is the site's WordPress root: directories and files.
var sitesFakeFiles = map[string][]map[string]any{
	"": {{"name": "wp-content", "type": "directory", "sizeBytes": 4096, "modifiedAt": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)},
		{"name": "wp-config.php", "type": "file", "sizeBytes": 3012, "modifiedAt": time.Now().Add(-3 * time.Minute).UTC().Format(time.RFC3339)}},
	"wp-content": {{"name": "plugins", "type": "directory", "sizeBytes": 4096, "modifiedAt": "2026-01-01T00:00:00Z"},
		{"name": "dump.sql", "type": "file", "sizeBytes": 12000000, "modifiedAt": "2026-01-01T00:00:00Z"},
		{"name": "latest", "type": "symlink", "sizeBytes": 8, "modifiedAt": "2026-01-01T00:00:00Z"}},
}

func (f *sitesFake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	f.mu.Lock()
	f.reqs = append(f.reqs, sitesFakeReq{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(), Header: r.Header.Clone(), Body: body})
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+sitesFakeToken {
		sitesFakeError(w, 401, "auth_required", "", "a valid API token is required")
		return
	}
	path := r.URL.EscapedPath()
	if strings.HasPrefix(path, "/api/app/jobs/") {
		switch strings.TrimPrefix(path, "/api/app/jobs/") {
		case "job_ok":
			sitesFakeJSON(w, 200, map[string]any{"job": map[string]any{"id": "job_ok", "status": "succeeded", "progress": 100}})
		case "job_bad":
			sitesFakeJSON(w, 200, map[string]any{"job": map[string]any{"id": "job_bad", "status": "failed",
				"error": map[string]any{"code": "php_version_unavailable", "message": "no node has PHP 8.5"}}})
		default:
			sitesFakeError(w, 404, "job_not_found", "", "job not found")
		}
		return
	}
	rest, ok := strings.CutPrefix(path, "/api/app/sites/site_1")
	if !ok {
		sitesFakeError(w, 404, "site_not_found", "", "site not found")
		return
	}
	if len(body) > 0 && rest != "/files/upload" && r.Header.Get("Content-Type") != "application/json" {
		sitesFakeError(w, 400, "invalid_request", "", "Content-Type must be application/json")
		return
	}
	var in map[string]any
	if len(body) > 0 && r.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(body, &in); err != nil {
			sitesFakeError(w, 400, "invalid_request", "", "the body is not JSON")
			return
		}
	}
	switch r.Method + " " + rest {
	case "GET ":
		sitesFakeJSON(w, 200, map[string]any{"site": sitesFakeSite})
	case "POST /restore":
		if in["templateId"] != "tpl_1" {
			sitesFakeError(w, 404, "template_not_found", "", "template not found")
			return
		}
		site := map[string]any{}
		for k, v := range sitesFakeSite {
			site[k] = v
		}
		site["status"] = "creating"
		sitesFakeJSON(w, 202, map[string]any{"site": site, "jobId": "job_ok"})
	case "PUT /php-version":
		v, _ := in["phpVersion"].(string)
		if !strings.Contains(" 8.5 8.4 8.3 8.2 8.1 7.4 ", " "+v+" ") {
			sitesFakeError(w, 400, "invalid_request", "phpVersion", "phpVersion must be one of 8.5, 8.4, 8.3, 8.2, 8.1, 7.4")
			return
		}
		job := "job_ok"
		if v == "8.5" {
			job = "job_bad"
		}
		sitesFakeJSON(w, 202, map[string]any{"phpVersion": v, "jobId": job})
	case "GET /php-config":
		sitesFakeJSON(w, 200, map[string]any{"phpConfig": map[string]any{"settings": map[string]any{"memory_limit": "256M",
			"upload_max_filesize": "64M", "display_errors": "Off"}}})
	case "PUT /php-config":
		settings, _ := in["settings"].(map[string]any)
		if _, ok := settings["nonsense"]; ok || len(settings) == 0 {
			sitesFakeError(w, 400, "invalid_request", "settings", "settings: not an allowed directive")
			return
		}
		merged := map[string]any{"memory_limit": "256M", "upload_max_filesize": "64M", "display_errors": "Off"}
		for k, v := range settings {
			merged[k] = v
		}
		sitesFakeJSON(w, 202, map[string]any{"phpConfig": map[string]any{"settings": merged}, "jobId": "job_ok"})
	case "GET /debug":
		sitesFakeJSON(w, 200, map[string]any{"debug": map[string]any{"wpDebug": true, "wpDebugLog": true, "wpDebugDisplay": false, "scriptDebug": false}})
	case "PUT /debug":
		d := map[string]any{"wpDebug": false, "wpDebugLog": false, "wpDebugDisplay": false, "scriptDebug": false}
		for k, v := range in {
			if _, ok := d[k]; !ok {
				sitesFakeError(w, 400, "invalid_request", k, "unknown field "+k)
				return
			}
			d[k] = v
		}
		sitesFakeJSON(w, 200, map[string]any{"debug": d})
	case "GET /debug/log":
		f.mu.Lock()
		i, logs, after := f.logGets, f.logs, f.afterLogs
		f.logGets++
		f.mu.Unlock()
		if logs == nil {
			content := "[01-Jan-2026 00:00:00 UTC] PHP Notice: one\n[01-Jan-2026 00:00:01 UTC] PHP Notice: two\n"
			sitesFakeJSON(w, 200, map[string]any{"content": content, "exists": true, "lines": 2, "truncated": false})
			return
		}
		if i >= len(logs) && after != nil {
			after()
		}
		content := logs[min(i, len(logs)-1)]
		lines := 0
		if content != "" {
			lines = strings.Count(strings.TrimSuffix(content, "\n"), "\n") + 1
		}
		sitesFakeJSON(w, 200, map[string]any{"content": content, "exists": true, "lines": lines, "truncated": false})
	case "DELETE /debug/log", "DELETE /email":
		sitesFakeJSON(w, 200, map[string]any{"ok": true})
	case "GET /email":
		sitesFakeJSON(w, 200, map[string]any{"emails": []any{
			map[string]any{"id": "1767225600000000001-a", "from": "wordpress@demo.localhost", "to": "alice@example.com",
				"subject": "Password reset", "date": time.Now().Add(-2 * time.Minute).UTC().Format(time.RFC3339Nano),
				"text": "Someone asked to reset your password.", "html": ""},
			map[string]any{"id": "1767225500000000001-b", "from": "wordpress@demo.localhost", "to": "bob@example.com",
				"subject": strings.Repeat("A very long subject ", 5), "date": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano),
				"text": "", "html": "<p>hi</p>"},
		}})
	case "GET /files", "GET /files/content":
		p := ""
		if r.URL.Query().Has("path") || rest == "/files/content" {
			var err error
			if p, err = sitepath.Decode(r.URL.Query().Get("path")); err != nil {
				sitesFakeError(w, 400, "invalid_request", "path", "path: "+err.Error())
				return
			}
		}
		if rest == "/files" {
			entries, ok := sitesFakeFiles[p]
			if !ok {
				sitesFakeError(w, 404, "file_not_found", "", p+" is not a directory")
				return
			}
			sitesFakeJSON(w, 200, map[string]any{"path": p, "entries": entries, "truncated": false})
			return
		}
		if p != "wp-config.php" {
			sitesFakeError(w, 404, "file_not_found", "", p+" does not exist")
			return
		}
		content := []byte("<?php\ndefine('DB_NAME', 'wp');\n")
		sitesFakeJSON(w, 200, map[string]any{"path": p, "contentBase64": base64.StdEncoding.EncodeToString(content), "sizeBytes": len(content)})
	case "POST /files/write", "POST /files/upload", "POST /files/mkdir", "POST /files/delete", "POST /files/rename", "POST /files/copy":
		f.fileOp(w, r, strings.TrimPrefix(rest, "/files/"), body)
	case "GET /database":
		sitesFakeJSON(w, 200, map[string]any{"database": map[string]any{"host": "10.0.0.5", "port": 3306, "name": "wp_site_1",
			"user": "u_site_1", "password": "s3cret-pw", "adminerUrl": "http://127.0.0.1:8080/adminer/once/abc",
			"adminerUrlExpiresAt": time.Now().Add(5 * time.Minute).UTC().Format(time.RFC3339Nano)}})
	case "GET /ssh":
		sitesFakeJSON(w, 200, map[string]any{"ssh": map[string]any{"host": "node1.example.com", "port": 2222, "username": "site_1",
			"command": "ssh -p 2222 site_1@node1.example.com", "sftpCommand": "sftp -P 2222 site_1@node1.example.com",
			"hostKey": "ssh-ed25519 AAAA", "hostKeyFingerprint": "SHA256:abc", "knownHosts": "[node1.example.com]:2222 ssh-ed25519 AAAA"}})
	case "GET /domain", "PUT /domain", "POST /domain/check", "DELETE /domain":
		f.domainOp(w, r.Method, in)
	case "GET /plugins":
		sitesFakeJSON(w, 200, map[string]any{"plugins": []any{
			map[string]any{"slug": "akismet", "name": "Akismet Anti-spam: Spam Protection", "version": "5.3", "active": false, "kind": "plugin"},
			map[string]any{"slug": "twentytwentyfour", "name": "Twenty Twenty-Four", "version": "1.0", "active": true, "kind": "theme"}}})
	case "POST /plugins":
		if lp, _ := in["libraryPlugin"].(string); lp != "" && lp != "my-plugin" {
			sitesFakeError(w, 404, "library_entry_not_found", "", "library entry not found")
			return
		}
		sitesFakeJSON(w, 202, map[string]any{"jobId": "job_ok"})
	default:
		sitesFakeError(w, 404, "not_found", "", fmt.Sprintf("no route %s %s", r.Method, path))
	}
}

// fileOp is POST …/files/{op}: paths in base64url query parameters,
// write's content in JSON (standard base64), upload's in multipart.
func (f *sitesFake) fileOp(w http.ResponseWriter, r *http.Request, op string, body []byte) {
	names := []string{"path"}
	if op == "rename" || op == "copy" {
		names = []string{"from", "to"}
	}
	ps := map[string]string{}
	for _, n := range names {
		vals, ok := r.URL.Query()[n]
		if !ok || len(vals) != 1 {
			sitesFakeError(w, 400, "invalid_request", n, "query parameter "+n+" is required")
			return
		}
		p, err := sitepath.Decode(vals[0])
		if err != nil {
			sitesFakeError(w, 400, "invalid_request", n, n+": "+err.Error())
			return
		}
		ps[n] = p
	}
	out := map[string]any{"ok": true}
	switch op {
	case "write":
		var in struct{ ContentBase64 *string }
		if err := json.Unmarshal(body, &in); err != nil || in.ContentBase64 == nil {
			sitesFakeError(w, 400, "invalid_request", "contentBase64", "contentBase64 is required")
			return
		}
		data, err := base64.StdEncoding.Strict().DecodeString(*in.ContentBase64)
		if err != nil {
			sitesFakeError(w, 400, "invalid_request", "contentBase64", "contentBase64 is not standard base64")
			return
		}
		out["path"], out["sizeBytes"] = ps["path"], len(data)
	case "upload":
		if err := r.ParseMultipartForm(1 << 20); err != nil {
			sitesFakeError(w, 400, "invalid_request", "", "Content-Type must be multipart/form-data")
			return
		}
		file, hdr, err := r.FormFile("file")
		if err != nil {
			sitesFakeError(w, 400, "invalid_request", "file", "the multipart body needs a file part named file")
			return
		}
		data, _ := io.ReadAll(file)
		p := ps["path"]
		if sitesFakeFiles[p] != nil { // an existing directory: the file keeps its name
			p = strings.TrimPrefix(p+"/"+hdr.Filename, "/")
		}
		out["path"], out["sizeBytes"] = p, len(data)
	case "rename", "copy":
		if _, exists := sitesFakeFiles[ps["to"]]; exists || ps["to"] == "wp-config.php" {
			sitesFakeError(w, 409, "conflict", "", ps["to"]+" exists")
			return
		}
		out["from"], out["to"] = ps["from"], ps["to"]
	default:
		if ps["path"] == "" {
			sitesFakeError(w, 400, "invalid_request", "path", "the WordPress root itself cannot be the target")
			return
		}
		out["path"] = ps["path"]
	}
	sitesFakeJSON(w, 200, out)
}

// domainOp keeps one custom domain, as the domains routes answer it.
func (f *sitesFake) domainOp(w http.ResponseWriter, method string, in map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch method {
	case "PUT":
		host, _ := in["hostname"].(string)
		if host == "" || strings.Contains(host, "/") {
			sitesFakeError(w, 400, "invalid_request", "hostname", "hostname must be a DNS name")
			return
		}
		if f.domain != nil && f.domain["hostname"] != host {
			sitesFakeError(w, 409, "conflict", "", "the site already has a custom domain")
			return
		}
		f.domain = map[string]any{"hostname": host, "status": "pending_dns", "verifiedAt": nil, "url": "https://" + host,
			"target": "demo.localhost", "records": []any{map[string]any{"type": "CNAME", "name": host, "value": "demo.localhost"}},
			"lastError": nil, "lastCheckedAt": nil}
		sitesFakeJSON(w, 200, map[string]any{"domain": f.domain})
	case "POST", "DELETE":
		if f.domain == nil {
			sitesFakeError(w, 400, "invalid_request", "", "the site has no custom domain")
			return
		}
		d := f.domain
		if method == "POST" {
			d["lastError"] = "shop.example.com has no CNAME record"
			d["lastCheckedAt"] = time.Now().UTC().Format(time.RFC3339Nano)
		} else {
			f.domain = nil
		}
		sitesFakeJSON(w, 200, map[string]any{"domain": d, "jobId": nil})
	default:
		sitesFakeJSON(w, 200, map[string]any{"domain": f.domain})
	}
}
