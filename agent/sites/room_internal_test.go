package sites

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/runtime"
)

// sleeper is a runtime whose containers are only names: what makeRoom
// asks of it is recorded.
type sleeper struct {
	mu     sync.Mutex
	halted []string
}

func (*sleeper) HasImage(context.Context, string) (bool, error)    { return true, nil }
func (*sleeper) ImportImage(context.Context, string, string) error { return nil }
func (*sleeper) PullImage(context.Context, string) error           { return nil }
func (*sleeper) Run(context.Context, runtime.Spec) error           { return nil }
func (*sleeper) Running(context.Context, string) (bool, error)     { return true, nil }
func (*sleeper) Stop(context.Context, string, time.Duration) error { return nil }
func (*sleeper) Remove(context.Context, string) error              { return nil }
func (*sleeper) Freeze(context.Context, string) error              { return nil }
func (*sleeper) Thaw(context.Context, string) error                { return nil }
func (*sleeper) Frozen(string) (bool, error)                       { return false, nil }
func (*sleeper) Reclaim(context.Context, string) error             { return nil }
func (*sleeper) Exec(context.Context, string, []string, []string, uint32, uint32, []byte) (*runtime.ExecResult, error) {
	return nil, errors.New("no exec here")
}

func (s *sleeper) Halt(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.halted = append(s.halted, id)
	return nil
}

// TestMakeRoom: a wake on a node short of memory puts the idlest awake
// sites to sleep first (none in use, not the one waking), and is refused
// when nothing more can go.
func TestMakeRoom(t *testing.T) {
	rt := &sleeper{}
	m := &Manager{cfg: Config{Dir: t.TempDir(), Runtime: rt, WakeReserve: 0.1}, sites: map[string]*Site{}, locks: map[string]*sync.Mutex{},
		content: map[string]*sync.RWMutex{}, presences: map[string]*presence{}, now: time.Now}
	m.log = slog.New(slog.DiscardHandler)
	if err := os.MkdirAll(filepath.Join(m.cfg.Dir, "records"), 0o700); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour)
	for i, id := range []string{"site_oldest", "site_older", "site_held", "site_recent", "site_waking"} {
		if err := m.save(&Site{ID: id, UID: 2099000 + i}); err != nil {
			t.Fatal(err)
		}
		m.presence(id).last.Store(base.Add(time.Duration(i) * time.Minute).UnixNano())
	}
	release, err := m.Hold(context.Background(), "site_held", DoorAPI)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	m.presence("site_held").last.Store(base.UnixNano() - 1) // idlest by the clock, but in use

	// Short of memory until two sites went.
	restore := memAvailable
	defer func() { memAvailable = restore }()
	const total = 10 << 30
	memAvailable = func() (int64, int64, error) {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return int64(len(rt.halted)) * (total / 20), total, nil
	}
	if err := m.makeRoom(context.Background(), "site_waking"); err != nil {
		t.Fatal(err)
	}
	if got := rt.halted; len(got) < 2 || got[0] != "wp-site_oldest" || got[1] != "wp-site_older" {
		t.Fatalf("put to sleep: %v, want the two idlest first", got)
	}
	for _, id := range []string{"site_held", "site_waking"} {
		if m.Get(id).Depth != Awake {
			t.Fatalf("%s was put to sleep", id)
		}
	}

	// Nothing more can go: the wake is refused.
	memAvailable = func() (int64, int64, error) { return 0, total, nil }
	if err := m.makeRoom(context.Background(), "site_waking"); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("no room left: %v", err)
	}
	if m.Get("site_held").Depth != Awake {
		t.Fatal("the site in use was put to sleep")
	}
}
