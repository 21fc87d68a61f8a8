package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/mirror"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// stepAgent is a node agent that makes sites at once and records the
// Blueprint steps it is asked to run; a step named in fail fails.
type stepAgent struct {
	fakeAgent
	mu    sync.Mutex
	steps []*agentv1.RunBlueprintStepRequest
	fail  string
}

func (f *stepAgent) RunBlueprintStep(_ context.Context, req *connect.Request[agentv1.RunBlueprintStepRequest]) (*connect.Response[agentv1.RunBlueprintStepResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.steps = append(f.steps, req.Msg)
	out := &agentv1.RunBlueprintStepResponse{Ok: true, Log: "did " + req.Msg.Step + "\n", RunnerVersion: "fake"}
	if req.Msg.Step == f.fail {
		out = &agentv1.RunBlueprintStepResponse{ErrorCode: "invalid", ErrorMessage: "the fake refuses " + req.Msg.Step, Log: "refused\n"}
	}
	if req.Msg.Step == "login" {
		var args map[string]any
		_ = json.Unmarshal(req.Msg.ArgsJson, &args)
		out.User, _ = args["username"].(string)
	}
	return connect.NewResponse(out), nil
}

func (f *stepAgent) recorded() []*agentv1.RunBlueprintStepRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*agentv1.RunBlueprintStepRequest(nil), f.steps...)
}

func startStepAgent(t *testing.T, s *server.Server) *stepAgent {
	t.Helper()
	f := &stepAgent{}
	f.url = serveAgent(t, f)
	n := state.Node{ID: "node-fake", Address: f.url, BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}, Status: state.NodeReady,
		MemoryMB: 64 << 10, MaxSites: 100}
	if _, err := s.Node().Apply(context.Background(), fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
	return f
}

func waitRun(t *testing.T, c *st.Account, bp, id string) *st.Response {
	t.Helper()
	var r *st.Response
	st.WaitFor(t, 20*time.Second, "run "+id, func() bool {
		r = c.Do("GET", "/api/app/blueprints/"+bp+"/runs/"+id, nil).Must(t, 200)
		return r.Str("run.status") == "succeeded" || r.Str("run.status") == "failed"
	})
	return r
}

// TestBlueprintRuns: a site made from a Blueprint gets each step run on
// its node in order, shorthands expanded, resources fetched through the
// mirror and sent as blobs, the login and landing page recorded for its
// one-time logins; a failing step fails the run and skips the rest; a
// source applied without saving is its own run; runs stay in their
// workspace.
func TestBlueprintRuns(t *testing.T) {
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/wporg/plugin/hello-dolly.zip":
			fmt.Fprint(w, "PK-fake-zip")
		case "/raw/o/r/main/notice.php":
			fmt.Fprint(w, "<?php // notice")
		default:
			http.NotFound(w, r)
		}
	}))
	defer files.Close()
	m, err := mirror.Parse("downloads.wordpress.org="+files.URL+"/wporg,raw.githubusercontent.com="+files.URL+"/raw", false)
	if err != nil {
		t.Fatal(err)
	}
	logs := &st.LogBuffer{}
	s := st.Single(t, st.Options{Logs: logs, Configure: func(c *server.Config) { c.ResourceMirror = m }})
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	agent := startStepAgent(t, s)
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	mallory := st.NewAccount(t, s, "mallory@example.com", "paid")

	src := `{"landingPage":"/wp-admin/plugins.php","login":true,"plugins":["hello-dolly"],"siteOptions":{"blogname":"Runs"},
	  "steps":[{"step":"writeFile","path":"/wordpress/wp-content/mu-plugins/notice.php",
	    "data":{"resource":"url","url":"https://raw.githubusercontent.com/o/r/main/notice.php"},"progress":{"caption":"Adding the notice"}},
	    {"step":"wp-cli","command":"wp option update blogdescription 'A \"quoted\" tagline'"}]}`
	bp := alice.Do("POST", "/api/app/blueprints", map[string]any{"name": "Runs", "source": src}).Must(t, 201).Str("blueprint.id")
	made := alice.Do("POST", "/api/app/blueprints/"+bp+"/sites", map[string]any{"name": "From a Blueprint"}).Must(t, 202)
	siteID := made.Str("site.id")
	if made.Str("run.status") != "pending" || made.Str("run.mode") != "create" || made.Str("run.siteId") != siteID || made.Str("run.jobId") == "" {
		t.Fatalf("create: %s", made.Raw)
	}
	run := waitRun(t, alice, bp, made.Str("run.id"))
	if run.Str("run.status") != "succeeded" {
		t.Fatalf("run: %s", run.Raw)
	}
	var names, captions []string
	for _, st := range run.Get("run.steps").([]any) {
		m := st.(map[string]any)
		names = append(names, m["name"].(string)+":"+m["status"].(string))
		captions = append(captions, m["caption"].(string))
	}
	if got := strings.Join(names, ","); got != "installPlugin:succeeded,setSiteOptions:succeeded,writeFile:succeeded,wp-cli:succeeded,login:succeeded" {
		t.Fatalf("steps: %s", got)
	}
	if captions[2] != "Adding the notice" || !strings.Contains(run.Str("run.log"), "did writeFile") || run.Str("run.startedAt") == "" {
		t.Fatalf("run: %s", run.Raw)
	}
	steps := agent.recorded()
	if len(steps) != 5 || string(steps[0].Blobs[0]) != "PK-fake-zip" || string(steps[2].Blobs[0]) != "<?php // notice" {
		t.Fatalf("what the agent got: %v", steps)
	}
	var args map[string]any
	_ = json.Unmarshal(steps[3].ArgsJson, &args)
	if fmt.Sprint(args["argv"]) != `[option update blogdescription A "quoted" tagline]` {
		t.Fatalf("wp-cli argv: %v", args["argv"])
	}
	// The one-time login lands where the Blueprint said.
	alice.Do("POST", "/api/sites/"+siteID+"/magic-login", nil).Must(t, 200)
	agent.fakeAgent.mu.Lock()
	last := agent.fakeAgent.logins[len(agent.fakeAgent.logins)-1]
	agent.fakeAgent.mu.Unlock()
	if last != "/wp-admin/plugins.php" {
		t.Fatalf("login lands on %q", last)
	}
	if runs := alice.Do("GET", "/api/app/blueprints/"+bp+"/runs", nil).Must(t, 200).Get("runs").([]any); len(runs) != 1 {
		t.Fatalf("runs: %v", runs)
	}

	// A failing step: the run fails there and skips the rest.
	agent.mu.Lock()
	agent.fail = "setSiteOptions"
	agent.mu.Unlock()
	applied := alice.Do("POST", "/api/app/sites/"+siteID+"/blueprint",
		map[string]any{"source": `{"steps":[{"step":"mkdir","path":"a"},{"step":"setSiteOptions","options":{"x":"1"}},{"step":"rm","path":"a"}]}`}).Must(t, 202)
	if applied.Str("run.blueprintId") != "" || applied.Str("run.mode") != "apply" {
		t.Fatalf("apply: %s", applied.Raw)
	}
	run = waitRun(t, alice, "unsaved", applied.Str("run.id"))
	names = nil
	for _, st := range run.Get("run.steps").([]any) {
		names = append(names, st.(map[string]any)["status"].(string))
	}
	if run.Str("run.status") != "failed" || strings.Join(names, ",") != "succeeded,failed,skipped" ||
		!strings.Contains(run.Str("run.failureReason"), "steps[1] (setSiteOptions): the fake refuses setSiteOptions") ||
		!strings.Contains(run.Str("run.log"), "error: the fake refuses") {
		t.Fatalf("failed run: %s", run.Raw)
	}
	// The run's record is written as its failing step ends; its job's
	// own ending is the next write.
	st.WaitFor(t, 10*time.Second, "the failed run's job to fail", func() bool {
		return alice.Do("GET", "/api/app/jobs/"+run.Str("run.jobId"), nil).Must(t, 200).Str("job.status") == "failed"
	})

	// A resource the mirror does not have fails its step before the node.
	before := len(agent.recorded())
	applied = alice.Do("POST", "/api/app/sites/"+siteID+"/blueprint",
		map[string]any{"source": `{"plugins":["not-mirrored-here"]}`}).Must(t, 202)
	run = waitRun(t, alice, "unsaved", applied.Str("run.id"))
	if run.Str("run.status") != "failed" || !strings.Contains(run.Str("run.failureReason"), "not-mirrored-here") || len(agent.recorded()) != before {
		t.Fatalf("unfetchable resource: %s", run.Raw)
	}

	// Bad input starts nothing; another workspace sees nothing.
	for _, tc := range []struct {
		who  *st.Account
		path string
		body any
		code string
	}{
		{alice, "/api/app/sites/" + siteID + "/blueprint", map[string]any{"source": `{"steps":[{"step":"enableMultisite"}]}`}, "invalid_request"},
		{alice, "/api/app/sites/" + siteID + "/blueprint", map[string]any{"source": `{"steps":[{"step":"defineWpConfigConsts","consts":{"DB_HOST":"x"}}]}`}, "invalid_request"},
		{alice, "/api/app/sites/" + siteID + "/blueprint", map[string]any{"source": "{", "blueprintId": bp}, "invalid_request"},
		{alice, "/api/app/sites/" + siteID + "/blueprint", map[string]any{}, "invalid_request"},
		{mallory, "/api/app/sites/" + siteID + "/blueprint", map[string]any{"blueprintId": bp}, "site_not_found"},
		{mallory, "/api/app/blueprints/" + bp + "/sites", map[string]any{}, "blueprint_not_found"},
		{alice, "/api/app/blueprints/" + bp + "/bake", map[string]any{"templateId": "tpl_nope"}, "template_not_found"},
	} {
		if r := tc.who.Do("POST", tc.path, tc.body); r.Code() != tc.code {
			t.Errorf("%s %v: %d %s", tc.path, tc.body, r.Status, r.Raw)
		}
	}
	for _, path := range []string{"/api/app/blueprints/" + bp + "/runs/" + made.Str("run.id"), "/api/app/blueprints/unsaved/runs/" + applied.Str("run.id"),
		"/api/app/blueprints/" + bp + "/runs"} {
		if r := mallory.Do("GET", path, nil); r.Status != 404 {
			t.Errorf("mallory GET %s: %d", path, r.Status)
		}
	}
	// A saved run is not found under another id, nor an unsaved one under a Blueprint's.
	if r := alice.Do("GET", "/api/app/blueprints/unsaved/runs/"+made.Str("run.id"), nil); r.Status != 404 {
		t.Errorf("saved run as unsaved: %d", r.Status)
	}
	if r := alice.Do("GET", "/api/app/blueprints/"+bp+"/runs/"+applied.Str("run.id"), nil); r.Status != 404 {
		t.Errorf("unsaved run under a Blueprint: %d", r.Status)
	}
}
