package jobs_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

var _ fsm.Applier = (*direct)(nil)

// direct applies commands straight to the FSM, as a one-node Raft would.
type direct struct {
	mu  sync.Mutex
	fsm *fsm.FSM
	idx uint64
}

func (d *direct) Apply(_ context.Context, c fsm.Command) (any, error) {
	data, err := fsm.Encode(c)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.idx++
	res := d.fsm.Apply(&raft.Log{Index: d.idx, Type: raft.LogCommand, Data: data})
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

// TestPerWorkspaceBound: jobs of one workspace never hold more than its
// share of the workers, another workspace's job runs while it is at the
// bound, a workspace running fewer jobs goes first, and each workspace's
// jobs start in the order they were queued. Runners block until the test
// lets them finish, so the order of starts is the whole story.
func TestPerWorkspaceBound(t *testing.T) {
	tests := []struct {
		name                  string
		workers, perWorkspace int
		queue                 []string // workspace of each job, oldest first: a1 is ws_a's first job
		first                 []string // started at once
		finish, next          []string // finishing finish[i] starts next[i]
	}{
		{"the busy workspace waits at its bound", 4, 2,
			[]string{"a", "a", "a", "a", "a", "b"},
			[]string{"a1", "a2", "b1"}, []string{"a1", "b1", "a2"}, []string{"a3", "", "a4"}},
		{"fewest running goes first", 2, 2,
			[]string{"a", "a", "a", "b", "b"},
			[]string{"a1", "b1"}, []string{"b1", "a1", "a2"}, []string{"b2", "a2", "a3"}},
		{"default bound is a quarter of the workers", 8, 0,
			[]string{"a", "a", "a", "a", "b", "c"},
			[]string{"a1", "a2", "b1", "c1"}, []string{"a1"}, []string{"a3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := state.NewStore()
			raftish := &direct{fsm: fsm.New(store, slog.New(slog.DiscardHandler))}
			d := jobs.NewDispatcher(jobs.Config{Store: store, Raft: raftish, Workers: tt.workers, PerWorkspace: tt.perWorkspace})
			started := make(chan string, 64)
			release := map[string]chan struct{}{}
			names := map[string]string{} // job id → a1, b2, …
			var mu sync.Mutex
			running, peak := map[string]int{}, map[string]int{}
			d.Register("block", jobs.RunnerFunc(func(ctx context.Context, j *state.Job, _ func(int)) error {
				mu.Lock()
				running[j.WorkspaceID]++
				peak[j.WorkspaceID] = max(peak[j.WorkspaceID], running[j.WorkspaceID])
				mu.Unlock()
				started <- names[j.ID]
				select {
				case <-release[names[j.ID]]:
				case <-ctx.Done():
				}
				mu.Lock()
				running[j.WorkspaceID]--
				mu.Unlock()
				return nil
			}))
			count := map[string]int{}
			t0 := time.Now().UTC()
			for i, ws := range tt.queue {
				count[ws]++
				name := fmt.Sprintf("%s%d", ws, count[ws])
				j, err := jobs.New("block", "ws_"+ws, "", nil, t0.Add(time.Duration(i)*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				names[j.ID], release[name] = name, make(chan struct{})
				if _, err := raftish.Apply(context.Background(), fsm.CreateJob{Job: j}); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); d.Run(ctx) }()
			defer func() { cancel(); <-done }()

			next := func() string {
				t.Helper()
				select {
				case name := <-started:
					return name
				case <-time.After(10 * time.Second):
					t.Fatal("no job started")
					return ""
				}
			}
			got := map[string]bool{}
			for range tt.first {
				got[next()] = true
			}
			for _, name := range tt.first {
				if !got[name] {
					t.Fatalf("started %v, want %v", got, tt.first)
				}
			}
			for i, name := range tt.finish {
				close(release[name])
				if tt.next[i] == "" {
					continue
				}
				if n := next(); n != tt.next[i] {
					t.Fatalf("after %s finished, %s started; want %s", name, n, tt.next[i])
				}
			}
			bound := tt.perWorkspace
			if bound == 0 {
				bound = tt.workers / 4
			}
			mu.Lock()
			defer mu.Unlock()
			for ws, p := range peak {
				if p > bound {
					t.Errorf("%s ran %d jobs at once; the bound is %d", ws, p, bound)
				}
			}
		})
	}
}
