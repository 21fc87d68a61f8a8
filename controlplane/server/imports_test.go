package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/imports"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/objstore/objstoretest"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// restoreAgent is a node agent that makes sites at once and keeps what
// each restore streamed to it; fail makes restores fail, block makes
// them wait for their stream to be cancelled.
type restoreAgent struct {
	fakeAgent
	mu        sync.Mutex
	restores  map[string][]byte // site → bytes received
	headers   map[string]*agentv1.RestoreHeader
	fail      bool
	block     bool
	cancelled chan string
	// refuse, when set, is the refusal (agentv1.Refusal*) a restore ends
	// with, as an agent says a limit was hit.
	refuse string
}

func (f *restoreAgent) RestoreArchive(ctx context.Context, stream *connect.ClientStream[agentv1.RestoreArchiveRequest]) (*connect.Response[agentv1.RestoreArchiveResponse], error) {
	var hdr *agentv1.RestoreHeader
	var data bytes.Buffer
	for stream.Receive() {
		if h := stream.Msg().Header; h != nil {
			hdr = h
		}
		data.Write(stream.Msg().Data)
	}
	f.mu.Lock()
	f.restores[hdr.GetSiteId()] = data.Bytes()
	f.headers[hdr.GetSiteId()] = hdr
	fail, block, refuse := f.fail, f.block, f.refuse
	f.mu.Unlock()
	if refuse != "" {
		ce := connect.NewError(connect.CodeResourceExhausted, errors.New("refused: "+refuse))
		ce.Meta().Set(agentv1.RefusalKey, refuse)
		return nil, ce
	}
	if block {
		<-ctx.Done()
		f.cancelled <- hdr.GetSiteId()
		return nil, ctx.Err()
	}
	if fail {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New(`archive entry "../etc/passwd": name leaves the archive`))
	}
	return connect.NewResponse(&agentv1.RestoreArchiveResponse{Files: 3, AdminLogin: "liveadmin", Tables: 12}), nil
}

func (f *restoreAgent) got(site string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restores[site]
}

func (f *restoreAgent) set(fail, block bool) {
	f.mu.Lock()
	f.fail, f.block = fail, block
	f.mu.Unlock()
}

func startRestoreAgent(t *testing.T, s *server.Server) *restoreAgent {
	t.Helper()
	f := &restoreAgent{restores: map[string][]byte{}, headers: map[string]*agentv1.RestoreHeader{}, cancelled: make(chan string, 4)}
	f.url = serveAgent(t, f)
	n := state.Node{ID: "node-fake", Address: f.url, BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}, Status: state.NodeReady,
		MemoryMB: 64 << 10, MaxSites: 100}
	if _, err := s.Node().Apply(context.Background(), fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
	return f
}

// upload sends one chunk at offset.
func upload(c *st.Account, id string, offset int64, chunk []byte) *st.Response {
	return c.Do("PUT", "/api/app/imports/"+id+"/upload", chunk, "Content-Type", "application/octet-stream",
		"X-Service-Offset", strconv.FormatInt(offset, 10))
}

func waitImport(t *testing.T, c *st.Account, id string, statuses ...string) *st.Response {
	t.Helper()
	var r *st.Response
	st.WaitFor(t, 20*time.Second, "import "+id, func() bool {
		r = c.Do("GET", "/api/app/imports/"+id, nil).Must(t, 200)
		for _, s := range statuses {
			if r.Str("import.status") == s {
				return true
			}
		}
		return false
	})
	return r
}

// brokenBody yields n bytes, then fails: a client whose connection drops
// mid-chunk.
type brokenBody struct{ left int }

func (b *brokenBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, errors.New("connection dropped")
	}
	n := min(len(p), b.left)
	for i := range p[:n] {
		p[i] = 'x'
	}
	b.left -= n
	return n, nil
}

// TestImports: an archive uploaded in chunks, with a dropped chunk and a
// wrong offset on the way, is sealed and restored into a new sandbox
// (the node receives exactly the bytes uploaded); the import then shows
// the site, a login link and full progress; deleting the site marks it
// site_deleted, and its row can be removed. Bad input is refused with
// the error envelope and leaves nothing behind; another workspace sees
// nothing.
func TestImports(t *testing.T) {
	logs := &st.LogBuffer{}
	var dataDir string
	s := st.Single(t, st.Options{Logs: logs, Configure: func(c *server.Config) { dataDir = c.DataDir }})
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	agent := startRestoreAgent(t, s)
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	mallory := st.NewAccount(t, s, "mallory@example.com", "paid")

	archive := make([]byte, 3<<20+123)
	_, _ = rand.Read(archive)
	size := int64(len(archive))

	for _, bad := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"sizeBytes": size}, "sourceUrl"},
		{map[string]any{"sourceUrl": "ftp://live.example.com", "sizeBytes": size}, "sourceUrl"},
		{map[string]any{"sourceUrl": "https://u:p@live.example.com", "sizeBytes": size}, "sourceUrl"},
		{map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 0}, "sizeBytes"},
		{map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": size, "sourceKind": "ftp"}, "sourceKind"},
	} {
		r := alice.Do("POST", "/api/app/imports", bad.body).Must(t, 400)
		if r.Code() != "invalid_request" || r.Details()["field"] != bad.field {
			t.Errorf("%v: %s", bad.body, r.Raw)
		}
	}
	alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": size, "extra": 1}).Must(t, 400)
	if r := alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": size,
		"siteId": "site_nope"}).Must(t, 404); r.Code() != "site_not_found" {
		t.Fatalf("unknown site: %s", r.Raw)
	}

	imp := alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://Live.Example.com/", "sizeBytes": size}).Must(t, 201)
	id := imp.Str("import.id")
	if imp.Str("import.status") != "awaiting_upload" || imp.Str("import.sourceKind") != "archive" ||
		imp.Str("import.sourceUrl") != "https://live.example.com" || imp.Str("import.siteId") != "" {
		t.Fatalf("created: %s", imp.Raw)
	}
	if r := mallory.Do("GET", "/api/app/imports/"+id, nil).Must(t, 404); r.Code() != "import_not_found" {
		t.Fatalf("another workspace: %s", r.Raw)
	}
	upload(mallory, id, 0, archive[:10]).Must(t, 404)

	// Bad uploads: no offset, wrong type, wrong offset.
	alice.Do("PUT", "/api/app/imports/"+id+"/upload", archive[:10], "Content-Type", "application/octet-stream").Must(t, 400)
	alice.Do("PUT", "/api/app/imports/"+id+"/upload", archive[:10], "X-Service-Offset", "0").Must(t, 400)
	if r := upload(alice, id, 7, archive[:10]).Must(t, 409); r.Code() != "offset_mismatch" || r.Details()["expectedOffset"] != float64(0) {
		t.Fatalf("wrong offset: %s", r.Raw)
	}
	first := int64(1 << 20)
	if r := upload(alice, id, 0, archive[:first]).Must(t, 200); r.Get("receivedBytes") != float64(first) {
		t.Fatalf("first chunk: %s", r.Raw)
	}
	if r := alice.Do("GET", "/api/app/imports/"+id, nil).Must(t, 200); r.Str("import.status") != "uploading" ||
		r.Str("progress.phase") != "uploading" || r.Get("progress.bytesDone") != float64(first) || r.Get("import.receivedBytes") != float64(first) {
		t.Fatalf("after one chunk: %s", r.Raw)
	}
	// A chunk that dies on the way is not kept at all.
	req, _ := http.NewRequest("PUT", s.URL()+"/api/app/imports/"+id+"/upload", &brokenBody{left: 200 << 10})
	req.Header.Set("Authorization", "Bearer "+alice.Token)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Service-Offset", strconv.FormatInt(first, 10))
	req.ContentLength = 1 << 20
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	st.WaitFor(t, 5*time.Second, "the dropped chunk undone", func() bool {
		r := upload(alice, id, first+1, []byte("x"))
		return r.Status == 409 && r.Details()["expectedOffset"] == float64(first)
	})
	// Going past sizeBytes keeps nothing.
	over := append(append([]byte(nil), archive[first:]...), 'Z')
	if r := upload(alice, id, first, over).Must(t, 400); r.Details()["expectedOffset"] != float64(first) {
		t.Fatalf("past sizeBytes: %s", r.Raw)
	}
	// Completing early says where to go on.
	if r := alice.Do("POST", "/api/app/imports/"+id+"/complete", nil).Must(t, 400); r.Details()["expectedOffset"] != float64(first) {
		t.Fatalf("early complete: %s", r.Raw)
	}
	// The client resumes from expectedOffset.
	for off := first; off < size; off += 1 << 20 {
		end := min(size, off+1<<20)
		upload(alice, id, off, archive[off:end]).Must(t, 200)
	}
	done := alice.Do("POST", "/api/app/imports/"+id+"/complete", nil).Must(t, 202)
	siteID, jobID := done.Str("import.siteId"), done.Str("jobId")
	sum := sha256.Sum256(archive)
	if done.Str("import.status") != "restoring" || siteID == "" || jobID == "" || done.Str("import.artifactId") != hex.EncodeToString(sum[:]) {
		t.Fatalf("complete: %s", done.Raw)
	}
	again := alice.Do("POST", "/api/app/imports/"+id+"/complete", nil).Must(t, 202)
	if again.Str("jobId") != jobID {
		t.Fatalf("complete twice: %s", again.Raw)
	}
	ready := waitImport(t, alice, id, "ready", "failed")
	if ready.Str("import.status") != "ready" || ready.Str("site.id") != siteID || ready.Str("site.status") != "ready" ||
		ready.Str("siteUrl") == "" || ready.Str("loginUrl") == "" || ready.Str("progress.phase") != "done" || ready.Get("progress.percent") != float64(100) {
		t.Fatalf("ready: %s", ready.Raw)
	}
	if got := agent.got(siteID); !bytes.Equal(got, archive) {
		t.Fatalf("the node received %d bytes, not the %d uploaded", len(got), len(archive))
	}
	if h := agent.headers[siteID]; h.SourceUrl != "https://live.example.com" || len(h.Parts) != 1 || h.Parts[0].Size != size {
		t.Fatalf("header: %v", h)
	}
	if site := alice.Do("GET", "/api/app/sites/"+siteID, nil).Must(t, 200); site.Str("site.name") != "Import of live.example.com" {
		t.Fatalf("site: %s", site.Raw)
	}
	if sv, _ := s.Node().Store().Site(siteID); sv.Entry.User != "liveadmin" {
		t.Fatalf("login entry: %+v", sv.Entry)
	}
	if entries, _ := os.ReadDir(filepath.Join(dataDir, "imports")); len(entries) != 0 {
		t.Fatalf("upload left on disk: %v", entries)
	}
	list := alice.Do("GET", "/api/app/imports", nil).Must(t, 200)
	if items := list.List("imports"); len(items) != 1 || items[0]["siteUrl"] != ready.Str("siteUrl") {
		t.Fatalf("list: %s", list.Raw)
	}
	if items := mallory.Do("GET", "/api/app/imports", nil).Must(t, 200).List("imports"); len(items) != 0 {
		t.Fatalf("mallory lists %v", items)
	}

	// A finished import cannot be cancelled; unknown actions are refused.
	alice.Do("DELETE", "/api/app/imports/"+id, nil).Must(t, 409)
	alice.Do("DELETE", "/api/app/imports/"+id+"?action=purge", nil).Must(t, 400)
	// Deleting the site moves the import to site_deleted.
	alice.Do("DELETE", "/api/app/sites/"+siteID, nil).Must(t, 202)
	waitImport(t, alice, id, "site_deleted")
	alice.Do("DELETE", "/api/app/imports/"+id+"?action=delete", nil).Must(t, 200)
	alice.Do("GET", "/api/app/imports/"+id, nil).Must(t, 404)

	// Cancel keeps the row and drops the bytes; the import takes no more.
	c := alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 100}).Must(t, 201).Str("import.id")
	upload(alice, c, 0, archive[:40]).Must(t, 200)
	if r := alice.Do("DELETE", "/api/app/imports/"+c, nil).Must(t, 200); r.Str("import.status") != "cancelled" {
		t.Fatalf("cancel: %s", r.Raw)
	}
	upload(alice, c, 40, archive[40:100]).Must(t, 400)
	alice.Do("POST", "/api/app/imports/"+c+"/complete", nil).Must(t, 400)
	if _, err := os.Stat(filepath.Join(dataDir, "imports", c+".part")); !os.IsNotExist(err) {
		t.Fatalf("cancelled upload kept: %v", err)
	}
	alice.Do("GET", "/api/app/imports/"+c, nil).Must(t, 200)

	// Without an object store, multipart answers local.
	if r := alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 10}).Must(t, 201); true {
		mp := alice.Do("POST", "/api/app/imports/"+r.Str("import.id")+"/multipart/init", map[string]any{
			"objects": []map[string]any{{"key": "site.tar", "sizeBytes": 10}}}).Must(t, 200)
		if mp.Str("mode") != "local" || mp.Get("partSizeBytes") == nil {
			t.Fatalf("multipart without a store: %s", mp.Raw)
		}
		alice.Do("POST", "/api/app/imports/"+r.Str("import.id")+"/multipart/part-url", map[string]any{"key": "site.tar", "partNumber": 1}).Must(t, 400)
	}

	// A restore the node refuses fails the import with its reason and
	// removes the sandbox made for it.
	agent.set(true, false)
	f := alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 5}).Must(t, 201).Str("import.id")
	upload(alice, f, 0, []byte("hello")).Must(t, 200)
	fsite := alice.Do("POST", "/api/app/imports/"+f+"/complete", nil).Must(t, 202).Str("import.siteId")
	failed := waitImport(t, alice, f, "failed", "ready")
	if failed.Str("import.status") != "failed" || !bytes.Contains([]byte(failed.Str("import.failureReason")), []byte("leaves the archive")) {
		t.Fatalf("failed restore: %s", failed.Raw)
	}
	st.WaitFor(t, 10*time.Second, "the failed import's sandbox removed", func() bool {
		return alice.Do("GET", "/api/app/sites/"+fsite, nil).Status == 404
	})

	// Cancelling a restore under way stops it on the node.
	agent.set(false, true)
	b := alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 5}).Must(t, 201).Str("import.id")
	upload(alice, b, 0, []byte("hello")).Must(t, 200)
	bsite := alice.Do("POST", "/api/app/imports/"+b+"/complete", nil).Must(t, 202).Str("import.siteId")
	st.WaitFor(t, 10*time.Second, "the restore under way", func() bool { return agent.got(bsite) != nil })
	if r := alice.Do("DELETE", "/api/app/imports/"+b, nil).Must(t, 200); r.Str("import.status") != "cancelled" {
		t.Fatalf("cancel a restore: %s", r.Raw)
	}
	if got := st.Await(t, agent.cancelled, 10*time.Second, "the node's restore cancelled"); got != bsite {
		t.Fatalf("cancelled %s", got)
	}
	st.WaitFor(t, 10*time.Second, "the cancelled import's sandbox removed", func() bool {
		return alice.Do("GET", "/api/app/sites/"+bsite, nil).Status == 404
	})

	// Too many unfinished imports.
	agent.set(false, false)
	var open []string
	for range 6 {
		r := alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 5})
		if r.Status == 409 {
			break
		}
		open = append(open, r.Must(t, 201).Str("import.id"))
	}
	if len(open) != state.MaxOpenImports-1 { // one from the multipart check is still open
		t.Fatalf("opened %d imports before 409", len(open))
	}
}

// putPart uploads one part to a presigned URL, as a client does.
func putPart(t *testing.T, url string, data []byte) {
	t.Helper()
	req, _ := http.NewRequest("PUT", url, bytes.NewReader(data))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("part upload: %d %s", resp.StatusCode, body)
	}
}

// storeFiles lists the files in the object store's bucket directory:
// objects, and the parts of unfinished uploads (under .sgwtmp).
func storeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(filepath.Join(dir, "imports-test"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestImportsMultipart: with a real S3-compatible store (VersityGW), a
// client uploads two objects part by part to presigned URLs, completes
// them and finalizes a manifest; the node receives the objects in the
// manifest's order as one stream, and the objects are removed after.
// Bad keys, parts and manifests are refused; an aborted upload fails the
// import and removes what was uploaded.
func TestImportsMultipart(t *testing.T) {
	storeCfg, storeDir := objstoretest.Start(t)
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.ImportStore = storeCfg }})
	agent := startRestoreAgent(t, s)
	alice := st.NewAccount(t, s, "alice@example.com", "paid")

	big := make([]byte, imports.PartSize+1000)
	_, _ = rand.Read(big)
	dump := []byte("CREATE TABLE wp_options (option_id int);\n")
	total := int64(len(big) + len(dump))
	id := alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": total}).Must(t, 201).Str("import.id")
	base := "/api/app/imports/" + id + "/multipart/"
	for _, bad := range []map[string]any{
		{"objects": []map[string]any{}},
		{"objects": []map[string]any{{"key": "../x", "sizeBytes": total}}},
		{"objects": []map[string]any{{"key": "a", "sizeBytes": total - 1}}},
		{"objects": []map[string]any{{"key": "a", "sizeBytes": 1}, {"key": "a", "sizeBytes": total - 1}}},
	} {
		alice.Do("POST", base+"init", bad).Must(t, 400)
	}
	init := alice.Do("POST", base+"init", map[string]any{"objects": []map[string]any{
		{"key": "files.tar", "sizeBytes": len(big)}, {"key": "database.sql", "sizeBytes": len(dump)}}}).Must(t, 200)
	if init.Str("mode") != "direct" || init.Str("uploadId") == "" || init.Get("partSizeBytes") != float64(imports.PartSize) {
		t.Fatalf("init: %s", init.Raw)
	}
	// Chunks go to the store in direct mode, not to the API.
	upload(alice, id, 0, []byte("x")).Must(t, 400)
	alice.Do("POST", base+"part-url", map[string]any{"key": "files.tar", "partNumber": 3}).Must(t, 400)
	alice.Do("POST", base+"part-url", map[string]any{"key": "other.tar", "partNumber": 1}).Must(t, 400)
	partURL := func(key string, n int) string {
		return alice.Do("POST", base+"part-url", map[string]any{"key": key, "partNumber": n}).Must(t, 200).Str("url")
	}
	putPart(t, partURL("files.tar", 1), big[:imports.PartSize])
	// An object missing a part cannot be completed; the manifest needs
	// every object complete.
	if r := alice.Do("POST", base+"complete-object", map[string]any{"key": "files.tar"}).Must(t, 400); r.Details()["receivedBytes"] != float64(imports.PartSize) {
		t.Fatalf("incomplete object: %s", r.Raw)
	}
	putPart(t, partURL("files.tar", 2), big[imports.PartSize:])
	alice.Do("POST", base+"complete-object", map[string]any{"key": "files.tar", "parts": []map[string]any{{"partNumber": 1, "etag": "bogus"}}}).Must(t, 400)
	alice.Do("POST", base+"complete-object", map[string]any{"key": "files.tar"}).Must(t, 200)
	alice.Do("POST", base+"finalize", map[string]any{"manifest": map[string]any{"objects": []map[string]any{
		{"key": "files.tar", "kind": "archive"}, {"key": "database.sql", "kind": "sql"}}}}).Must(t, 400)
	putPart(t, partURL("database.sql", 1), dump)
	alice.Do("POST", base+"complete-object", map[string]any{"key": "database.sql"}).Must(t, 200)
	if r := alice.Do("GET", "/api/app/imports/"+id, nil).Must(t, 200); r.Get("progress.bytesDone") != float64(total) {
		t.Fatalf("progress: %s", r.Raw)
	}
	for _, bad := range []map[string]any{
		{"objects": []map[string]any{{"key": "files.tar", "kind": "archive"}}},
		{"objects": []map[string]any{{"key": "files.tar", "kind": "archive"}, {"key": "database.sql", "kind": "exe"}}},
		{"objects": []map[string]any{{"key": "files.tar", "kind": "archive"}, {"key": "files.tar", "kind": "archive"}}},
	} {
		alice.Do("POST", base+"finalize", map[string]any{"manifest": bad}).Must(t, 400)
	}
	fin := alice.Do("POST", base+"finalize", map[string]any{"manifest": map[string]any{"objects": []map[string]any{
		{"key": "database.sql", "kind": "sql"}, {"key": "files.tar", "kind": "archive"}}}}).Must(t, 202)
	siteID := fin.Str("import.siteId")
	if fin.Str("import.status") != "restoring" || fin.Str("jobId") == "" {
		t.Fatalf("finalize: %s", fin.Raw)
	}
	waitImport(t, alice, id, "ready")
	if got := agent.got(siteID); !bytes.Equal(got, append(append([]byte(nil), dump...), big...)) {
		t.Fatalf("the node received %d bytes in another order or shape", len(got))
	}
	h := agent.headers[siteID]
	if len(h.Parts) != 2 || h.Parts[0].Kind != "sql" || h.Parts[0].Size != int64(len(dump)) || h.Parts[1].Kind != "archive" {
		t.Fatalf("parts: %v", h.Parts)
	}
	st.WaitFor(t, 10*time.Second, "the restored objects removed from the store", func() bool { return len(storeFiles(t, storeDir)) == 0 })

	// Abort: the import fails and what was uploaded goes.
	ab := alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 10}).Must(t, 201).Str("import.id")
	abase := "/api/app/imports/" + ab + "/multipart/"
	alice.Do("POST", abase+"init", map[string]any{"objects": []map[string]any{{"key": "a.tar", "sizeBytes": 4}, {"key": "b.sql", "sizeBytes": 6}}}).Must(t, 200)
	putPart(t, alice.Do("POST", abase+"part-url", map[string]any{"key": "a.tar", "partNumber": 1}).Must(t, 200).Str("url"), []byte("abcd"))
	alice.Do("POST", abase+"complete-object", map[string]any{"key": "a.tar"}).Must(t, 200)
	putPart(t, alice.Do("POST", abase+"part-url", map[string]any{"key": "b.sql", "partNumber": 1}).Must(t, 200).Str("url"), []byte("select"))
	if n := len(storeFiles(t, storeDir)); n != 2 { // an object and a part
		t.Fatalf("the store holds %d files of the upload", n)
	}
	if r := alice.Do("POST", abase+"abort", nil).Must(t, 200); r.Str("import.status") != "failed" || r.Str("import.failureReason") == "" {
		t.Fatalf("abort: %s", r.Raw)
	}
	if left := storeFiles(t, storeDir); len(left) != 0 {
		t.Fatalf("abort left %v", left)
	}
	alice.Do("POST", abase+"abort", nil).Must(t, 400)
}

// TestImportRefusals: a restore the node refuses for a limit fails the
// import's job with the limit's code: a dump over the node's fixed cap
// (a .sql.gz bomb) is payload_too_large; the site's disk full (its files
// and its database) is plan_limit_reached with the details the API's
// error envelope gives: plan, limit and resource.
func TestImportRefusals(t *testing.T) {
	s := st.Single(t, st.Options{})
	agent := startRestoreAgent(t, s)
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	for _, tc := range []struct {
		refuse, code string
		details      map[string]any
	}{
		{agentv1.RefusalTooLarge, "payload_too_large", nil},
		{agentv1.RefusalDiskFull, "plan_limit_reached", map[string]any{"resource": "siteDiskMb", "plan": "paid",
			"limit": float64(plans.Default().Paid.SiteDiskMB)}},
	} {
		t.Run(tc.refuse, func(t *testing.T) {
			agent.mu.Lock()
			agent.refuse = tc.refuse
			agent.mu.Unlock()
			archive := []byte("an archive the node refuses")
			imp := alice.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com",
				"sizeBytes": len(archive)}).Must(t, 201)
			id := imp.Str("import.id")
			upload(alice, id, 0, archive).Must(t, 200)
			jobID := alice.Do("POST", "/api/app/imports/"+id+"/complete", nil).Must(t, 202).Str("jobId")
			if r := waitImport(t, alice, id, "ready", "failed"); r.Str("import.status") != "failed" {
				t.Fatalf("import: %s", r.Raw)
			}
			var job *st.Response
			st.WaitFor(t, 20*time.Second, "the job to end", func() bool {
				job = alice.Do("GET", "/api/app/jobs/"+jobID, nil).Must(t, 200)
				return job.Str("job.status") == "failed"
			})
			if job.Str("job.error.code") != tc.code {
				t.Fatalf("job: %s", job.Raw)
			}
			details, _ := job.Get("job.error.details").(map[string]any)
			if tc.details == nil && details != nil {
				t.Fatalf("details of %s: %s", tc.code, job.Raw)
			}
			for k, v := range tc.details {
				if details[k] != v {
					t.Fatalf("details.%s: %s", k, job.Raw)
				}
			}
		})
	}
}
