package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/mirror"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// TestBlueprintsAPI: validate without a token (plain and adapted, source
// as an object or a string, bad input), validate a saved Blueprint with
// one, save (legacy sourceJson too), list, replace the source (revision
// + 1, report recomputed), rename (revision kept), delete, another
// workspace's Blueprint 404, the plan's quota, and replayed saves.
func TestBlueprintsAPI(t *testing.T) {
	s := st.Single(t, st.Options{})
	fakeNode(t, s) // PHP 8.2 here, so versions are checked
	alice := st.NewAccount(t, s, "alice@example.com", "free")
	bob := st.NewAccount(t, s, "bob@example.com", "paid")
	anon := alice.As("")
	tt5, err := os.ReadFile("../../blueprint/testdata/gallery/tt5-demo/blueprint.json")
	if err != nil {
		t.Fatal(err)
	}

	v := anon.Do("POST", "/api/app/blueprints/validate", map[string]any{"source": string(tt5), "adapt": true}).Must(t, 200)
	if v.Get("valid") != false || !hasFinding(v.List("compatReport"), "unknown_property", "preferredVersion", "preferredVersions") {
		t.Fatalf("tt5-demo: %s", v.Raw)
	}
	if v.Get("adapted.source.preferredVersions.wp") != "6.1" || len(v.List("adapted.changes")) == 0 {
		t.Fatalf("adapted: %s", v.Raw)
	}
	obj := anon.Do("POST", "/api/app/blueprints/validate", map[string]any{"source": map[string]any{
		"preferredVersions": map[string]any{"php": "8.0", "wp": "latest"},
		"steps":             []any{map[string]any{"step": "wp-cli", "command": "wp db drop --yes"}}}}).Must(t, 200)
	if !hasFinding(obj.List("compatReport"), "php_version_unavailable", "preferredVersions.php", "8.2") ||
		!hasFinding(obj.List("compatReport"), "wpcli_command_unsupported", "steps[0].command", "wp db") || obj.Get("adapted") != nil {
		t.Fatalf("object source: %s", obj.Raw)
	}
	for _, bad := range []any{nil, "{not json", "[1,2]", 42, `"a string"`} {
		body := map[string]any{"source": bad}
		if r := anon.Do("POST", "/api/app/blueprints/validate", body); r.Status != 400 || r.Code() != "invalid_request" || r.Details()["field"] != "source" {
			t.Fatalf("source %v: %d %s", bad, r.Status, r.Raw)
		}
	}
	if r := anon.Do("POST", "/api/app/blueprints/validate", map[string]any{"source": map[string]any{}, "extra": 1}); r.Status != 400 || r.Details()["field"] != "extra" {
		t.Fatalf("unknown field: %d %s", r.Status, r.Raw)
	}

	saved := alice.Do("POST", "/api/app/blueprints", map[string]any{"name": "TT5 demo", "sourceJson": string(tt5)}).Must(t, 201)
	id := saved.Str("blueprint.id")
	if !strings.HasPrefix(id, "bp_") || saved.Get("blueprint.revision") != float64(1) || saved.Get("blueprint.schemaVersion") != float64(1) ||
		saved.Str("blueprint.slug") != "tt5-demo" || saved.Str("blueprint.hoistedWordpressVersion") != "" ||
		saved.Get("blueprint.sourceJson.landingPage") != "/" || len(saved.List("blueprint.compatReport")) == 0 {
		t.Fatalf("saved: %s", saved.Raw)
	}
	// The saved one is checked with a token; without one, or from another
	// workspace, it does not exist.
	if r := anon.Do("POST", "/api/app/blueprints/validate", map[string]any{"blueprintId": id}); r.Status != 401 {
		t.Fatalf("blueprintId without a token: %d %s", r.Status, r.Raw)
	}
	if r := bob.Do("POST", "/api/app/blueprints/validate", map[string]any{"blueprintId": id}); r.Status != 404 || r.Code() != "blueprint_not_found" {
		t.Fatalf("another workspace's: %d %s", r.Status, r.Raw)
	}
	alice.Do("POST", "/api/app/blueprints/validate", map[string]any{"blueprintId": id}).Must(t, 200)
	for _, path := range []string{"/api/app/blueprints/" + id} {
		if r := bob.Do("GET", path, nil); r.Status != 404 {
			t.Fatalf("bob reads alice's: %d", r.Status)
		}
	}

	fixed := alice.Do("PATCH", "/api/app/blueprints/"+id, map[string]any{"source": map[string]any{
		"preferredVersions": map[string]any{"php": "8.2", "wp": "latest"}, "landingPage": "/wp-admin/"}}).Must(t, 200)
	if fixed.Get("blueprint.revision") != float64(2) || len(fixed.List("blueprint.compatReport")) != 0 || fixed.Str("blueprint.hoistedPhpVersion") != "8.2" {
		t.Fatalf("new source: %s", fixed.Raw)
	}
	renamed := alice.Do("PATCH", "/api/app/blueprints/"+id, map[string]any{"name": "Renamed"}).Must(t, 200)
	if renamed.Get("blueprint.revision") != float64(2) || renamed.Str("blueprint.name") != "Renamed" || renamed.Str("blueprint.slug") != "tt5-demo" {
		t.Fatalf("rename: %s", renamed.Raw)
	}
	if r := alice.Do("PATCH", "/api/app/blueprints/"+id, map[string]any{"source": "[]"}); r.Status != 400 {
		t.Fatalf("bad PATCH source: %d", r.Status)
	}
	if r := alice.Do("POST", "/api/app/blueprints", map[string]any{"name": "No source"}); r.Status != 400 || r.Details()["field"] != "source" {
		t.Fatalf("no source: %d %s", r.Status, r.Raw)
	}

	// Replayed with its key: one Blueprint, the same answer.
	first := alice.Do("POST", "/api/app/blueprints", map[string]any{"name": "Keyed", "source": map[string]any{}}, "Idempotency-Key", "bp-1").Must(t, 201)
	again := alice.Do("POST", "/api/app/blueprints", map[string]any{"name": "Keyed", "source": map[string]any{}}, "Idempotency-Key", "bp-1").Must(t, 201)
	if first.Str("blueprint.id") != again.Str("blueprint.id") {
		t.Fatalf("replay made another: %s / %s", first.Raw, again.Raw)
	}
	// The free plan keeps 10.
	for i := len(alice.Do("GET", "/api/app/blueprints", nil).Must(t, 200).List("blueprints")); i < 10; i++ {
		alice.Do("POST", "/api/app/blueprints", map[string]any{"name": "Fill", "source": map[string]any{}}).Must(t, 201)
	}
	if r := alice.Do("POST", "/api/app/blueprints", map[string]any{"name": "Eleventh", "source": map[string]any{}}); r.Status != 402 || r.Code() != "plan_limit_reached" {
		t.Fatalf("eleventh: %d %s", r.Status, r.Raw)
	}

	alice.Do("DELETE", "/api/app/blueprints/"+id, nil).Must(t, 200)
	if r := alice.Do("GET", "/api/app/blueprints/"+id, nil); r.Status != 404 || r.Code() != "blueprint_not_found" {
		t.Fatalf("after delete: %d %s", r.Status, r.Raw)
	}
}

func hasFinding(fs []map[string]any, code, path, mention string) bool {
	for _, f := range fs {
		if f["code"] == code && f["path"] == path && strings.Contains(f["message"].(string), mention) {
			return true
		}
	}
	return false
}

// TestBlueprintImport: a Blueprint's JSON is fetched and returned without
// being saved; a ZIP (by name or by content), a page that is not JSON,
// and an address the guard refuses are 400s.
func TestBlueprintImport(t *testing.T) {
	tt5, err := os.ReadFile("../../blueprint/testdata/gallery/tt5-demo/blueprint.json")
	if err != nil {
		t.Fatal(err)
	}
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bp.json":
			w.Write(tt5)
		case "/bundle":
			w.Write([]byte("PK\x03\x04 a zip"))
		case "/page":
			w.Write([]byte("<html>not json</html>"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer files.Close()
	open := st.Single(t, st.Options{Configure: func(c *server.Config) { c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} }})
	alice := st.NewAccount(t, open, "alice@example.com", "paid")
	r := alice.Do("POST", "/api/app/blueprints/import", map[string]any{"url": files.URL + "/bp.json"}).Must(t, 200)
	if r.Str("source") != strings.TrimSpace(string(tt5)) || r.Str("sourceUrl") != files.URL+"/bp.json" {
		t.Fatalf("import: %.200s", r.Raw)
	}
	if n := len(alice.Do("GET", "/api/app/blueprints", nil).Must(t, 200).List("blueprints")); n != 0 {
		t.Fatalf("an import saved %d", n)
	}
	for _, c := range []struct{ url, mention string }{
		{files.URL + "/bundle", "ZIP"}, {files.URL + "/x.zip", "ZIP"}, {files.URL + "/page", "not a Blueprint"},
		{files.URL + "/missing", "could not be fetched"}, {"ftp://example.com/a.json", "http(s)"}, {"", "http(s)"},
	} {
		if r := alice.Do("POST", "/api/app/blueprints/import", map[string]any{"url": c.url}); r.Status != 400 || r.Details()["field"] != "url" ||
			!strings.Contains(r.Str("error.message"), c.mention) {
			t.Fatalf("%s: %d %s", c.url, r.Status, r.Raw)
		}
	}
	// Without the allow-list, loopback is out of reach.
	closed := st.Single(t, st.Options{})
	bob := st.NewAccount(t, closed, "bob@example.com", "paid")
	if r := bob.Do("POST", "/api/app/blueprints/import", map[string]any{"url": files.URL + "/bp.json"}); r.Status != 400 ||
		!strings.Contains(r.Str("error.message"), "not allowed") {
		t.Fatalf("loopback without the allow-list: %d %s", r.Status, r.Raw)
	}
}

// TestBlueprintUpload: a bundle is previewed without saving, refused
// while a change it needs is not accepted, saved once it is (the source
// adapted, the bundle's size and manifest directory kept), fetched from
// a bundleUrl; a bundle with a missing file, two manifests, or both a
// file and a URL is refused and saves nothing; a replayed upload saves
// once.
func TestBlueprintUpload(t *testing.T) {
	var zipServed []byte
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(zipServed) }))
	defer files.Close()
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} }})
	fakeNode(t, s) // PHP 8.2 only
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	source := `{"meta":{"title":"Shop in a box","author":"me"},"preferredVersions":{"php":"8.0","wp":"latest"},
		"steps":[{"step":"runSql","sql":{"resource":"bundled","path":"./db.sql"}},{"step":"importWxr","file":{"resource":"bundled","path":"content/site.xml"}}]}`
	bundle := wpzip.BuildRaw([2]string{"shop/blueprint.json", source}, [2]string{"shop/db.sql", "SELECT 1;"}, [2]string{"shop/content/site.xml", "<rss/>"})
	upload := func(fields map[string]string, zip []byte, query string) *st.Response {
		file := ""
		if zip != nil {
			file = "bundle"
		}
		body, ct := st.Multipart(fields, file, "bundle.zip", zip)
		return alice.Do("POST", "/api/app/blueprints/upload"+query, body, "Content-Type", ct)
	}
	count := func() int { return len(alice.Do("GET", "/api/app/blueprints", nil).Must(t, 200).List("blueprints")) }

	pre := upload(nil, bundle, "?preview=1").Must(t, 200)
	if pre.Str("blueprint.id") != "" || pre.Str("blueprint.name") != "Shop in a box" || pre.Str("blueprint.bundleManifestDirectory") != "shop" ||
		!hasChange(pre.List("adapted.changes"), "preferredVersions.php", true) || count() != 0 {
		t.Fatalf("preview: %s", pre.Raw)
	}
	if r := upload(nil, bundle, ""); r.Status != 400 || r.Details()["field"] != "adaptationsAccepted" || count() != 0 {
		t.Fatalf("unaccepted: %d %s", r.Status, r.Raw)
	}
	// A replay sends the same bytes (one multipart boundary).
	keyed, ct := st.Multipart(map[string]string{"adaptationsAccepted": "true", "name": "Shop"}, "bundle", "bundle.zip", bundle)
	saved := alice.Do("POST", "/api/app/blueprints/upload", keyed, "Content-Type", ct, "Idempotency-Key", "up-1").Must(t, 201)
	if saved.Str("blueprint.sourceJson.preferredVersions.php") != "8.2" || saved.Get("blueprint.bundleSizeBytes") != float64(len(bundle)) ||
		saved.Str("blueprint.bundleManifestDirectory") != "shop" || len(saved.List("blueprint.compatReport")) != 0 || saved.Str("blueprint.name") != "Shop" {
		t.Fatalf("saved: %s", saved.Raw)
	}
	again := alice.Do("POST", "/api/app/blueprints/upload", keyed, "Content-Type", ct, "Idempotency-Key", "up-1").Must(t, 201)
	if again.Str("blueprint.id") != saved.Str("blueprint.id") || count() != 1 {
		t.Fatalf("replay: %s", again.Raw)
	}
	// Checked again later, its bundled files still count.
	if v := alice.Do("POST", "/api/app/blueprints/validate", map[string]any{"blueprintId": saved.Str("blueprint.id")}).Must(t, 200); v.Get("valid") != true {
		t.Fatalf("a saved bundle checked again: %s", v.Raw)
	}
	zipServed = bundle
	fromURL := upload(map[string]string{"bundleUrl": files.URL + "/b.zip", "adaptationsAccepted": "1"}, nil, "").Must(t, 201)
	if fromURL.Str("blueprint.bundleManifestDirectory") != "shop" || count() != 2 {
		t.Fatalf("from a URL: %s", fromURL.Raw)
	}

	missing := wpzip.BuildRaw([2]string{"blueprint.json", source}, [2]string{"db.sql", "x"})
	for name, c := range map[string]struct {
		fields map[string]string
		zip    []byte
		field  string
	}{
		"missing file":  {map[string]string{"adaptationsAccepted": "true"}, missing, "bundle"},
		"two manifests": {nil, wpzip.BuildRaw([2]string{"blueprint.json", "{}"}, [2]string{"a/blueprint.json", "{}"}), "bundle"},
		"escape":        {nil, wpzip.BuildRaw([2]string{"blueprint.json", "{}"}, [2]string{"../x.php", "x"}), "bundle"},
		"file and url":  {map[string]string{"bundleUrl": files.URL + "/b.zip"}, bundle, "bundle"},
		"neither":       {map[string]string{"name": "x"}, nil, "bundle"},
		"not json":      {nil, wpzip.BuildRaw([2]string{"blueprint.json", "steps: []"}), "bundle"},
		"bad flag":      {map[string]string{"adaptationsAccepted": "maybe"}, bundle, "adaptationsAccepted"},
	} {
		if r := upload(c.fields, c.zip, ""); r.Status != 400 || r.Details()["field"] != c.field {
			t.Fatalf("%s: %d %s", name, r.Status, r.Raw)
		}
	}
	if n := count(); n != 2 {
		t.Fatalf("refused uploads saved: %d", n)
	}
	if r := upload(map[string]string{"adaptationsAccepted": "true"}, missing, ""); !strings.Contains(string(r.Raw), "bundled_file_missing") {
		t.Fatalf("missing file not named: %s", r.Raw)
	}

	// Deleting the last Blueprint of a bundle drops the bundle's blob; an
	// upload past the quota stores none.
	store := s.BlobSync().Store
	blueprintSHA := func(id string) string {
		b, _ := s.Node().Store().Blueprint(id)
		return b.BundleSHA256
	}
	other := wpzip.BuildRaw([2]string{"blueprint.json", `{"steps":[]}`}, [2]string{"extra.txt", "distinct bytes"})
	third := upload(nil, other, "").Must(t, 201)
	sha := blueprintSHA(third.Str("blueprint.id"))
	if !store.Has(context.Background(), sha) || sha != sha256hex(other) {
		t.Fatalf("the bundle's blob is not stored under its SHA-256: %s", sha)
	}
	alice.Do("DELETE", "/api/app/blueprints/"+third.Str("blueprint.id"), nil).Must(t, 200)
	if store.Has(context.Background(), sha) {
		t.Fatal("a deleted Blueprint's bundle is kept")
	}
	bob := st.NewAccount(t, s, "bob@example.com", "free")
	for i := 0; i < 10; i++ {
		bob.Do("POST", "/api/app/blueprints", map[string]any{"name": "Fill", "source": map[string]any{}}).Must(t, 201)
	}
	overQuota := wpzip.BuildRaw([2]string{"blueprint.json", `{"steps":[]}`}, [2]string{"over.txt", "never stored"})
	body, ct := st.Multipart(nil, "bundle", "b.zip", overQuota)
	if r := bob.Do("POST", "/api/app/blueprints/upload", body, "Content-Type", ct); r.Status != 402 {
		t.Fatalf("over the quota: %d %s", r.Status, r.Raw)
	}
	if store.Has(context.Background(), sha256hex(overQuota)) {
		t.Fatal("an upload refused by the quota stored its bundle")
	}
}

func sha256hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func hasChange(cs []map[string]any, path string, review bool) bool {
	for _, c := range cs {
		if c["path"] == path && c["reviewRequired"] == review {
			return true
		}
	}
	return false
}

// TestResourceMirror: with the operator's mirror, a code host's page URL
// imports from the mirror, and validation reports a URL the mirror does
// not map as unreachable when only the mirror may be used.
func TestResourceMirror(t *testing.T) {
	tt5, _ := os.ReadFile("../../blueprint/testdata/gallery/tt5-demo/blueprint.json")
	var mu sync.Mutex
	var asked []string
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		w.Write(tt5)
	}))
	defer files.Close()
	m, err := mirror.Parse("raw.githubusercontent.com="+files.URL+"/gh,downloads.wordpress.org="+files.URL+"/wporg", false)
	if err != nil {
		t.Fatal(err)
	}
	// No --fetch-allow: the mirror (on loopback here, as on a private
	// network) is reached by its own client, and only it.
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.ResourceMirror = m }})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	r := alice.Do("POST", "/api/app/blueprints/import", map[string]any{"url": "https://github.com/WordPress/blueprints/blob/trunk/blueprints/tt5-demo/blueprint.json"}).Must(t, 200)
	mu.Lock()
	got := append([]string(nil), asked...)
	mu.Unlock()
	if r.Str("sourceUrl") != "https://raw.githubusercontent.com/WordPress/blueprints/trunk/blueprints/tt5-demo/blueprint.json" ||
		len(got) != 1 || got[0] != "/gh/WordPress/blueprints/trunk/blueprints/tt5-demo/blueprint.json" {
		t.Fatalf("import through the mirror: %s, asked %v", r.Raw, got)
	}
	// The mirror's address is not open to tenant URLs, nor may a URL
	// climb out of a mapped directory.
	if r := alice.Do("POST", "/api/app/blueprints/validate", map[string]any{"source": map[string]any{"steps": []any{
		map[string]any{"step": "importWxr", "file": map[string]any{"resource": "url", "url": files.URL + "/x.xml"}}}}}).Must(t, 200); r.Get("valid") != false {
		t.Fatalf("the mirror's address reachable as a tenant URL: %s", r.Raw)
	}
	if r := alice.Do("POST", "/api/app/blueprints/import", map[string]any{"url": "https://raw.githubusercontent.com/../admin/x.json"}); r.Status != 400 ||
		!strings.Contains(r.Str("error.message"), "segments") {
		t.Fatalf("dot segments: %d %s", r.Status, r.Raw)
	}
	if r := alice.Do("POST", "/api/app/blueprints/import", map[string]any{"url": "https://example.com/blueprint.json"}); r.Status != 400 ||
		!strings.Contains(r.Str("error.message"), "not mirrored") {
		t.Fatalf("unmapped import: %d %s", r.Status, r.Raw)
	}
	v := alice.Do("POST", "/api/app/blueprints/validate", map[string]any{"source": map[string]any{"plugins": []any{"woocommerce"},
		"steps": []any{map[string]any{"step": "importWxr", "file": map[string]any{"resource": "url", "url": "https://example.com/a.xml"}}}}}).Must(t, 200)
	if !hasFinding(v.List("compatReport"), "resource_unreachable", "steps[0].file.url", "not mirrored") ||
		hasFinding(v.List("compatReport"), "resource_unreachable", "plugins[0]", "") {
		t.Fatalf("reach through the mirror: %s", v.Raw)
	}
}
