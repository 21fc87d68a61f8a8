package server_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

var param = regexp.MustCompile(`\{[A-Za-z]+\}`)

// TestOpenAPIMatchesRouter fails when a registered route is missing from
// the served document, or the document lists a route the router does not
// serve.
func TestOpenAPIMatchesRouter(t *testing.T) {
	s := st.Single(t, st.Options{})
	doc := st.NewClient(t, s.URL(), "").Do("GET", "/api/openapi.json", nil).Must(t, 200)
	if doc.Str("openapi") != "3.1.0" {
		t.Fatalf("openapi version %q", doc.Str("openapi"))
	}
	paths, _ := doc.Get("paths").(map[string]any)
	documented := map[string]bool{}
	for path, ops := range paths {
		for method, op := range ops.(map[string]any) {
			m := strings.ToUpper(method)
			documented[m+" "+path] = true
			o := op.(map[string]any)
			if o["summary"] == "" || o["responses"] == nil || o["operationId"] == "" {
				t.Errorf("%s %s: summary, operationId and responses are required", m, path)
			}
			if !s.Router().Matches(m, param.ReplaceAllString(path, "x")) {
				t.Errorf("documented %s %s is not served", m, path)
			}
			// Every credentialed route can be rate limited, and says how.
			if sec, _ := o["security"].([]any); len(sec) > 0 {
				r429, _ := o["responses"].(map[string]any)["429"].(map[string]any)
				if h, _ := r429["headers"].(map[string]any); h["Retry-After"] == nil {
					t.Errorf("%s %s: no 429 response with Retry-After", m, path)
				}
			}
		}
	}
	routes := s.Router().Routes()
	for _, rt := range routes {
		if !documented[rt.Pattern()] {
			t.Errorf("route %s is missing from the document", rt.Pattern())
		}
	}
	if len(documented) != len(routes) {
		t.Errorf("document has %d operations, router %d", len(documented), len(routes))
	}
	schemas, _ := doc.Get("components.schemas").(map[string]any)
	for _, name := range []string{"ErrorEnvelope", "CreateTokenRequest", "JobView", "WorkspaceView"} {
		if schemas[name] == nil {
			t.Errorf("schema %s missing", name)
		}
	}
}

func TestMetricsExposeHTTPAndRaft(t *testing.T) {
	s := st.Single(t, st.Options{})
	c := st.NewClient(t, s.URL(), "")
	c.Do("GET", "/api/account/me", nil).Must(t, 401)
	m := string(c.Do("GET", "/metrics", nil).Must(t, 200).Raw)
	for _, want := range []string{
		`sandboxd_http_requests_total{code="401",route="GET /api/account/me"} 1`,
		`sandboxd_http_request_duration_seconds_bucket{route="GET /api/account/me"`,
		`sandboxd_raft_state{state="Leader"} 1`,
		`sandboxd_raft_applied_index`,
		`sandboxd_raft_apply_duration_seconds_count`,
		`sandboxd_raft_commit_duration_seconds_count`,
		`sandboxd_raft_fsm_apply_duration_seconds_count`,
		`sandboxd_raft_has_leader 1`,
		`sandboxd_raft_last_contact_seconds 0`,
		`sandboxd_sites{status="ready"} 0`,
		`sandboxd_jobs{status="queued"}`,
		`sandboxd_nodes{status="down"} 0`,
		`sandboxd_node_heartbeats_total{result="ok"} 0`,
		`sandboxd_webhook_deliveries_pending 0`,
		`sandboxd_webhook_attempts_total{outcome="failed"} 0`,
		`sandboxd_pool_claims_total{result="miss"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The server's first writes (its own record as leader) went through
	// raft's commit and FSM apply, which hashicorp/raft timed.
	for _, name := range []string{"sandboxd_raft_commit_duration_seconds_count", "sandboxd_raft_fsm_apply_duration_seconds_count"} {
		_, rest, _ := strings.Cut(m, "\n"+name+" ")
		if n, err := strconv.ParseFloat(strings.Fields(rest + " x")[0], 64); err != nil || n < 1 {
			t.Errorf("%s = %q: raft's timings are not forwarded", name, strings.Fields(rest + " x")[0])
		}
	}
}
