package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

const bpGallery = "../../blueprint/testdata/gallery/"

// bpFile writes a file in the test's temp dir and returns its path.
func bpFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// bpEnv points sandboxctl at a server: an empty config file, and the
// server and token from the environment (token "" for none).
func bpEnv(t *testing.T, server, token string) {
	t.Helper()
	t.Setenv("SANDBOXCTL_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	t.Setenv("SANDBOX_URL", server)
	t.Setenv("SANDBOX_TOKEN", token)
	t.Setenv("NO_COLOR", "")
}

// TestBlueprintsValidate: validation needs no login; the report names
// each finding's step; the exit code is 0 when the Blueprint runs here
// and 1 when it does not (with --adapt: when the adapted source does
// not); a file that is not a JSON object, or no server, is exit 2.
func TestBlueprintsValidate(t *testing.T) {
	s := st.Single(t, st.Options{})
	bpEnv(t, s.URL(), "")
	bad := `{"preferredVersions":{"php":"5.6","wp":"latest"},"steps":[{"step":"frobnicate"},` +
		`{"step":"installPlugin","pluginZipFile":{"resource":"wordpress.org/plugins","slug":"hello-dolly"},"bogus":1}]}`
	adaptable := `{"steps":[{"step":"runPHP","code":"<?php echo 1;"},{"step":"frobnicate"}]}`
	invalid, fixable := bpFile(t, "bad.json", bad), bpFile(t, "fixable.json", adaptable)
	adapted := filepath.Join(t.TempDir(), "adapted.json")
	for _, c := range []struct {
		name   string
		stdin  string
		args   []string
		code   int
		out    []string // in stdout
		errout []string // in stderr
	}{
		{"gallery file", "", []string{bpGallery + "admin-notice/blueprint.json"}, 0, []string{"admin-notice/blueprint.json: runs here"}, nil},
		{"warnings", "", []string{bpGallery + "woocommerce-product-feed/blueprint.json"}, 0,
			[]string{"SEVERITY  STEP", "warning   step 2 installPlugin  pluginZipFile: pluginZipFile is deprecated", "runs here (3 warnings)"}, nil},
		{"stdin", bad, []string{"-"}, 1, []string{"error     step 1 frobnicate"}, []string{"stdin cannot run here as it is: 3 errors"}},
		{"invalid", "", []string{invalid}, 1,
			[]string{"error     preferredVersions.php", "error     step 1 frobnicate      step: unknown step", "step 2 installPlugin   bogus:"},
			[]string{"bad.json cannot run here as it is: 3 errors"}},
		{"invalid, JSON", "", []string{invalid, "--json"}, 1, []string{`"valid": false`, `"compatReport"`}, []string{"cannot run here"}},
		{"adapted runs", "", []string{fixable, "--adapt"}, 0,
			[]string{"steps[1]  yes     removed the unknown step", "adapted source:", `"code": "<?php echo 1;"`, "runs here once adapted (1 error)"}, nil},
		{"adapted to a file", "", []string{fixable, "--adapt", "-o", adapted}, 0, []string{"wrote the adapted source to " + adapted}, nil},
		{"not even adapted", "", []string{invalid, "--adapt"}, 1, []string{"changes made to run here:"}, []string{"cannot run here, even adapted"}},
		{"not JSON", "", []string{bpFile(t, "x.json", "{\n  \"steps\": [nope]\n}")}, 2, nil, []string{"x.json is not JSON: line 2, column 14"}},
		{"empty", "", []string{bpFile(t, "e.json", "")}, 2, nil, []string{"the file is empty"}},
		{"not an object", "", []string{bpFile(t, "a.json", "[]")}, 2, nil, []string{"a Blueprint is a JSON object"}},
		{"no file", "", []string{filepath.Join(t.TempDir(), "none.json")}, 2, nil, []string{"read the Blueprint"}},
		{"-o alone", "", []string{invalid, "-o", adapted + "2"}, 2, nil, []string{"give --adapt too"}},
		{"no argument", "", nil, 2, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := ctl(t, c.stdin, append([]string{"blueprints", "validate"}, c.args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, c.code, out, errs)
			}
			for _, want := range c.out {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			for _, want := range c.errout {
				if !strings.Contains(errs, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errs)
				}
			}
			// The report's tables fit 80 columns (the verdict names the
			// file as given, and JSON is printed as it is).
			for _, l := range strings.Split(out, "\n") {
				if (c.name == "warnings" || c.name == "invalid") && len([]rune(l)) > 80 && !strings.Contains(l, ".json:") {
					t.Errorf("a line wider than 80 columns: %q", l)
				}
			}
		})
	}
	var doc map[string]any
	if b, err := os.ReadFile(adapted); err != nil || json.Unmarshal(b, &doc) != nil || !strings.Contains(string(b), "<?php") {
		t.Fatalf("the adapted file: %v %s", err, b)
	}
	// No server at all is a usage error.
	t.Setenv("SANDBOX_URL", "")
	if code, _, errs := ctl(t, "", "blueprints", "validate", invalid); code != 2 || !strings.Contains(errs, "which server?") {
		t.Fatalf("no server: %d %s", code, errs)
	}
	// --server alone, or a profile's server, is enough.
	if code, _, errs := ctl(t, "", "--server", s.URL(), "blueprints", "validate", bpGallery+"admin-notice/blueprint.json"); code != 0 {
		t.Fatalf("--server without a login: %d %s", code, errs)
	}
}

// TestBlueprintsSaved: save (named from meta.title), get (fields,
// report, --source), list, update (source: a new revision; name), import
// from a URL (printed, or written with -o), upload of a bundle (preview,
// refused until its changes are accepted, saved), runs, delete; unknown
// ids and refused runs are exit 1 with the API's code.
func TestBlueprintsSaved(t *testing.T) {
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bp.json":
			http.ServeFile(w, r, bpGallery+"admin-notice/blueprint.json")
		case "/b.zip":
			w.Write([]byte("PK\x03\x04 a zip"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer files.Close()
	// The server fetches imports through its address guard: loopback is
	// let through only for this test.
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} }})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	bpEnv(t, s.URL(), alice.Token)
	must := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, errs := ctl(t, "", args...)
		if code != want {
			t.Fatalf("%v: exit %d, want %d\n%s\n%s", args, code, want, out, errs)
		}
		return out, errs
	}
	var saved struct {
		Blueprint struct {
			ID         string
			Name       string
			Revision   int
			SourceJSON json.RawMessage
		}
	}
	gallery := bpGallery + "woocommerce-product-feed/blueprint.json"
	out, _ := must(0, "blueprints", "save", gallery, "--json")
	if json.Unmarshal([]byte(out), &saved) != nil || saved.Blueprint.ID == "" || saved.Blueprint.Revision != 1 {
		t.Fatalf("save --json: %s", out)
	}
	id := saved.Blueprint.ID
	if out, _ = must(0, "blueprints", "get", id); !strings.Contains(out, "revision     1") || !strings.Contains(out, "3 warnings") ||
		!strings.Contains(out, "step 2 installPlugin") {
		t.Fatalf("get: %s", out)
	}
	src, _ := os.ReadFile(gallery)
	out, _ = must(0, "blueprints", "get", id, "--source")
	var a, b any
	if json.Unmarshal([]byte(out), &a) != nil || json.Unmarshal(src, &b) != nil || !bpSame(a, b) {
		t.Fatalf("get --source is not the file saved: %s", out)
	}
	if out, _ = must(0, "blueprints", "save", bpGallery+"admin-notice/blueprint.json"); !strings.Contains(out, "saved bp_") ||
		!strings.Contains(out, "(Display Admin Notice") || strings.Contains(out, "cannot run") {
		t.Fatalf("save: %s", out)
	}
	if code, out, errs := ctl(t, `{"steps":[]}`, "blueprints", "save", "-", "--name", "Empty", "--description", "on purpose"); code != 0 ||
		!strings.Contains(out, "(Empty)") {
		t.Fatalf("save from stdin: %d %s %s", code, out, errs)
	}
	if code, _, errs := ctl(t, "{}", "blueprints", "save", "-"); code != 2 || !strings.Contains(errs, "--name") {
		t.Fatalf("save from stdin without a name: %d %s", code, errs)
	}
	broken := bpFile(t, "broken.json", `{"steps":[{"step":"frobnicate"}]}`)
	out, _ = must(0, "blueprints", "update", id, broken)
	if !strings.Contains(out, "(revision 2)") || !strings.Contains(out, "it cannot run until its errors are fixed") {
		t.Fatalf("update with a source: %s", out)
	}
	if out, _ = must(0, "blueprints", "update", id, "--name", "Feed"); !strings.Contains(out, "Feed") || !strings.Contains(out, "(revision 2)") {
		t.Fatalf("update --name: %s", out)
	}
	if out, _ = must(0, "blueprints", "list"); !strings.HasPrefix(out, "ID") || !strings.Contains(out, id) || !strings.Contains(out, "1 error") {
		t.Fatalf("list: %s", out)
	}
	// A Blueprint with errors is refused a run, with its findings.
	if _, errs := must(1, "blueprints", "run", id); !strings.Contains(errs, "invalid_request") || !strings.Contains(errs, "frobnicate") {
		t.Fatalf("run of a Blueprint with errors: %s", errs)
	}
	if out, _ = must(0, "blueprints", "runs", id); !strings.HasPrefix(out, "RUN") {
		t.Fatalf("runs: %s", out)
	}
	// Import: printed, or written to a file; nothing is saved.
	if out, _ = must(0, "blueprints", "import", files.URL+"/bp.json"); !strings.Contains(out, "Display Admin Notice") {
		t.Fatalf("import: %s", out)
	}
	dest := filepath.Join(t.TempDir(), "imported.json")
	if out, _ = must(0, "blueprints", "import", files.URL+"/bp.json", "-o", dest); !strings.Contains(out, "wrote "+dest) {
		t.Fatalf("import -o: %s", out)
	}
	if got, _ := os.ReadFile(dest); !json.Valid(got) || !strings.Contains(string(got), "bgnightly-notice") {
		t.Fatalf("imported file: %s", got)
	}
	if _, errs := must(1, "blueprints", "import", files.URL+"/b.zip"); !strings.Contains(errs, "invalid_request") || !strings.Contains(errs, "ZIP") {
		t.Fatalf("import of a ZIP: %s", errs)
	}
	// Upload: a bundle whose unknown step must go (a change that needs
	// review) is previewed, refused, then saved once accepted.
	bundle := bpZip(t, map[string]string{
		"shop/blueprint.json": `{"meta":{"title":"Shop in a box","author":"me"},"steps":[{"step":"runSql","sql":{"resource":"bundled","path":"./db.sql"}},{"step":"frobnicate"}]}`,
		"shop/db.sql":         "SELECT 1;",
	})
	if out, _ = must(0, "blueprints", "upload", bundle, "--preview"); !strings.Contains(out, "preview (nothing saved): Shop in a box") ||
		!strings.Contains(out, "removed the unknown step") {
		t.Fatalf("upload --preview: %s", out)
	}
	if _, errs := must(1, "blueprints", "upload", bundle); !strings.Contains(errs, "--accept-adaptations") || !strings.Contains(errs, "REVIEW") {
		t.Fatalf("upload without accepting: %s", errs)
	}
	if out, _ = must(0, "blueprints", "upload", bundle, "--accept-adaptations", "--name", "Shop"); !strings.Contains(out, "saved bp_") ||
		!strings.Contains(out, "in shop/") {
		t.Fatalf("upload: %s", out)
	}
	if _, errs := must(2, "blueprints", "upload", filepath.Join(t.TempDir(), "none.zip")); !strings.Contains(errs, "read the bundle") {
		t.Fatalf("upload of no file: %s", errs)
	}
	must(0, "blueprints", "delete", id)
	for _, args := range [][]string{{"get", id}, {"delete", id}, {"runs", id}, {"update", id, "--name", "x"}} {
		if _, errs := must(1, append([]string{"blueprints"}, args...)...); !strings.Contains(errs, "blueprint_not_found") {
			t.Fatalf("%v after delete: %s", args, errs)
		}
	}
	for _, args := range [][]string{{"get"}, {"update", id}, {"save"}, {"import"}, {"list", "x"}, {"runs"}, {"delete"}, {"upload"}, {"get", id, "--bogus"}} {
		if code, _, errs := ctl(t, "", append([]string{"blueprints"}, args...)...); code != 2 {
			t.Errorf("%v: exit %d %s", args, code, errs)
		}
	}
	// Commands that need a token say so without one.
	t.Setenv("SANDBOX_TOKEN", "")
	if code, _, errs := ctl(t, "", "blueprints", "list"); code != 2 || !strings.Contains(errs, "not logged in") {
		t.Fatalf("list without a login: %d %s", code, errs)
	}
}

// bpSame compares decoded JSON values.
func bpSame(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// bpZip writes a ZIP of the files given and returns its path.
func bpZip(t *testing.T, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(content))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "bundle.zip")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
