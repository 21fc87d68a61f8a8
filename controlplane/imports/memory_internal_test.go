package imports

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// TestMemoryFollowsTheWork: the leader's per-import memory (locks,
// restore progress) is held only while an import is worked on, so
// imports made and ended over months do not accumulate in it; a lock
// still excludes its other holders while held.
func TestMemoryFollowsTheWork(t *testing.T) {
	s, err := New(Config{Store: state.NewStore(), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		s.lock(fmt.Sprintf("imp_%d", i))()
	}
	var wg sync.WaitGroup
	inside, most := 0, 0
	var mu sync.Mutex
	for range 8 {
		wg.Go(func() {
			for range 100 {
				unlock := s.lock("imp_shared")
				mu.Lock()
				inside++
				most = max(most, inside)
				mu.Unlock()
				mu.Lock()
				inside--
				mu.Unlock()
				unlock()
			}
		})
	}
	wg.Wait()
	if most != 1 {
		t.Fatalf("%d holders of one import's lock at once", most)
	}
	if n := len(s.locks); n != 0 {
		t.Fatalf("%d locks kept after their imports' work ended", n)
	}
	for i := range 100 {
		s.Progress(fmt.Sprintf("imp_%d", i), "restoring", 1, 2)
	}
	for i := range 50 {
		s.Cleanup(context.Background(), &state.Import{ID: fmt.Sprintf("imp_%d", i), Status: state.ImportReady})
	}
	for i := 50; i < 100; i++ {
		_ = s.ProgressOf(&state.Import{ID: fmt.Sprintf("imp_%d", i), Status: state.ImportFailed})
	}
	if n := len(s.progress); n != 0 {
		t.Fatalf("the progress of %d ended restores is kept", n)
	}
}
