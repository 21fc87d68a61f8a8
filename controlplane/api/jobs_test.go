package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/jobs"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

func TestGetJob(t *testing.T) {
	s := st.Single(t, st.Options{})
	release := make(chan struct{})
	s.Dispatcher().Register("test_wait", jobs.RunnerFunc(func(ctx context.Context, j *state.Job, progress func(int)) error {
		progress(40)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}))
	s.Dispatcher().Register("test_fail", jobs.RunnerFunc(func(context.Context, *state.Job, func(int)) error {
		return &jobs.Failure{Code: "php_version_unavailable", Message: "no image for PHP 5.6"}
	}))
	alice := st.NewAccount(t, s, "alice@example.com", "free")
	bob := st.NewAccount(t, s, "bob@example.com", "free")

	poll := func(id, status string, progress float64) map[string]any {
		var job map[string]any
		st.WaitFor(t, 10*time.Second, "job "+status, func() bool {
			job = alice.Do("GET", "/api/app/jobs/"+id, nil).Must(t, 200).Get("job").(map[string]any)
			return job["status"] == status && job["progress"] == progress
		})
		return job
	}

	waitID := newJobOfType(t, s, "test_wait", alice.Personal)
	running := poll(waitID, "running", 40)
	if running["startedAt"] == nil || running["type"] != "test_wait" || running["siteId"] != nil {
		t.Fatalf("running job: %v", running)
	}
	close(release)
	done := poll(waitID, "succeeded", 100)
	if done["finishedAt"] == nil || done["error"] != nil || done["attempts"] != float64(1) {
		t.Fatalf("finished job: %v", done)
	}

	failed := poll(newJobOfType(t, s, "test_fail", alice.Personal), "failed", 0)
	if e := failed["error"].(map[string]any); e["code"] != "php_version_unavailable" {
		t.Fatalf("failed job: %v", failed)
	}
	unknown := poll(newJobOfType(t, s, "no_such_type", alice.Personal), "failed", 0)
	if e := unknown["error"].(map[string]any); e["code"] != "unsupported_job_type" {
		t.Fatalf("unknown type: %v", unknown)
	}

	if r := bob.Do("GET", "/api/app/jobs/"+waitID, nil).Must(t, 404); r.Code() != "job_not_found" {
		t.Fatal(r.Code())
	}
	alice.Do("GET", "/api/app/jobs/job_doesnotexist", nil).Must(t, 404)
}
