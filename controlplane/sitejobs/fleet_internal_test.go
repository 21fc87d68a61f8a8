package sitejobs

import (
	"fmt"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// TestFleetForgetsGoneSites: the leader's memory of failed moves and
// snapshots keeps only sites that still exist.
func TestFleetForgetsGoneSites(t *testing.T) {
	r := &Runners{failedMoves: map[string]time.Time{}, failedSnaps: map[string]time.Time{}, snapJobs: map[string]string{}}
	for i := range 100 {
		id := fmt.Sprintf("site_%d", i)
		r.failedMoves[id], r.failedSnaps[id], r.snapJobs[id] = time.Now(), time.Now(), "job_"+id
	}
	r.forgetGone([]*state.Site{{ID: "site_7"}})
	if len(r.failedMoves) != 1 || len(r.failedSnaps) != 1 || len(r.snapJobs) != 1 || r.snapJobs["site_7"] == "" {
		t.Fatalf("kept %d failed moves, %d failed snapshots, %d snapshot jobs", len(r.failedMoves), len(r.failedSnaps), len(r.snapJobs))
	}
}
