package api_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
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
