package library

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/blobs"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/safefetch"
	"github.com/sandboxd/sandboxd/internal/seal"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// codeHost is a releases API on loopback: one repository whose latest
// release can be changed.
type codeHost struct {
	*httptest.Server
	mu  sync.Mutex
	tag string
	zip []byte
}

func newCodeHost(t *testing.T) *codeHost {
	h := &codeHost{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		defer h.mu.Unlock()
		switch r.URL.Path {
		case "/repos/acme/hello/releases/latest":
			_ = json.NewEncoder(w).Encode(map[string]any{"tag_name": h.tag, "assets": []map[string]any{
				{"name": "notes.txt", "browser_download_url": h.URL + "/notes.txt", "size": 3},
				{"name": "hello.zip", "browser_download_url": h.URL + "/hello.zip", "size": len(h.zip)}}})
		case "/hello.zip":
			_, _ = w.Write(h.zip)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *codeHost) release(tag string, zip []byte) {
	h.mu.Lock()
	h.tag, h.zip = tag, zip
	h.mu.Unlock()
}

type world struct {
	svc   *Service
	store *state.Store
	blobs *blobs.Store
	ws    *state.Workspace
	host  *codeHost
}

func newWorld(t *testing.T, limits plans.Config) *world {
	t.Helper()
	store := state.NewStore()
	ws := state.Workspace{ID: "ws_a", OwnerID: "usr_a", Name: "A"}
	if err := store.Update(func(tx *state.Tx) error {
		return tx.CreateAccount(state.Account{ID: "usr_a", Email: "a@x.io", Plan: state.PlanFree, PersonalWorkspaceID: "ws_a"}, ws)
	}); err != nil {
		t.Fatal(err)
	}
	bs, err := blobs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := seal.New("cluster-secret-for-tests", "license-key")
	if err != nil {
		t.Fatal(err)
	}
	host := newCodeHost(t)
	svc := New(Config{Store: store, Raft: fsm.NewLocal(store), Plans: limits, Blobs: bs, Sealer: sealer,
		Fetch: safefetch.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, 10*time.Second), GitHubAPI: host.URL})
	return &world{svc: svc, store: store, blobs: bs, ws: &ws, host: host}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestUploadTakesTheFirstFreeSlug: the same plugin twice gets its slug,
// then the slug with -2; both entries name the stored ZIP.
func TestUploadTakesTheFirstFreeSlug(t *testing.T) {
	w := newWorld(t, plans.Default())
	zip := wpzip.BuildPlugin("hello", "Hello Dolly", "1.0", "")
	var slugs []string
	for range 2 {
		e, err := w.svc.Upload(context.Background(), nil, w.ws, `C:\Users\me\hello.zip`, zip, nil)
		if err != nil {
			t.Fatal(err)
		}
		slugs = append(slugs, e.Slug)
		if e.Filename != "hello.zip" || e.Kind != "plugin" || e.BlobSHA256 != sha(zip) {
			t.Errorf("entry %+v", e)
		}
	}
	if strings.Join(slugs, " ") != "hello-dolly hello-dolly-2" {
		t.Fatalf("slugs %v", slugs)
	}
	if !w.blobs.Has(context.Background(), sha(zip)) {
		t.Fatal("the ZIP is not stored")
	}
}

// TestRefusedUploadKeepsNoZip: an upload past the plan's quota, or not a
// plugin at all, leaves neither an entry nor its ZIP.
func TestRefusedUploadKeepsNoZip(t *testing.T) {
	limits := plans.Default()
	limits.Free.LibraryEntries = 1
	w := newWorld(t, limits)
	if _, err := w.svc.Upload(context.Background(), nil, w.ws, "a.zip", wpzip.BuildPlugin("a", "A", "1", ""), nil); err != nil {
		t.Fatal(err)
	}
	second := wpzip.BuildPlugin("b", "B", "1", "")
	_, err := w.svc.Upload(context.Background(), nil, w.ws, "b.zip", second, nil)
	var quota *state.QuotaError
	if !errors.As(err, &quota) {
		t.Fatalf("second upload on a plan of one: %v", err)
	}
	if w.blobs.Has(context.Background(), sha(second)) {
		t.Fatal("the refused upload's ZIP was kept")
	}
	bad := []byte("not a zip")
	if _, err := w.svc.Upload(context.Background(), nil, w.ws, "c.zip", bad, nil); err == nil || w.blobs.Has(context.Background(), sha(bad)) {
		t.Fatalf("not a ZIP: %v (kept: %v)", err, w.blobs.Has(context.Background(), sha(bad)))
	}
	if es, _ := w.store.LibraryOf(w.ws.ID); len(es) != 1 {
		t.Fatalf("%d entries", len(es))
	}
}

// TestReleaseEntryRefreshes: a repository entry holds its latest
// release; a refresh with the same tag changes nothing, a new tag
// replaces the ZIP and drops the old one.
func TestReleaseEntryRefreshes(t *testing.T) {
	w := newWorld(t, plans.Default())
	v1, v2 := wpzip.BuildPlugin("hello", "Hello", "1.0", ""), wpzip.BuildPlugin("hello", "Hello", "2.0", "")
	w.host.release("v1.0", v1)
	ctx := context.Background()
	if _, err := w.svc.AddRelease(ctx, nil, w.ws, "https://github.com/acme/missing", nil); err == nil {
		t.Fatal("a repository without a release was added")
	}
	e, err := w.svc.AddRelease(ctx, nil, w.ws, "https://github.com/acme/hello.git", nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Version != "v1.0" || e.GithubRepository != "acme/hello" || e.Filename != "hello.zip" {
		t.Fatalf("entry %+v", e)
	}
	same, updated, err := w.svc.Refresh(ctx, e)
	if err != nil || updated || same.BlobSHA256 != sha(v1) {
		t.Fatalf("refresh on the same tag: %+v %v %v", same, updated, err)
	}
	w.host.release("v2.0", v2)
	next, updated, err := w.svc.Refresh(ctx, e)
	if err != nil || !updated || next.Version != "v2.0" || next.BlobSHA256 != sha(v2) {
		t.Fatalf("refresh on a new tag: %+v %v %v", next, updated, err)
	}
	if w.blobs.Has(context.Background(), sha(v1)) || !w.blobs.Has(context.Background(), sha(v2)) {
		t.Fatalf("after refresh: old kept %v, new held %v", w.blobs.Has(context.Background(), sha(v1)), w.blobs.Has(context.Background(), sha(v2)))
	}
	up, err := w.svc.Upload(ctx, nil, w.ws, "x.zip", wpzip.BuildPlugin("x", "X", "1", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.svc.Refresh(ctx, up); code(err) != apierr.CodeInvalidRequest {
		t.Fatalf("refresh of an upload: %v", err)
	}
}

func code(err error) string {
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// TestLicenseKeys: a key is stored sealed with a hint, a read returns it
// and stamps the read, a cleared key cannot be read.
func TestLicenseKeys(t *testing.T) {
	w := newWorld(t, plans.Default())
	ctx := context.Background()
	e, err := w.svc.Upload(ctx, nil, w.ws, "a.zip", wpzip.BuildPlugin("a", "A", "1", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.SetLicense(ctx, e, "two\nlines"); code(err) != apierr.CodeInvalidRequest {
		t.Fatalf("a two-line key: %v", err)
	}
	e, err = w.svc.SetLicense(ctx, e, "KEY-1234-5678")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(e.LicenseSealed), "KEY-1234") || e.LicenseHint == "" || e.LicenseLastReadAt != nil {
		t.Fatalf("stored %+v", e)
	}
	key, err := w.svc.ReadLicense(ctx, e, "usr_a")
	if err != nil || key != "KEY-1234-5678" {
		t.Fatalf("read %q %v", key, err)
	}
	if got, _ := w.store.LibraryEntry(w.ws.ID, e.ID); got.LicenseLastReadAt == nil {
		t.Fatal("the read was not stamped")
	}
	e, err = w.svc.ClearLicense(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.ReadLicense(ctx, e, "usr_a"); !errors.Is(err, ErrNoLicense) {
		t.Fatalf("read of a cleared key: %v", err)
	}
}

func TestParseRepository(t *testing.T) {
	tests := []struct{ in, want string }{
		{"acme/hello", "acme/hello"},
		{" https://github.com/acme/hello.git ", "acme/hello"},
		{"https://GitHub.com/acme/hello/", "acme/hello"},
		{"http://github.com/acme/hello", ""},
		{"https://evil.test/acme/hello", ""},
		{"acme/../etc", ""},
		{"acme", ""},
		{"-acme/hello", ""},
	}
	for _, tt := range tests {
		got, err := ParseRepository(tt.in)
		if got != tt.want || (tt.want == "") != (err != nil) {
			t.Errorf("ParseRepository(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
