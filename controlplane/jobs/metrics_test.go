package jobs_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
)

// TestJobMetrics: every finished job is timed by type and result, and a
// type no runner handles is labelled unknown (the store cannot add
// series).
func TestJobMetrics(t *testing.T) {
	store := state.NewStore()
	raftish := &direct{fsm: fsm.New(store, slog.New(slog.DiscardHandler))}
	d := jobs.NewDispatcher(jobs.Config{Store: store, Raft: raftish})
	d.Register("ok", jobs.RunnerFunc(func(context.Context, *state.Job, func(int)) error { return nil }))
	d.Register("bad", jobs.RunnerFunc(func(context.Context, *state.Job, func(int)) error { return errors.New("boom") }))
	var ids []string
	for _, typ := range []string{"ok", "ok", "bad", "site_ab12cd34_leak"} {
		j, err := jobs.New(typ, "ws_a", "", nil, time.Now().UTC())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raftish.Apply(context.Background(), fsm.CreateJob{Job: j}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for _, id := range ids {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if j, _ := store.Job(id); j != nil && j.Terminal() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s never finished", id)
			}
		}
	}
	// A job's result is recorded before its histogram: wait for the last.
	want := []struct {
		metric       string
		typ, result  string
		observations float64
	}{
		{"sandboxd_job_duration_seconds", "ok", "succeeded", 2},
		{"sandboxd_job_duration_seconds", "bad", "failed", 1},
		{"sandboxd_job_duration_seconds", "unknown", "failed", 1},
		{"sandboxd_job_queue_wait_seconds", "ok", "", 2},
		{"sandboxd_job_queue_wait_seconds", "unknown", "", 1},
	}
	for _, w := range want {
		labels := map[string]string{"type": w.typ}
		if w.result != "" {
			labels["result"] = w.result
		}
		var got float64
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if got, _ = promtest.Value(t, w.metric, labels, d); got == w.observations || time.Now().After(deadline) {
				break
			}
		}
		if got != w.observations {
			t.Errorf("%s%v: %v observations, want %v", w.metric, labels, got, w.observations)
		}
	}
	if _, ok := promtest.Value(t, "sandboxd_job_duration_seconds", map[string]string{"type": "site_ab12cd34_leak"}, d); ok {
		t.Error("a job type outside the runners became a label")
	}
}
