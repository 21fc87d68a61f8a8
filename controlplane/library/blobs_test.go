package library

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// TestBlobInUse: a ZIP stays while the Library or an unfinished deploy
// needs it, and goes once neither does.
func TestBlobInUse(t *testing.T) {
	now := time.Now().UTC()
	lib, queued, done := strings.Repeat("a", 64), strings.Repeat("b", 64), strings.Repeat("c", 64)
	s := state.NewStore()
	update := func(fn func(*state.Tx) error) {
		t.Helper()
		if err := s.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	update(func(tx *state.Tx) error {
		return tx.CreateAccount(state.Account{ID: "usr_a", Email: "a@x.io", Plan: state.PlanPaid}, state.Workspace{ID: "ws_a", OwnerID: "usr_a"})
	})
	update(func(tx *state.Tx) error {
		return tx.PutLibraryEntry(state.LibraryEntry{ID: "lib_1", WorkspaceID: "ws_a", Slug: "one", BlobSHA256: lib}, false, state.Quota{})
	})
	job := func(sha, status string) string {
		j, err := jobs.New(jobspec.DeployPlugin, "ws_a", "site_1", jobspec.DeployPayload{BlobSHA256: sha}, now)
		if err != nil {
			t.Fatal(err)
		}
		update(func(tx *state.Tx) error { return tx.CreateJob(j) })
		if status != state.JobQueued {
			update(func(tx *state.Tx) error {
				_, err := tx.UpdateJob(state.JobUpdate{ID: j.ID, Status: status, Progress: 100, At: now})
				return err
			})
		}
		return j.ID
	}
	queuedJob := job(queued, state.JobQueued)
	job(done, state.JobSucceeded)

	tests := []struct {
		name, sha, except string
		want              bool
	}{
		{"library entry", lib, "", true},
		{"queued deploy", queued, "", true},
		{"only the asking job", queued, queuedJob, false},
		{"finished deploy", done, "", false},
		{"unknown", strings.Repeat("d", 64), "", false},
	}
	for _, tt := range tests {
		if got := BlobInUse(s, tt.sha, tt.except); got != tt.want {
			t.Errorf("%s: BlobInUse = %v, want %v", tt.name, got, tt.want)
		}
	}
	update(func(tx *state.Tx) error { return tx.DeleteLibraryEntry("lib_1") })
	if BlobInUse(s, lib, "") {
		t.Error("a deleted entry still holds its ZIP")
	}
}
