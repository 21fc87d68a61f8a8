package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeImports answers the imports routes as controlplane/api does (the
// same JSON shapes), with a restore that goes through steps, one per
// GET, so the parts st.Single cannot run (a restore needs a node agent)
// are covered: waiting, ready, failed, a lost answer, a server that
// holds fewer bytes than the client thought.
type fakeImports struct {
	t  *testing.T
	mu sync.Mutex
	// imports by id.
	imports map[string]*fakeImport
	// steps are what a restore shows, one per GET; then it ends in end
	// ("ready" or "failed").
	steps []fakeStep
	end   string
	// loseAnswerOfPut: that PUT (1-based) keeps its chunk but answers
	// 503, as when the answer is lost.
	loseAnswerOfPut int
	// forgetAfterPut: after that PUT, the server loses the last chunk.
	forgetAfterPut int
	puts           int
	lastChunk      int
}

type fakeStep struct {
	phase   string
	percent int
}

type fakeImport struct {
	id, status, sourceURL, siteID, jobID string
	size                                 int64
	data                                 []byte
	step                                 int
}

func newFakeImports(t *testing.T) (*fakeImports, *httptest.Server) {
	f := &fakeImports{t: t, imports: map[string]*fakeImport{}, end: "ready",
		steps: []fakeStep{{"creating_site", 0}, {"restoring", 40}, {"finishing", 90}}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/app/imports", f.create)
	mux.HandleFunc("GET /api/app/imports/{id}", f.get)
	mux.HandleFunc("PUT /api/app/imports/{id}/upload", f.upload)
	mux.HandleFunc("POST /api/app/imports/{id}/complete", f.complete)
	mux.HandleFunc("DELETE /api/app/imports/{id}", f.cancel)
	mux.HandleFunc("GET /api/app/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		fakeJSON(w, 200, map[string]any{"job": map[string]any{"id": r.PathValue("id"), "status": "failed",
			"error": map[string]any{"code": "import_dump_invalid", "message": "the dump does not load: line 1"}}})
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			fakeErr(w, 401, "auth_required", "no token", nil)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv
}

func fakeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func fakeErr(w http.ResponseWriter, code int, ec, msg string, details map[string]any) {
	if details == nil {
		details = map[string]any{}
	}
	fakeJSON(w, code, map[string]any{"error": map[string]any{"code": ec, "message": msg, "details": details}})
}

// view is controlplane/api's ImportView.
func (i *fakeImport) view() map[string]any {
	got := int64(len(i.data))
	if i.status != "awaiting_upload" && i.status != "uploading" {
		got = i.size
	}
	return map[string]any{"id": i.id, "userId": "usr_a", "orgId": "ws_a", "createdByUserId": "usr_a", "sourceKind": "archive",
		"sourceUrl": i.sourceURL, "artifactId": "", "siteId": i.siteID, "status": i.status, "failureReason": "",
		"sizeBytes": i.size, "receivedBytes": got, "jobId": i.jobID, "createdAt": time.Now().UTC(), "updatedAt": time.Now().UTC()}
}

func (f *fakeImports) find(w http.ResponseWriter, r *http.Request) *fakeImport {
	i := f.imports[r.PathValue("id")]
	if i == nil {
		fakeErr(w, 404, "import_not_found", "import not found", nil)
	}
	return i
}

func (f *fakeImports) create(w http.ResponseWriter, r *http.Request) {
	var body struct {
		SourceURL  string `json:"sourceUrl"`
		SiteID     string `json:"siteId"`
		SizeBytes  int64  `json:"sizeBytes"`
		SourceKind string `json:"sourceKind"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.SizeBytes < 1 || body.SourceKind != "archive" {
		fakeErr(w, 400, "invalid_request", fmt.Sprintf("bad body %+v %v", body, err), nil)
		return
	}
	i := &fakeImport{id: fmt.Sprintf("imp_fake%d", len(f.imports)+1), status: "awaiting_upload", sourceURL: body.SourceURL,
		siteID: body.SiteID, size: body.SizeBytes}
	f.imports[i.id] = i
	fakeJSON(w, 201, map[string]any{"import": i.view()})
}

func (f *fakeImports) upload(w http.ResponseWriter, r *http.Request) {
	i := f.find(w, r)
	if i == nil {
		return
	}
	if r.Header.Get("Content-Type") != "application/octet-stream" {
		fakeErr(w, 400, "invalid_request", "content type", nil)
		return
	}
	off, err := strconv.ParseInt(r.Header.Get("X-Service-Offset"), 10, 64)
	if err != nil || off != int64(len(i.data)) {
		fakeErr(w, 409, "offset_mismatch", "the upload is elsewhere", map[string]any{"expectedOffset": len(i.data)})
		return
	}
	chunk, err := io.ReadAll(r.Body)
	if err != nil || off+int64(len(chunk)) > i.size {
		fakeErr(w, 400, "invalid_request", "cut short or too long", map[string]any{"expectedOffset": len(i.data)})
		return
	}
	f.puts++
	i.data = append(i.data, chunk...)
	i.status = "uploading"
	f.lastChunk = len(chunk)
	if f.puts == f.loseAnswerOfPut {
		fakeErr(w, 503, "service_unavailable", "try again", nil)
		return
	}
	fakeJSON(w, 200, map[string]any{"receivedBytes": len(i.data)})
	if f.puts == f.forgetAfterPut {
		i.data = i.data[:len(i.data)-f.lastChunk]
	}
}

func (f *fakeImports) complete(w http.ResponseWriter, r *http.Request) {
	i := f.find(w, r)
	if i == nil {
		return
	}
	if int64(len(i.data)) != i.size {
		fakeErr(w, 400, "invalid_request", "not all uploaded", map[string]any{"expectedOffset": len(i.data)})
		return
	}
	if i.status == "awaiting_upload" || i.status == "uploading" {
		i.status, i.jobID = "restoring", "job_fake"
		if i.siteID == "" {
			i.siteID = "site_fake"
		}
	}
	fakeJSON(w, 202, map[string]any{"import": i.view(), "jobId": i.jobID})
}

func (f *fakeImports) cancel(w http.ResponseWriter, r *http.Request) {
	i := f.find(w, r)
	if i == nil {
		return
	}
	i.status = "cancelled"
	fakeJSON(w, 200, map[string]any{"import": i.view()})
}

// get is controlplane/api's ImportDetail; a restoring import moves one
// step per read.
func (f *fakeImports) get(w http.ResponseWriter, r *http.Request) {
	i := f.find(w, r)
	if i == nil {
		return
	}
	progress := map[string]any{"phase": "uploading", "percent": int64(len(i.data)) * 100 / i.size, "bytesDone": len(i.data), "bytesTotal": i.size}
	if i.status == "restoring" {
		if i.step < len(f.steps) {
			s := f.steps[i.step]
			progress = map[string]any{"phase": s.phase, "percent": s.percent, "bytesDone": 0, "bytesTotal": i.size}
			i.step++
		} else {
			i.status = f.end
		}
	}
	var site, siteURL, loginURL any
	if i.siteID != "" {
		site = map[string]any{"id": i.siteID, "status": "ready", "url": "https://fake-site.example"}
	}
	switch i.status {
	case "ready":
		progress = map[string]any{"phase": "done", "percent": 100, "bytesDone": i.size, "bytesTotal": i.size}
		siteURL, loginURL = "https://fake-site.example", "https://fake-site.example/?sandbox-login=once"
	case "failed", "cancelled":
		progress = map[string]any{"phase": i.status, "percent": 0, "bytesDone": 0, "bytesTotal": i.size}
	}
	fakeJSON(w, 200, map[string]any{"import": i.view(), "site": site, "progress": progress, "siteUrl": siteURL, "loginUrl": loginURL})
}

// fakeArchive is an archive file of n random-ish bytes that starts as a
// gzip stream does.
func fakeArchive(t *testing.T, n int) (string, []byte) {
	t.Helper()
	b := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
	b[0], b[1] = 0x1f, 0x8b
	p := filepath.Join(t.TempDir(), "site.tar.gz")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func fastPolls(t *testing.T) {
	poll, retry := importsPollInterval, importsRetryWait
	importsPollInterval, importsRetryWait = time.Millisecond, time.Millisecond
	t.Cleanup(func() { importsPollInterval, importsRetryWait = poll, retry })
}

// TestImportsWaitForRestore (fake server): a push follows the restore's
// phases to ready and prints the site and the login link (--json: the
// final GET); a lost answer is retried from where the server is, and a
// server holding fewer bytes than the client thought (409
// offset_mismatch) is caught up from its expected offset. The bytes
// received are the archive's, and nothing stays in the cache.
func TestImportsWaitForRestore(t *testing.T) {
	fastPolls(t)
	for _, tc := range []struct {
		name         string
		lose, forget int
		json         bool
		want         string
	}{
		{name: "plain"},
		{name: "lost answer", lose: 3, want: "trying again"},
		{name: "server forgot a chunk", forget: 2, want: "the server holds 1024 bytes"},
		{name: "json", json: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, srv := newFakeImports(t)
			f.loseAnswerOfPut, f.forgetAfterPut = tc.lose, tc.forget
			cache := importsEnv(t, srv.URL, "tok")
			archive, data := fakeArchive(t, 5000)
			args := []string{"imports", "push", archive, "--source-url", "https://shop.example.com", "--chunk-size", "1K"}
			if tc.json {
				args = append(args, "--json")
			}
			code, out, errs := ctl(t, "", args...)
			if code != 0 || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "restore: restoring 40%") ||
				!strings.Contains(errs, "uploaded 4.9 KiB of 4.9 KiB (100%)") {
				t.Fatalf("push: %d\nstdout: %s\nstderr: %s", code, out, errs)
			}
			if !bytes.Equal(f.imports["imp_fake1"].data, data) {
				t.Fatal("the server holds other bytes than the archive's")
			}
			if tc.json {
				var got struct {
					Import   struct{ Status string }
					SiteURL  string
					LoginURL string
				}
				if json.Unmarshal([]byte(out), &got) != nil || got.Import.Status != "ready" || got.LoginURL == "" {
					t.Fatalf("--json: %s", out)
				}
			} else if !strings.Contains(out, "import imp_fake1 is ready: site site_fake at https://fake-site.example\n") ||
				!strings.Contains(out, "log in (one-time link): https://fake-site.example/?sandbox-login=once") {
				t.Fatalf("stdout: %s", out)
			}
			if left := cacheFiles(t, cache); len(left) != 0 {
				t.Fatalf("left in the cache: %v", left)
			}
		})
	}
}

// TestImportsRestoreFails (fake server): a failed restore exits 1 with
// the restore job's error code, after printing the import with --json.
func TestImportsRestoreFails(t *testing.T) {
	fastPolls(t)
	f, srv := newFakeImports(t)
	f.end = "failed"
	cache := importsEnv(t, srv.URL, "tok")
	archive, _ := fakeArchive(t, 3000)
	code, out, errs := ctl(t, "", "imports", "push", archive, "--source-url", "https://shop.example.com", "--json")
	if code != 1 || !strings.Contains(errs, "sandboxctl: import_dump_invalid: import imp_fake1: the dump does not load") ||
		!strings.Contains(out, `"status": "failed"`) {
		t.Fatalf("failed restore: %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if left := cacheFiles(t, cache); len(left) != 0 {
		t.Fatalf("left in the cache: %v", left)
	}
}

// TestImportsResumeCommand (fake server): `imports resume IMPORT` goes on
// with an interrupted push of a directory (its packed archive, not a new
// one) and with an import interrupted after its last chunk; it refuses a
// state of another server, and waits for an import already restoring.
func TestImportsResumeCommand(t *testing.T) {
	fastPolls(t)
	f, srv := newFakeImports(t)
	cache := importsEnv(t, srv.URL, "tok")
	dir, _ := wpDir(t, 6)
	resumeID := regexp.MustCompile(`imports resume (imp_\w+)`)

	importsStopAfterChunksForTests = 2
	t.Cleanup(func() { importsStopAfterChunksForTests = 0 })
	code, _, errs := ctl(t, "", "imports", "push", dir, "--chunk-size", "2K")
	id := resumeID.FindStringSubmatch(errs)
	if code != 130 || id == nil {
		t.Fatalf("interrupted push: %d %s", code, errs)
	}
	packed, err := os.ReadFile(filepath.Join(cache, importsKey(srv.URL, "", dir)+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	// Another server has no business with it.
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	t.Setenv("SANDBOX_URL", other.URL)
	if code, _, errs := ctl(t, "", "imports", "resume", id[1]); code != 2 || !strings.Contains(errs, "--server "+srv.URL) {
		t.Fatalf("resume on another server: %d %s", code, errs)
	}
	t.Setenv("SANDBOX_URL", srv.URL)

	// Interrupted again right after the last chunk: the upload is whole
	// but not completed.
	chunks := int((int64(len(packed)) - 4096 + 2047) / 2048)
	importsStopAfterChunksForTests = chunks
	code, _, errs = ctl(t, "", "imports", "resume", id[1], "--chunk-size", "2K")
	if code != 130 || !strings.Contains(errs, "resuming import "+id[1]+" from byte 4096") || !strings.Contains(errs, "(100%)") {
		t.Fatalf("resume: %d %s", code, errs)
	}
	importsStopAfterChunksForTests = 0
	code, out, errs := ctl(t, "", "imports", "resume", id[1])
	if code != 0 || !strings.Contains(errs, fmt.Sprintf("from byte %d", len(packed))) || !strings.Contains(out, "is ready") {
		t.Fatalf("resume to the end: %d %s %s", code, out, errs)
	}
	if !bytes.Equal(f.imports[id[1]].data, packed) {
		t.Fatal("the server holds other bytes than the packed archive's")
	}
	if left := cacheFiles(t, cache); len(left) != 0 {
		t.Fatalf("left in the cache: %v", left)
	}

	// An import restoring with no state here is waited for; a ready one
	// is shown.
	f.imports["imp_other"] = &fakeImport{id: "imp_other", status: "restoring", sourceURL: "https://x.example", size: 10, siteID: "site_x"}
	if code, out, errs := ctl(t, "", "imports", "resume", "imp_other"); code != 0 || !strings.Contains(out, "imp_other is ready") ||
		!strings.Contains(errs, "restore: finishing 90%") {
		t.Fatalf("resume a restoring import: %d %s %s", code, out, errs)
	}
	if code, out, _ := ctl(t, "", "imports", "resume", "imp_other"); code != 0 || !strings.Contains(out, "is ready") {
		t.Fatalf("resume a ready import: %d %s", code, out)
	}
	f.imports["imp_up"] = &fakeImport{id: "imp_up", status: "uploading", sourceURL: "https://x.example", size: 10}
	if code, _, errs := ctl(t, "", "imports", "resume", "imp_up"); code != 1 || !strings.Contains(errs, "no saved upload") {
		t.Fatalf("resume an upload saved elsewhere: %d %s", code, errs)
	}
}

// TestImportsRestartLeavesRestore (fake server): --restart over a saved
// push whose import is restoring (the push was stopped while waiting)
// leaves that restore alone and starts a new import; without --restart
// the same command waits for the restore.
func TestImportsRestartLeavesRestore(t *testing.T) {
	fastPolls(t)
	f, srv := newFakeImports(t)
	importsEnv(t, srv.URL, "tok")
	archive, _ := fakeArchive(t, 3000)
	args := []string{"imports", "push", archive, "--source-url", "https://shop.example.com", "--chunk-size", "1K"}
	importsStopAfterChunksForTests = 1
	t.Cleanup(func() { importsStopAfterChunksForTests = 0 })
	if code, _, errs := ctl(t, "", args...); code != 130 {
		t.Fatalf("interrupted push: %d %s", code, errs)
	}
	importsStopAfterChunksForTests = 0
	f.imports["imp_fake1"].status = "restoring"
	code, out, errs := ctl(t, "", append(args, "--restart")...)
	if code != 0 || !strings.Contains(errs, "imp_fake1 goes on restoring") || !strings.Contains(out, "imp_fake2 is ready") ||
		f.imports["imp_fake1"].status != "restoring" {
		t.Fatalf("--restart over a restore: %d %s %s", code, out, errs)
	}
	// Saved again, and restoring: the same command waits for it.
	importsStopAfterChunksForTests = 1
	if code, _, errs := ctl(t, "", args...); code != 130 {
		t.Fatalf("interrupted push: %d %s", code, errs)
	}
	importsStopAfterChunksForTests = 0
	f.imports["imp_fake3"].status = "restoring"
	code, out, errs = ctl(t, "", args...)
	if code != 0 || !strings.Contains(errs, "imp_fake3 is uploaded and restoring; waiting") || !strings.Contains(out, "imp_fake3 is ready") {
		t.Fatalf("push over a restoring import: %d %s %s", code, out, errs)
	}
}
