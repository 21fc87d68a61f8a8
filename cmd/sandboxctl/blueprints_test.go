package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/apiclient"
	"github.com/sandboxd/sandboxd/blueprint"
	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
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
	if code, _, errs := ctl(t, "", "blueprints", "list"); code != 2 || !strings.Contains(errs, "no token for") {
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

// bpFakeAPI answers the run routes as the real API does (its views and
// error envelopes), with runs that move on one state per read: a stand-in
// for a system with nodes, which st.Single has none of.
type bpFakeAPI struct {
	t     *testing.T
	mu    sync.Mutex
	runs  map[string][]api.RunView // each read returns the next; the last repeats
	reads map[string]int
	jobs  map[string]api.JobView
}

var bpT0 = time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)

// bpRunStates is a run's states, one per read: each state lists its
// steps' statuses (installPlugin, activatePlugin, login); the run's own
// status follows from them.
func bpRunStates(id, bp, mode, job string, failure string, states ...[]string) []api.RunView {
	names := []string{"installPlugin", "activatePlugin", "login"}
	ms := []int64{2100, 300, 50}
	var out []api.RunView
	for _, steps := range states {
		r := api.RunView{ID: id, BlueprintID: bp, OrgID: "ws_1", Mode: mode, SiteID: "site_1", JobID: job, Status: "pending",
			Steps: []api.RunStepView{}, CreatedAt: bpT0}
		if mode == "bake" {
			r.TemplateID = "tpl_1"
		}
		for i, s := range steps {
			v := api.RunStepView{Name: names[i], Status: s, Path: fmt.Sprintf("steps[%d]", i), Caption: "doing " + names[i]}
			if s == "succeeded" || s == "failed" {
				v.DurationMs = ms[i]
			}
			r.Steps = append(r.Steps, v)
		}
		if len(steps) > 0 {
			started := bpT0.Add(time.Second)
			r.Status, r.StartedAt = "running", &started
		}
		switch last := steps; {
		case len(last) > 0 && !slices.Contains(last, "pending") && !slices.Contains(last, "running"):
			done := bpT0.Add(4 * time.Second)
			r.FinishedAt = &done
			r.Status = "succeeded"
			if slices.Contains(last, "failed") {
				r.Status, r.FailureReason = "failed", failure
				r.Log = "== steps[0] installPlugin (2100 ms)\nInstalled hello-dolly.\n== steps[1] activatePlugin (300 ms)\nerror: " +
					strings.TrimPrefix(failure, "steps[1] (activatePlugin): ") + "\n"
			}
		}
		out = append(out, r)
	}
	return out
}

func newBPFake(t *testing.T) (*bpFakeAPI, *httptest.Server) {
	f := &bpFakeAPI{t: t}
	f.reset()
	mux := http.NewServeMux()
	json200 := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	notFound := func(w http.ResponseWriter, code, what string) {
		apierr.Write(w, apierr.NotFound(code, what))
	}
	site := api.SiteView{ID: "site_1", OrgID: "ws_1", Name: "demo", Slug: "demo", Status: "creating", URL: "https://demo.sandbox.test",
		PHPVersion: "8.2", CreatedAt: bpT0, UpdatedAt: bpT0}
	mux.HandleFunc("POST /api/app/blueprints/{id}/sites", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("id") {
		case "bp_ok":
			json200(w, 202, map[string]any{"site": site, "run": f.runs["bpr_ok"][0]})
		case "bp_bad":
			apierr.Write(w, apierr.New(400, apierr.CodeInvalidRequest, "the Blueprint cannot run here: steps[0]: unknown step \"frobnicate\"").
				With("compatReport", []blueprint.Finding{{Severity: "error", Path: "steps[0]", Code: "unknown_step", Message: `unknown step "frobnicate"`}}))
		default:
			notFound(w, apierr.CodeBlueprintNotFound, "blueprint")
		}
	})
	mux.HandleFunc("POST /api/app/sites/{id}/blueprint", func(w http.ResponseWriter, r *http.Request) {
		var body api.ApplyBlueprintRequest
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			apierr.Write(w, apierr.Invalid("", "bad JSON"))
			return
		}
		switch {
		case r.PathValue("id") != "site_1":
			notFound(w, apierr.CodeSiteNotFound, "site")
		case body.BlueprintID == "bp_fail":
			json200(w, 202, map[string]any{"run": f.runs["bpr_fail"][0]})
		case body.BlueprintID == "" && len(body.Source) > 0:
			json200(w, 202, map[string]any{"run": f.runs["bpr_unsaved"][0]})
		default:
			notFound(w, apierr.CodeBlueprintNotFound, "blueprint")
		}
	})
	mux.HandleFunc("POST /api/app/blueprints/{id}/bake", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "bp_ok" {
			notFound(w, apierr.CodeBlueprintNotFound, "blueprint")
			return
		}
		json200(w, 202, map[string]any{"template": api.TemplateView{ID: "tpl_1", Name: "Shop", Status: "building"}, "run": f.runs["bpr_bake"][0]})
	})
	mux.HandleFunc("GET /api/app/templates/{id}", func(w http.ResponseWriter, r *http.Request) {
		json200(w, 200, map[string]any{"template": api.TemplateView{ID: "tpl_1", Name: "Shop", Status: "ready"}})
	})
	mux.HandleFunc("GET /api/app/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		j, ok := f.jobs[r.PathValue("id")]
		if !ok {
			notFound(w, apierr.CodeJobNotFound, "job")
			return
		}
		json200(w, 200, map[string]any{"job": j})
	})
	mux.HandleFunc("GET /api/app/blueprints/{id}/runs", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "bp_ok" {
			notFound(w, apierr.CodeBlueprintNotFound, "blueprint")
			return
		}
		states := f.runs["bpr_ok"]
		json200(w, 200, map[string]any{"runs": []api.RunView{states[len(states)-1]}})
	})
	mux.HandleFunc("GET /api/app/blueprints/{id}/runs/{run}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id := r.PathValue("run")
		states, ok := f.runs[id]
		bp := r.PathValue("id")
		if bp == "unsaved" {
			bp = ""
		}
		if !ok || states[0].BlueprintID != bp {
			notFound(w, apierr.CodeBlueprintNotFound, "blueprint run")
			return
		}
		n := f.reads[id]
		f.reads[id]++
		if id == "bpr_flaky" && n%2 == 0 {
			// Every other read fails as during a leader change.
			apierr.Write(w, apierr.Unavailable("no leader"))
			return
		}
		if id == "bpr_flaky" {
			n /= 2
		}
		json200(w, 200, map[string]any{"run": states[min(n, len(states)-1)]})
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sbx_fake" {
			apierr.Write(w, apierr.AuthRequired())
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv
}

// reset starts every run over.
func (f *bpFakeAPI) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	P, R, S, F, K := "pending", "running", "succeeded", "failed", "skipped"
	ok := [][]string{nil, {R, P, P}, {R, P, P}, {S, R, P}, {S, S, S}}
	failure := "steps[1] (activatePlugin): Plugin file does not exist."
	f.runs = map[string][]api.RunView{
		"bpr_ok":      bpRunStates("bpr_ok", "bp_ok", "create", "job_ok", "", ok...),
		"bpr_fail":    bpRunStates("bpr_fail", "bp_fail", "apply", "job_fail", failure, []string{R, P, P}, []string{S, F, K}),
		"bpr_unsaved": bpRunStates("bpr_unsaved", "", "apply", "job_unsaved", "", []string{S, S, S}),
		"bpr_bake":    bpRunStates("bpr_bake", "bp_ok", "bake", "job_bake", "", []string{S, R, P}, []string{S, S, S}),
		"bpr_flaky":   bpRunStates("bpr_flaky", "bp_ok", "create", "", "", []string{S, R, P}, []string{S, S, S}),
	}
	f.reads = map[string]int{}
	done := bpT0.Add(5 * time.Second)
	f.jobs = map[string]api.JobView{
		"job_ok":   {ID: "job_ok", Type: "create_site", Status: "succeeded", FinishedAt: &done},
		"job_fail": {ID: "job_fail", Type: "apply_blueprint", Status: "failed", Error: &state.JobError{Code: "blueprint_run_failed", Message: "x"}},
		"job_bake": {ID: "job_bake", Type: "bake_template", Status: "succeeded", FinishedAt: &done},
	}
}

// TestBlueprintsRunsFake: run, apply (saved and from a file), bake and
// watch against a fake API whose runs advance one state per read. Off a
// terminal, each step's change is printed once, in order; a run that
// succeeds exits 0, one that fails exits 1 with the run's code and
// reason on stderr and the log's tail on stdout; --json prints only the
// final run; reads that fail for a while are retried; refusals and
// unknown ids are exit 1, wrong command lines exit 2.
func TestBlueprintsRunsFake(t *testing.T) {
	f, srv := newBPFake(t)
	bpEnv(t, srv.URL, "sbx_fake")
	defer func(d time.Duration) { bpPollEvery = d }(bpPollEvery)
	bpPollEvery = time.Millisecond
	for _, c := range []struct {
		name     string
		stdin    string
		args     []string
		code     int
		lines    []string // stdout lines, each exactly once and in this order
		errout   string   // in stderr
		notInOut string
	}{
		{name: "run --watch", args: []string{"run", "bp_ok", "--name", "demo", "--watch"}, lines: []string{
			"status     creating",
			"run bpr_ok (create on site site_1): pending",
			"run bpr_ok (create on site site_1): running, 3 steps",
			"step 1/3 installPlugin: running",
			"step 1/3 installPlugin: done (2.1 s)",
			"step 2/3 activatePlugin: running",
			"step 2/3 activatePlugin: done (0.3 s)",
			"step 3/3 login: done (0.1 s)",
			"run bpr_ok succeeded: 3 steps in 3.0 s",
			"site site_1 is ready: https://demo.sandbox.test",
		}},
		{name: "run", args: []string{"run", "bp_ok"}, lines: []string{"run bpr_ok is pending; follow it: sandboxctl blueprints watch bp_ok bpr_ok"}},
		{name: "watch", args: []string{"watch", "bp_ok", "bpr_ok"}, lines: []string{"step 1/3 installPlugin: running", "run bpr_ok succeeded: 3 steps in 3.0 s"}},
		{name: "apply --watch, failing", args: []string{"apply", "site_1", "bp_fail", "--watch"}, code: 1, lines: []string{
			"run bpr_fail (apply on site site_1): running, 3 steps",
			"step 1/3 installPlugin: running",
			"step 1/3 installPlugin: done (2.1 s)",
			"step 2/3 activatePlugin: failed: Plugin file does not exist.",
			"step 3/3 login: skipped",
			"log (last 4 lines):",
			"  error: Plugin file does not exist.",
		}, errout: "sandboxctl: blueprint_run_failed: steps[1] (activatePlugin): Plugin file does not exist.\n"},
		{name: "apply a file", stdin: `{"steps":[]}`, args: []string{"apply", "site_1", "--file", "-", "--watch"},
			lines: []string{"step 3/3 login: done (0.1 s)", "run bpr_unsaved succeeded: 3 steps in 3.0 s"}},
		{name: "apply, not watched", args: []string{"apply", "site_1", "bp_fail"},
			lines: []string{"run bpr_fail is running; follow it: sandboxctl blueprints watch bp_fail bpr_fail"}},
		{name: "bake --watch", args: []string{"bake", "bp_ok", "--name", "Shop", "--watch"}, lines: []string{
			"tpl_1     Shop  building",
			"step 2/3 activatePlugin: done (0.3 s)",
			"run bpr_bake succeeded: 3 steps in 3.0 s",
			"template tpl_1 (Shop) is ready",
		}},
		{name: "flaky reads", args: []string{"watch", "bp_ok", "bpr_flaky"}, lines: []string{"step 2/3 activatePlugin: running", "run bpr_flaky succeeded: 3 steps in 3.0 s"}},
		{name: "runs", args: []string{"runs", "bp_ok"}, lines: []string{"bpr_ok  create  succeeded  3/3    site_1  "}},
		{name: "refused run", args: []string{"run", "bp_bad"}, code: 1, errout: "error     step 1  unknown step \"frobnicate\"", notInOut: "site_"},
		{name: "unknown blueprint", args: []string{"bake", "bp_nope"}, code: 1, errout: "sandboxctl: blueprint_not_found: "},
		{name: "unknown site", args: []string{"apply", "site_nope", "bp_ok"}, code: 1, errout: "sandboxctl: site_not_found: "},
		{name: "unknown run", args: []string{"watch", "bp_ok", "bpr_nope"}, code: 1, errout: "sandboxctl: blueprint_not_found: "},
		{name: "run of another Blueprint", args: []string{"watch", "bp_fail", "bpr_ok"}, code: 1, errout: "blueprint_not_found"},
		{name: "apply without a Blueprint", args: []string{"apply", "site_1"}, code: 2, errout: "--file FILE"},
		{name: "apply, a file not JSON", stdin: "nope", args: []string{"apply", "site_1", "--file", "-"}, code: 2, errout: "not JSON"},
		{name: "watch without a run", args: []string{"watch", "bp_ok"}, code: 2},
		{name: "run without a Blueprint", args: []string{"run"}, code: 2},
		{name: "bake of two", args: []string{"bake", "bp_ok", "bp_fail"}, code: 2},
		{name: "runs bad flag", args: []string{"runs", "bp_ok", "--watch"}, code: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.reset()
			code, out, errs := ctl(t, c.stdin, append([]string{"blueprints"}, c.args...)...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, c.code, out, errs)
			}
			got := strings.Split(out, "\n")
			at := 0
			for _, want := range c.lines {
				n := 0
				for i, l := range got {
					if strings.HasPrefix(l, want) {
						n++
						if i < at {
							t.Errorf("%q came before the line above it", want)
						}
						at = i
					}
				}
				if n != 1 {
					t.Errorf("%q printed %d times:\n%s", want, n, out)
				}
			}
			if !strings.Contains(errs, c.errout) {
				t.Errorf("stderr lacks %q:\n%s", c.errout, errs)
			}
			if c.notInOut != "" && strings.Contains(out, c.notInOut) {
				t.Errorf("stdout has %q:\n%s", c.notInOut, out)
			}
		})
	}
	// --json: only the final run object, whatever the ending.
	for _, c := range []struct {
		args   []string
		code   int
		status string
	}{
		{[]string{"watch", "bp_ok", "bpr_ok"}, 0, "succeeded"},
		{[]string{"apply", "site_1", "bp_fail", "--watch"}, 1, "failed"},
		{[]string{"bake", "bp_ok", "--watch"}, 0, "succeeded"},
	} {
		f.reset()
		code, out, errs := ctl(t, "", append(append([]string{"blueprints"}, c.args...), "--json")...)
		var v struct{ Run api.RunView }
		if code != c.code || json.Unmarshal([]byte(out), &v) != nil || v.Run.Status != c.status || len(v.Run.Steps) != 3 {
			t.Fatalf("%v --json: %d\n%s\n%s", c.args, code, out, errs)
		}
	}
}

// TestBlueprintsWatchTerminal: on a terminal the step list is redrawn
// in place (the cursor goes back over the last frame), each line fits
// the terminal, and colours come only when asked for.
func TestBlueprintsWatchTerminal(t *testing.T) {
	P, R, S, F, K := "pending", "running", "succeeded", "failed", "skipped"
	states := bpRunStates("bpr_1", "bp_1", "apply", "", "steps[1] (activatePlugin): Plugin file does not exist.",
		[]string{R, P, P}, []string{S, R, P}, []string{S, F, K})
	read := func(v api.RunView) *apiclient.Response {
		raw, _ := json.Marshal(map[string]any{"run": v})
		r := &apiclient.Response{Status: 200, Raw: raw}
		json.Unmarshal(raw, &r.Body)
		return r
	}
	for _, color := range []bool{false, true} {
		var buf bytes.Buffer
		now := bpT0.Add(2 * time.Second)
		w := &bpWatcher{out: &buf, tty: true, color: color, width: 40, now: func() time.Time { return now }}
		for _, s := range states {
			w.show(read(s))
			now = now.Add(time.Second)
		}
		w.end(read(states[len(states)-1]))
		out := buf.String()
		if strings.Count(out, "\x1b[4A\r\x1b[J") != 2 {
			t.Errorf("frames not redrawn in place: %q", out)
		}
		if strings.Contains(out, "\x1b[3") != color {
			t.Errorf("colour %v: %q", color, out)
		}
		frames := strings.Split(out, "\x1b[J")
		last := frames[len(frames)-1]
		for _, want := range []string{"run bpr_1 · apply · ", " 1 installPlugin   ", "2.1 s", "step 2/3 activatePlugin: failed: Plugin file does not exist.", "log (last 4 lines):"} {
			if !strings.Contains(last, want) {
				t.Errorf("the last frame lacks %q:\n%s", want, last)
			}
		}
		for _, l := range strings.Split(bpStripSGR(out), "\n") {
			if n := len([]rune(l)); n > 40 && !strings.HasPrefix(l, "step 2/3 activatePlugin") && !strings.HasPrefix(l, "run bpr_1") {
				t.Errorf("a line of %d columns on a 40-column terminal: %q", n, l)
			}
		}
	}
}

// bpStripSGR removes colour and cursor escapes.
func bpStripSGR(s string) string {
	return regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`).ReplaceAllString(s, "")
}

// TestBlueprintsHelpers: durations, wrapping and the printing of JSON
// with <, > and & left as they are.
func TestBlueprintsHelpers(t *testing.T) {
	for ms, want := range map[int64]string{0: "0.0 s", 2100: "2.1 s", 59_949: "59.9 s", 185_000: "3m05s", 7_620_000: "2h07m", -5: "0.0 s"} {
		if got := bpDuration(ms); got != want {
			t.Errorf("bpDuration(%d) = %q, want %q", ms, got, want)
		}
	}
	for _, c := range []struct {
		in   string
		n    int
		want []string
	}{
		{"a b c", 3, []string{"a b", "c"}},
		{"abcdefgh ij", 3, []string{"abc", "def", "gh", "ij"}},
		{"", 5, []string{""}},
	} {
		if got := bpWrap(c.in, c.n); !slices.Equal(got, c.want) {
			t.Errorf("bpWrap(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
	for in, want := range map[string]string{
		`{"code":"\u003c?php echo 1 \u0026\u0026 2 \u003e 1;"}`: `{"code":"<?php echo 1 && 2 > 1;"}`,
		`{"a":"\\u003c","b":"\\\u003c","c":"\u00e9\n"}`:         `{"a":"\\u003c","b":"\\<","c":"\u00e9\n"}`,
	} {
		var buf bytes.Buffer
		if err := bpWriteJSON(&buf, json.RawMessage(in)); err != nil {
			t.Fatal(err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, buf.Bytes()); err != nil || compact.String() != want {
			t.Errorf("bpWriteJSON(%s) = %s, want %s (%v)", in, buf.String(), want, err)
		}
	}
}

// TestBlueprintsHelp: every blueprints command has a short line that
// fits the help's list, examples and an argument check.
func TestBlueprintsHelp(t *testing.T) {
	g := blueprintsCmd(&env{})
	for _, c := range append(g.Commands(), g) {
		if c.Short == "" || c.Example == "" || c.Args == nil || len(c.Short) > 64 {
			t.Errorf("%s: short %q, example %q, args set %v", c.Name(), c.Short, c.Example, c.Args != nil)
		}
	}
	if code, _, _ := ctl(t, "", "blueprints", "frobnicate"); code != 2 {
		t.Errorf("an unknown subcommand: exit %d", code)
	}
}
