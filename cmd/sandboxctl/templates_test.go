package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// wsctlEnv points the CLI at server base as the holder of token, through
// SANDBOX_URL and SANDBOX_TOKEN, with an empty config file.
func wsctlEnv(t *testing.T, base, token string) {
	t.Helper()
	t.Setenv("SANDBOXCTL_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	t.Setenv("SANDBOX_URL", base)
	t.Setenv("SANDBOX_TOKEN", token)
}

// wsctlNarrow fails the test when a line of text output is wider than 80
// columns.
func wsctlNarrow(t *testing.T, what, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Errorf("%s: a line of %d columns:\n%s", what, n, line)
		}
	}
}

// wsctlJSON decodes a --json answer, failing the test on other output.
func wsctlJSON(t *testing.T, what, out string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, out)
	}
	return v
}

// seedTemplate writes a ready template of owner's personal workspace
// straight into the replicated state: st.Single has no node agent to
// freeze a site with.
func seedTemplate(t *testing.T, s *server.Server, owner *st.Account, id, name string) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	tpl := state.Template{ID: id, WorkspaceID: owner.Personal, UserID: owner.ID, CreatedByUserID: owner.ID, Name: name,
		Slug: strings.ToLower(strings.ReplaceAll(name, " ", "-")), Status: state.TemplateBuilding, PHPVersion: "8.2",
		WordPressVersion: "6.8.1", SizeBytes: 5 << 20, Launch: state.Launch{QuotaMode: "visitor", EntryMode: "anonymous",
			ExpirationMode: "fixed", ExpirationMinutes: 60, LandingPath: "/wp-admin/"}, CreatedAt: now, UpdatedAt: now}
	job, err := jobs.New("test_noop", owner.Personal, "", nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Node().Apply(ctx, fsm.CreateTemplateWithJob{Template: tpl, Job: job,
		Quota: state.Quota{Plan: "paid", Resource: "templates", Limit: 100}}); err != nil {
		t.Fatal(err)
	}
	tpl.Status = state.TemplateReady
	if _, err := s.Node().Apply(ctx, fsm.PutTemplate{Template: tpl}); err != nil {
		t.Fatal(err)
	}
}

// TestTemplatesAndLaunch runs the templates and launch families against
// a real server holding a seeded template: list, get, update, leads,
// launch settings and link, delete; and the refusals (unknown ids, a
// free plan enabling launch, wrong command lines).
func TestTemplatesAndLaunch(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	free := st.NewAccount(t, s, "free@example.com", "free")
	const tpl = "tpl_shopdemo0000000001"
	seedTemplate(t, s, alice, tpl, "Shop demo")
	seedTemplate(t, s, free, "tpl_freedemo0000000001", "Free demo")
	lead := state.Lead{ID: "lead_a", TemplateID: tpl, WorkspaceID: alice.Personal, Email: "visitor@example.org",
		SiteID: "site_x", IPHash: "h", CreatedAt: time.Now().UTC()}
	if _, err := s.Node().Apply(context.Background(), fsm.AddLead{Lead: lead}); err != nil {
		t.Fatal(err)
	}
	wsctlEnv(t, s.URL(), alice.Token)

	code, out, errs := ctl(t, "", "templates", "list")
	if code != 0 || !strings.Contains(out, tpl) || !strings.Contains(out, "Shop demo") || !strings.HasPrefix(out, "ID") {
		t.Fatalf("templates list: %d %s %s", code, out, errs)
	}
	wsctlNarrow(t, "templates list", out)
	code, out, _ = ctl(t, "", "templates", "list", "--json")
	if v := wsctlJSON(t, "templates list --json", out); code != 0 || len(v["templates"].([]any)) != 1 {
		t.Fatalf("templates list --json: %d %s", code, out)
	}
	code, out, _ = ctl(t, "", "templates", "get", tpl)
	if code != 0 || !strings.Contains(out, "5.0 MiB") || !strings.Contains(out, "launch link  off") {
		t.Fatalf("templates get: %d %s", code, out)
	}
	wsctlNarrow(t, "templates get", out)

	code, out, _ = ctl(t, "", "templates", "update", tpl, "--name", "Shop demo 2", "--description", "twenty products", "--json")
	v := wsctlJSON(t, "templates update", out)
	if tv := v["template"].(map[string]any); code != 0 || tv["name"] != "Shop demo 2" || tv["description"] != "twenty products" {
		t.Fatalf("templates update: %d %s", code, out)
	}
	code, out, _ = ctl(t, "", "templates", "leads", tpl)
	if code != 0 || !strings.Contains(out, "visitor@example.org") || !strings.Contains(out, "site_x") {
		t.Fatalf("templates leads: %d %s", code, out)
	}

	// The link is off: url says so (exit 1), get shows the defaults.
	if code, out, errs := ctl(t, "", "launch", "url", tpl); code != 1 || out != "" || !strings.Contains(errs, "launch link is off") {
		t.Fatalf("launch url while off: %d %q %s", code, out, errs)
	}
	code, out, _ = ctl(t, "", "launch", "get", tpl)
	if code != 0 || !strings.Contains(out, "fixed, 60 minutes") || !strings.Contains(out, "/wp-admin/") {
		t.Fatalf("launch get: %d %s", code, out)
	}
	code, out, errs = ctl(t, "", "launch", "set", tpl, "--enabled", "--entry", "email", "--quota", "unlimited", "--expiration", "fixed",
		"--minutes", "120", "--landing-path", "/shop/", "--consent", "--consent-label", "Send me news", "--consent-checked",
		"--headline", "Try our shop", "--accent-color", "#ff0066", "--hide-powered-by", "--json")
	v = wsctlJSON(t, "launch set", out)
	tv := v["template"].(map[string]any)
	br := tv["launchBranding"].(map[string]any)
	if code != 0 || tv["launchEnabled"] != true || tv["launchEntryMode"] != "email" || tv["launchQuotaMode"] != "unlimited" ||
		tv["launchExpirationMinutes"] != 120.0 || tv["launchLandingPath"] != "/shop/" || tv["launchConsentEnabled"] != true ||
		tv["launchConsentLabel"] != "Send me news" || tv["launchConsentDefaultChecked"] != true ||
		br["headline"] != "Try our shop" || br["accentColor"] != "#ff0066" || br["hidePoweredBy"] != true {
		t.Fatalf("launch set: %d %s %s", code, out, errs)
	}
	token, _ := tv["launchToken"].(string)
	code, out, _ = ctl(t, "", "launch", "url", tpl)
	if want := s.URL() + "/launch/" + token + "\n"; code != 0 || token == "" || out != want {
		t.Fatalf("launch url: %d %q, want %q", code, out, want)
	}
	// The link it prints is the public launcher's page.
	resp, err := http.Get(strings.TrimSpace(out))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET the launch url: %v %v", resp, err)
	}
	resp.Body.Close()
	code, out, _ = ctl(t, "", "launch", "get", tpl)
	if code != 0 || !strings.Contains(out, "Try our shop") || !strings.Contains(out, "email") || !strings.Contains(out, "/launch/"+token) {
		t.Fatalf("launch get after set: %d %s", code, out)
	}
	wsctlNarrow(t, "launch get", out)
	// Only the flags given change.
	code, out, _ = ctl(t, "", "launch", "set", tpl, "--enabled=false", "--json")
	tv = wsctlJSON(t, "launch set off", out)["template"].(map[string]any)
	if code != 0 || tv["launchEnabled"] != false || tv["launchEntryMode"] != "email" || tv["launchLandingPath"] != "/shop/" {
		t.Fatalf("launch set --enabled=false: %d %s", code, out)
	}

	// Refusals: exit 1 with the API's code, exit 2 for the command line.
	for _, tc := range []struct {
		name  string
		token string
		args  []string
		code  int
		want  string
	}{
		{"unknown template", "", []string{"templates", "get", "tpl_nope"}, 1, "template_not_found"},
		{"unknown template launch set", "", []string{"launch", "set", "tpl_nope", "--enabled"}, 1, "template_not_found"},
		{"bad landing path", "", []string{"launch", "set", tpl, "--landing-path", "shop"}, 1, "invalid_request"},
		{"bad colour", "", []string{"launch", "set", tpl, "--accent-color", "red"}, 1, "invalid_request"},
		{"minutes out of range", "", []string{"launch", "set", tpl, "--minutes", "0"}, 1, "invalid_request"},
		{"free plan enables launch", free.Token, []string{"launch", "set", "tpl_freedemo0000000001", "--enabled"}, 1,
			"template_sharing_requires_paid_plan"},
		{"free plan warm pool", free.Token, []string{"templates", "update", "tpl_freedemo0000000001", "--warm-pool", "1"}, 1,
			"plan_limit_reached"},
		{"another workspace's template", free.Token, []string{"templates", "get", tpl}, 1, "template_not_found"},
		{"create from an unknown site", "", []string{"templates", "create", "site_nope", "--name", "x"}, 1, "site_not_found"},
		{"launch without a node agent", "", []string{"templates", "launch", tpl}, 1, "service_unavailable"},
		{"leads of an unknown template", "", []string{"templates", "leads", "tpl_nope"}, 1, "template_not_found"},
		{"bad enum", "", []string{"launch", "set", tpl, "--entry", "phone"}, 2, "--entry must be one of anonymous, email"},
		{"nothing to set", "", []string{"launch", "set", tpl}, 2, "nothing to change"},
		{"nothing to update", "", []string{"templates", "update", tpl}, 2, "nothing to change"},
		{"create without a name", "", []string{"templates", "create", "site_x"}, 2, "name"},
		{"create without a site", "", []string{"templates", "create", "--name", "x"}, 2, "accepts 1 arg"},
		{"get without an id", "", []string{"templates", "get"}, 2, "accepts 1 arg"},
		{"url with two ids", "", []string{"launch", "url", "a", "b"}, 2, "accepts 1 arg"},
		{"unknown flag", "", []string{"launch", "set", tpl, "--colour", "x"}, 2, "unknown flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.token != "" {
				t.Setenv("SANDBOX_TOKEN", tc.token)
			}
			if tc.want == "service_unavailable" {
				t.Setenv("SANDBOXCTL_RETRY", "0") // no node comes: nothing to wait for
			}
			code, out, errs := ctl(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("%v: exit %d (want %d), stderr %q (want %q), stdout %q", tc.args, code, tc.code, errs, tc.want, out)
			}
		})
	}

	if code, out, _ := ctl(t, "", "templates", "delete", tpl); code != 0 || !strings.Contains(out, "deleted template "+tpl) {
		t.Fatalf("templates delete: %d %s", code, out)
	}
	if code, _, errs := ctl(t, "", "templates", "get", tpl); code != 1 || !strings.Contains(errs, "template_not_found") {
		t.Fatalf("get after delete: %d %s", code, errs)
	}
}

// fakeTemplatesAPI answers like the real API for what st.Single cannot
// do without a node agent: freezing a site into a template and making a
// site from one, with their jobs. Its answers are the api package's own
// view types.
type fakeTemplatesAPI struct {
	*httptest.Server
	mu       sync.Mutex
	jobPolls map[string]int
	bodies   []map[string]any
	idemKeys []string
}

func newFakeTemplatesAPI(t *testing.T) *fakeTemplatesAPI {
	f := &fakeTemplatesAPI{jobPolls: map[string]int{}}
	now := time.Now().UTC()
	tplView := func(id, status string) api.TemplateView {
		return api.TemplateView{ID: id, OrgID: "ws_fake", Name: "Shop", Slug: "shop", SourceSiteID: "site_src", Status: status,
			WordPressVersion: "6.8.1", PHPVersion: "8.2", SizeBytes: 1 << 20, LaunchQuotaMode: "visitor", LaunchEntryMode: "anonymous",
			LaunchExpirationMode: "fixed", LaunchExpirationMinutes: 60, LaunchLandingPath: "/wp-admin/", CreatedAt: now, UpdatedAt: now}
	}
	siteView := func(id, status string) api.SiteView {
		tpl := "tpl_fake"
		return api.SiteView{ID: id, OrgID: "ws_fake", Name: "demo", Slug: "demo", Status: status, URL: "https://demo.sites.example",
			PHPVersion: "8.2", TemplateID: &tpl, CreatedAt: now, UpdatedAt: now}
	}
	reply := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	record := func(r *http.Request) map[string]any {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.bodies = append(f.bodies, body)
		f.idemKeys = append(f.idemKeys, r.Header.Get("Idempotency-Key"))
		f.mu.Unlock()
		return body
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/app/templates", func(w http.ResponseWriter, r *http.Request) {
		body := record(r)
		job := "job_ok"
		if body["siteId"] == "site_broken" {
			job = "job_failing"
		}
		reply(w, 202, map[string]any{"template": tplView("tpl_fake", "building"), "jobId": job})
	})
	mux.HandleFunc("GET /api/app/templates/tpl_fake", func(w http.ResponseWriter, r *http.Request) {
		reply(w, 200, map[string]any{"template": tplView("tpl_fake", "ready")})
	})
	mux.HandleFunc("POST /api/app/templates/tpl_fake/sites", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		reply(w, 202, map[string]any{"site": siteView("site_new", "creating"), "jobId": "job_ok"})
	})
	mux.HandleFunc("GET /api/app/sites/site_new", func(w http.ResponseWriter, r *http.Request) {
		reply(w, 200, map[string]any{"site": siteView("site_new", "ready")})
	})
	mux.HandleFunc("GET /api/app/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		f.mu.Lock()
		f.jobPolls[id]++
		polls := f.jobPolls[id]
		f.mu.Unlock()
		j := api.JobView{ID: id, Type: "snapshot_template", Status: "running", CreatedAt: now}
		switch {
		case polls < 2:
		case id == "job_failing":
			j.Status, j.Error = "failed", &state.JobError{Code: "site_unreachable", Message: "the node did not answer"}
		default:
			j.Status, j.Progress = "succeeded", 100
		}
		reply(w, 200, map[string]any{"job": j})
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// TestTemplatesFake covers, against a fake API, what needs a node agent:
// templates create --wait (the job polled until it ends, then the ready
// template) and templates launch --wait (then the ready site), and a
// failed job (exit 1 with the job's error code).
func TestTemplatesFake(t *testing.T) {
	f := newFakeTemplatesAPI(t)
	wsctlEnv(t, f.URL, "sbx_fake")

	code, out, errs := ctl(t, "", "templates", "create", "site_src", "--name", "Shop", "--description", "d", "--wait")
	if code != 0 || !strings.Contains(out, "tpl_fake") || !strings.Contains(out, "ready") || strings.Contains(out, "building") {
		t.Fatalf("templates create --wait: %d %s %s", code, out, errs)
	}
	wsctlNarrow(t, "templates create", out)
	if b := f.bodies[0]; b["siteId"] != "site_src" || b["name"] != "Shop" || b["description"] != "d" || f.idemKeys[0] == "" {
		t.Fatalf("create sent %v (Idempotency-Key %q)", b, f.idemKeys[0])
	}
	code, out, _ = ctl(t, "", "templates", "create", "site_src", "--name", "Shop", "--json")
	if v := wsctlJSON(t, "create --json", out); code != 0 || v["jobId"] != "job_ok" || v["template"].(map[string]any)["status"] != "building" {
		t.Fatalf("templates create --json: %d %s", code, out)
	}
	if code, _, errs := ctl(t, "", "templates", "create", "site_broken", "--name", "Shop", "--wait"); code != 1 ||
		!strings.Contains(errs, "site_unreachable: the node did not answer") {
		t.Fatalf("a failed freeze: %d %s", code, errs)
	}

	code, out, errs = ctl(t, "", "templates", "launch", "tpl_fake", "--name", "demo", "--expires", "30", "--wait", "--json")
	v := wsctlJSON(t, "launch --wait --json", out)
	if code != 0 || v["site"].(map[string]any)["status"] != "ready" {
		t.Fatalf("templates launch --wait: %d %s %s", code, out, errs)
	}
	if b := f.bodies[len(f.bodies)-1]; b["name"] != "demo" || b["expiresInMinutes"] != 30.0 {
		t.Fatalf("launch sent %v", b)
	}
	code, out, _ = ctl(t, "", "templates", "launch", "tpl_fake")
	if code != 0 || !strings.Contains(out, "site_new") || !strings.Contains(out, "creating (job job_ok)") {
		t.Fatalf("templates launch: %d %s", code, out)
	}
	wsctlNarrow(t, "templates launch", out)
}
