package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// TestDeployZipURLRunsInTheJob: POST …/plugins {zipUrl} answers 202 while
// the download has not even been answered; the job fetches and checks
// the ZIP and fails with the reason. Only the URL's form (and an address
// written in it) is judged by the request.
func TestDeployZipURLRunsInTheJob(t *testing.T) {
	hit, release := make(chan struct{}, 1), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hit <- struct{}{}
		select {
		case <-release:
		case <-time.After(time.Minute):
		}
		_, _ = w.Write([]byte("<html>not a zip</html>"))
	}))
	defer slow.Close()
	defer close(release)
	s := st.Single(t, st.Options{Configure: func(c *server.Config) {
		c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	}})
	fakeNode(t, s)
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	id := alice.Do("POST", "/api/app/sites", map[string]any{"name": "deploy"}).Must(t, 202).Str("site.id")
	if _, err := s.Node().Apply(context.Background(), fsm.UpdateSite{Update: state.SiteUpdate{ID: id, Status: state.SiteReady,
		Port: 1, At: time.Now().UTC()}}); err != nil {
		t.Fatal(err)
	}
	deploy := func(url string) *st.Response {
		return alice.Do("POST", "/api/app/sites/"+id+"/plugins", map[string]any{"zipUrl": url})
	}
	for _, tc := range []struct{ url, msg string }{
		{"ftp://example.com/p.zip", "not an http(s) URL"},
		{"http://10.0.0.7/p.zip", "not allowed"},
		{"http://169.254.169.254/latest/meta-data", "not allowed"},
		{"https://example.com/" + strings.Repeat("a", 9000), "longer than"},
	} {
		if r := deploy(tc.url); r.Status != 400 || r.Details()["field"] != "zipUrl" || !strings.Contains(r.Str("error.message"), tc.msg) {
			t.Fatalf("%.60s: %d %s", tc.url, r.Status, r.Raw)
		}
	}

	jobID := deploy(slow.URL+"/p.zip").Must(t, 202).Str("jobId")
	select {
	case <-hit: // the job is downloading; the request had already answered
	case <-time.After(20 * time.Second):
		t.Fatal("the job never fetched the ZIP")
	}
	release <- struct{}{}
	var job *st.Response
	st.WaitFor(t, 20*time.Second, "the deploy job to end", func() bool {
		job = alice.Do("GET", "/api/app/jobs/"+jobID, nil).Must(t, 200)
		return job.Str("job.status") == "failed" || job.Str("job.status") == "succeeded"
	})
	if job.Str("job.status") != "failed" || job.Str("job.error.code") != "invalid_request" ||
		!strings.Contains(job.Str("job.error.message"), "not a ZIP") {
		t.Fatalf("job: %s", job.Raw)
	}
}
