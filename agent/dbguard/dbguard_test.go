package dbguard_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/dbguard"
	"github.com/sandboxd/sandboxd/agent/sitedisk"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// limiter records what the guard asked for.
type limiter struct {
	mu    sync.Mutex
	calls []bool
}

func (l *limiter) LimitWrites(_ context.Context, user string, limited bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, limited)
	return nil
}

func (l *limiter) seen() []bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGuardLimitsAtThePlan: a database growing past the plan's share of
// its disk (into the reserve) has its writes taken away as soon as the
// kernel reports the write, with no sweep to help, in a database
// directory made after the site was first tracked (an import's
// staging); making room gives the writes back.
func TestGuardLimitsAtThePlan(t *testing.T) {
	hosttest.Root(t)
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk")
	t.Cleanup(func() { _ = sitedisk.Unmount(disk) })
	if err := sitedisk.EnsureReserved(filepath.Join(dir, "disk.img"), 48, sitedisk.Reserve{MB: 16, UID: 999}, disk); err != nil {
		t.Fatal(err)
	}
	volume := filepath.Join(disk, "mariadb")
	for _, d := range []string{volume, filepath.Join(volume, "wp_g")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	l := &limiter{}
	// No sweep within the test: only the kernel's reports count.
	g, err := dbguard.New(dbguard.Config{Limiter: l, Sweep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })

	u, err := sitedisk.UsageOf(disk)
	if err != nil {
		t.Fatal(err)
	}
	limit := u.Used + 8<<20 // what the plan leaves the site
	if err := g.Track(ctx, dbguard.Site{User: "wp_g", Disk: disk, Volume: volume, LimitBytes: limit}); err != nil {
		t.Fatal(err)
	}
	if got := l.seen(); !slices.Equal(got, []bool{false}) || g.Limited("wp_g") {
		t.Fatalf("tracking a site under its plan: %v", got)
	}
	// A staging database made after Track, then written past the plan.
	staging := filepath.Join(volume, "wp_g_i")
	if err := os.Mkdir(staging, 0o700); err != nil {
		t.Fatal(err)
	}
	// As the site manager does once it staged a database (the guard
	// also adds directories the kernel reports made, a moment later).
	if err := g.Track(ctx, dbguard.Site{User: "wp_g", Disk: disk, Volume: volume, LimitBytes: limit}); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(staging, "t.ibd")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// fallocate, as InnoDB grows a table.
	if err := syscallFallocate(f, 12<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	waitFor(t, "the writes to be taken away", func() bool { return g.Limited("wp_g") })
	if got := l.seen(); !slices.Equal(got[len(got)-2:], []bool{false, true}) {
		t.Fatalf("calls: %v", got)
	}
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the writes to come back", func() bool { return !g.Limited("wp_g") })
	if got := l.seen(); !slices.Equal(got[len(got)-3:], []bool{false, true, false}) {
		t.Fatalf("calls: %v", got)
	}
	g.Untrack("wp_g")
	if g.Limited("wp_g") {
		t.Fatal("an untracked site is limited")
	}
}
