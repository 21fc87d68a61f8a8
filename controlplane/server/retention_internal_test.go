package server

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// recorder is an Applier that keeps the commands it is given.
type recorder struct {
	mu   sync.Mutex
	cmds []fsm.Command
}

func (r *recorder) Apply(_ context.Context, c fsm.Command) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds = append(r.cmds, c)
	return state.Pruned{"jobs": 1}, nil
}

func (r *recorder) first() fsm.Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cmds) == 0 {
		return nil
	}
	return r.cmds[0]
}

// TestPruneStateLoop: the leader's loop applies PruneState stamped with
// its clock and the configured retention, and stops with its context.
func TestPruneStateLoop(t *testing.T) {
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pruneState(ctx, rec, func() time.Time { return at }, time.Millisecond, state.DefaultRetention(), slog.New(slog.DiscardHandler))
	}()
	deadline := time.Now().Add(20 * time.Second)
	for rec.first() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no prune was applied")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	got, ok := rec.first().(fsm.PruneState)
	if !ok || !got.At.Equal(at) || got.Retention != state.DefaultRetention() {
		t.Fatalf("applied %#v", rec.first())
	}
}
