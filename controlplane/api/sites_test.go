package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/plans"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// TestSitesAPIWithoutAgents covers what the control plane decides on its
// own: validation, placement, plan limits, readiness and workspace scope.
// The node is registered but answers nothing, so every site's job fails;
// the real agent path is in e2e.
func TestSitesAPIWithoutAgents(t *testing.T) {
	limits := plans.Default()
	s := st.Single(t, st.Options{Plans: &limits})
	alice := st.NewAccount(t, s, "alice@example.com", "free")
	bob := st.NewAccount(t, s, "bob@example.com", "paid")

	// No node yet: creation cannot be placed.
	if r := alice.Do("POST", "/api/app/sites", `{}`).Must(t, 503); r.Code() != "service_unavailable" {
		t.Fatal(r.Raw)
	}
	fakeNode(t, s)

	for _, tc := range []struct{ body, code, field string }{
		{`{"phpVersion":"8"}`, "invalid_request", "phpVersion"},
		{`{"phpVersion":"5.6"}`, "invalid_request", "phpVersion"},
		{`{"phpVersion":"7.4"}`, "php_version_unavailable", "phpVersion"},
		{`{"wordpressVersion":"latest"}`, "invalid_request", "wordpressVersion"},
		{`{"expiresInMinutes":0}`, "invalid_request", "expiresInMinutes"},
		{`{"name":"` + strings.Repeat("n", 101) + `"}`, "invalid_request", "name"},
		{`{"slug":"mine"}`, "invalid_request", "slug"},
	} {
		r := alice.Do("POST", "/api/app/sites", tc.body)
		if r.Status != 400 || r.Code() != tc.code || r.Details()["field"] != tc.field {
			t.Fatalf("%s: %d %s", tc.body, r.Status, r.Raw)
		}
	}
	if r := alice.Do("POST", "/api/app/sites", `{"templateId":"tpl_x"}`); r.Status != 404 || r.Code() != "template_not_found" {
		t.Fatalf("unknown template: %d %s", r.Status, r.Raw)
	}
	r := alice.Do("POST", "/api/app/sites", `{"phpVersion":"7.4"}`)
	if avail, _ := r.Details()["available"].([]any); len(avail) != 1 || avail[0] != "8.2" {
		t.Fatalf("available versions: %s", r.Raw)
	}

	created := alice.Do("POST", "/api/app/sites", map[string]any{"name": "Café & Bar!", "expiresInMinutes": 60}).Must(t, 202)
	site := created.Get("site").(map[string]any)
	slug := site["slug"].(string)
	if !strings.HasPrefix(slug, "caf-bar-") || site["url"] != "http://"+slug+".localhost:8081" || site["status"] != "creating" ||
		site["nodeId"] != "node-fake" || site["phpVersion"] != "8.2" || site["expiresAt"] == nil || created.Str("jobId") == "" {
		t.Fatalf("created: %s", created.Raw)
	}
	id := created.Str("site.id")
	// The unreachable node fails the job, and the site says why.
	var got map[string]any
	st.WaitFor(t, 20*time.Second, "the job to fail", func() bool {
		got = alice.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200).Get("site").(map[string]any)
		return got["status"] == "failed"
	})
	if reason, _ := got["failureReason"].(string); !strings.Contains(reason, "creating the site") {
		t.Fatalf("failure reason: %v", got)
	}
	// The site records the failure before the job ends.
	var job *st.Response
	st.WaitFor(t, 20*time.Second, "the job to end", func() bool {
		job = alice.Do("GET", "/api/app/jobs/"+created.Str("jobId"), nil).Must(t, 200)
		return job.Str("job.status") == "failed"
	})
	if job.Str("job.error.code") != "node_unavailable" || job.Str("job.siteId") != id {
		t.Fatalf("job: %s", job.Raw)
	}
	// Readiness is needed for reset, login links and the debug tools.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/app/sites/" + id + "/reset", ""}, {"POST", "/api/sites/" + id + "/magic-login", ""},
		{"GET", "/api/app/sites/" + id + "/debug", ""}, {"PUT", "/api/app/sites/" + id + "/debug", `{"wpDebug":true}`},
		{"GET", "/api/app/sites/" + id + "/debug/log", ""}, {"DELETE", "/api/app/sites/" + id + "/debug/log", ""},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		if r := alice.Do(c.method, c.path, body).Must(t, 400); r.Details()["status"] != "failed" {
			t.Fatalf("%s %s: %s", c.method, c.path, r.Raw)
		}
	}
	for _, tc := range []struct{ body, field string }{
		{`{"settings":{"memory_limit":"2G"}}`, "settings.memory_limit"},
		{`{"settings":{"memory_limit":"lots"}}`, "settings.memory_limit"},
		{`{"settings":{"max_execution_time":1.5}}`, "settings.max_execution_time"},
		{`{"settings":{"max_input_vars":5}}`, "settings.max_input_vars"},
		{`{"settings":{"display_errors":"maybe"}}`, "settings.display_errors"},
		{`{"settings":{"disable_functions":"exec"}}`, "settings.disable_functions"},
		{`{"settings":{"memory_limit":"128M\nauto_prepend_file=/etc/passwd"}}`, "settings.memory_limit"},
		{`{"settings":{"memory_limit":["128M"]}}`, "settings.memory_limit"},
		{`{}`, "settings"},
	} {
		if r := alice.Do("PUT", "/api/app/sites/"+id+"/php-config", tc.body).Must(t, 400); r.Details()["field"] != tc.field {
			t.Fatalf("%s: %s", tc.body, r.Raw)
		}
	}
	if r := alice.Do("PUT", "/api/app/sites/"+id+"/php-config", `{"settings":{"memory_limit":"128m"}}`).Must(t, 400); r.Details()["status"] != "failed" {
		t.Fatal(r.Raw)
	}
	if r := alice.Do("GET", "/api/app/sites/"+id+"/php-config", nil).Must(t, 200); r.Str("phpConfig.settings.memory_limit") != "256M" {
		t.Fatal(r.Raw)
	}
	for _, bad := range []string{`{"phpVersion":"9.1"}`, `{"phpVersion":"latest"}`, `{"phpVersion":7.4}`, `{}`, `{"php":"7.4"}`} {
		if r := alice.Do("PUT", "/api/app/sites/"+id+"/php-version", bad).Must(t, 400); r.Code() != "invalid_request" || r.Details()["field"] == nil {
			t.Fatalf("%s: %s", bad, r.Raw)
		}
	}
	if r := alice.Do("PUT", "/api/app/sites/"+id+"/php-version", `{"phpVersion":"7.4"}`).Must(t, 400); r.Details()["status"] != "failed" {
		t.Fatal(r.Raw)
	}
	for _, bad := range []string{`{"wpDebug":"yes"}`, `{"wpDebugg":true}`, `[]`} {
		if r := alice.Do("PUT", "/api/app/sites/"+id+"/debug", bad).Must(t, 400); r.Code() != "invalid_request" {
			t.Fatal(r.Raw)
		}
	}
	if n := len(alice.Do("GET", "/api/app/sites", nil).Must(t, 200).List("sites")); n != 1 {
		t.Fatalf("list: %d", n)
	}
	if n := len(bob.Do("GET", "/api/app/sites", nil).Must(t, 200).List("sites")); n != 0 {
		t.Fatalf("bob sees %d sites", n)
	}
	bob.Do("GET", "/api/app/sites/"+id, nil).Must(t, 404)

	// free: 3 live sites.
	alice.Do("POST", "/api/app/sites", `{}`).Must(t, 202)
	alice.Do("POST", "/api/app/sites", `{}`).Must(t, 202)
	lim := alice.Do("POST", "/api/app/sites", `{}`).Must(t, 402)
	if lim.Code() != "plan_limit_reached" || lim.Details()["resource"] != "sites" || lim.Details()["limit"] != float64(3) {
		t.Fatal(lim.Raw)
	}
	// Deleting starts a job and marks the site deleting.
	del := alice.Do("DELETE", "/api/app/sites/"+id, nil).Must(t, 202)
	if del.Str("site.status") != "deleting" || del.Str("jobId") == "" {
		t.Fatal(del.Raw)
	}
	if u := alice.Do("GET", "/api/account/usage", nil).Must(t, 200); u.Get("usage.counts.sites") != float64(2) {
		t.Fatalf("usage: %s", u.Raw)
	}
}
