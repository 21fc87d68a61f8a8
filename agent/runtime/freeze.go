package runtime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/errdefs"
)

// A dozing container is frozen where it stands by its cgroup's freezer
// and its memory is pushed out to (compressed) swap; thawing it is all a
// wake needs. These work on the cgroup files directly, not through the
// shim: a write there takes a millisecond, a runc pause tens of them.

// controllerDir is the container's cgroup directory of one v1 controller,
// or its one v2 directory; v2 reports whether it is the unified one.
func (r *Runtime) controllerDir(id, controller string) (dir string, v2 bool) {
	rel := filepath.Join(r.ns, r.cid(id))
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return filepath.Join(cgroupRoot, rel), true
	}
	return filepath.Join(cgroupRoot, controller, rel), false
}

// ErrNoCgroup is returned for a container whose cgroup is not there: its
// task does not run.
var ErrNoCgroup = errors.New("the container's cgroup is not there (its task does not run)")

func writeCgroup(path, value string) error {
	err := os.WriteFile(path, []byte(value), 0)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w", path, ErrNoCgroup)
	}
	return err
}

// Freeze stops every process of the container's task where it is, and
// returns once all are stopped.
func (r *Runtime) Freeze(ctx context.Context, id string) error {
	dir, v2 := r.controllerDir(id, "freezer")
	if v2 {
		if err := writeCgroup(filepath.Join(dir, "cgroup.freeze"), "1"); err != nil {
			return fmt.Errorf("freeze %s: %w", id, err)
		}
		return r.waitFreezer(ctx, id, func(dir string) (bool, error) {
			b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
			return bytes.Contains(b, []byte("frozen 1")), err
		})
	}
	if err := writeCgroup(filepath.Join(dir, "freezer.state"), "FROZEN"); err != nil {
		return fmt.Errorf("freeze %s: %w", id, err)
	}
	return r.waitFreezer(ctx, id, func(dir string) (bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		return string(bytes.TrimSpace(b)) == "FROZEN", err
	})
}

// waitFreezer polls until done says the freezer finished; a process in
// an uninterruptible sleep holds it in FREEZING for a while.
func (r *Runtime) waitFreezer(ctx context.Context, id string, done func(dir string) (bool, error)) error {
	dir, _ := r.controllerDir(id, "freezer")
	for wait := 100 * time.Microsecond; ; wait = min(wait*2, 20*time.Millisecond) {
		ok, err := done(dir)
		if err != nil {
			return fmt.Errorf("freeze %s: %w", id, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			_ = r.Thaw(context.WithoutCancel(ctx), id)
			return fmt.Errorf("freeze %s: %w", id, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Thaw lets a frozen container's processes run again; one that is not
// frozen is left alone.
func (r *Runtime) Thaw(_ context.Context, id string) error {
	dir, v2 := r.controllerDir(id, "freezer")
	var err error
	if v2 {
		err = writeCgroup(filepath.Join(dir, "cgroup.freeze"), "0")
	} else {
		err = writeCgroup(filepath.Join(dir, "freezer.state"), "THAWED")
	}
	if err != nil {
		return fmt.Errorf("thaw %s: %w", id, err)
	}
	return nil
}

// Frozen reports whether the container's task is frozen; false when it
// has none.
func (r *Runtime) Frozen(id string) (bool, error) {
	dir, v2 := r.controllerDir(id, "freezer")
	if v2 {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.freeze"))
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return string(bytes.TrimSpace(b)) == "1", err
	}
	b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return string(bytes.TrimSpace(b)) != "THAWED", err
}

// Reclaim pushes as much of the container's memory out as the kernel
// can: its page cache dropped, its anonymous memory (PHP's heaps and
// opcache) to swap. Meant for a frozen container, which touches none of
// it meanwhile.
func (r *Runtime) Reclaim(_ context.Context, id string) error {
	dir, v2 := r.controllerDir(id, "memory")
	var err error
	if v2 {
		// More than the container can hold: the kernel reclaims what it can
		// and answers EAGAIN for the rest.
		err = writeCgroup(filepath.Join(dir, "memory.reclaim"), strconv.FormatInt(1<<40, 10))
		if errors.Is(err, syscall.EAGAIN) {
			err = nil
		}
	} else {
		// Two passes: the kernel gives up on pages it found busy once.
		for range 2 {
			err = writeCgroup(filepath.Join(dir, "memory.force_empty"), "0")
			if errors.Is(err, syscall.EBUSY) { // what is left could not go
				err = nil
			}
			if n, rerr := readInt(filepath.Join(dir, "memory.usage_in_bytes")); err != nil || rerr != nil || n < 1<<20 {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("reclaim %s: %w", id, err)
	}
	return nil
}

// MemoryStat is what a container's cgroup holds of the host's memory.
type MemoryStat struct {
	// Usage is what it holds in RAM (its page cache included); Swap
	// what it has in swap.
	Usage, Swap int64
	// Anon and File split Usage.
	Anon, File int64
}

// Memory reads the container's memory counters.
func (r *Runtime) Memory(id string) (MemoryStat, error) {
	dir, v2 := r.controllerDir(id, "memory")
	stat, err := readKeyed(filepath.Join(dir, "memory.stat"))
	if errors.Is(err, os.ErrNotExist) {
		return MemoryStat{}, fmt.Errorf("memory of %s: %w", id, ErrNoCgroup)
	}
	if err != nil {
		return MemoryStat{}, fmt.Errorf("memory of %s: %w", id, err)
	}
	var m MemoryStat
	if v2 {
		m.Usage, err = readInt(filepath.Join(dir, "memory.current"))
		m.Swap, _ = readInt(filepath.Join(dir, "memory.swap.current"))
		m.Anon, m.File = stat["anon"], stat["file"]
	} else {
		m.Usage, err = readInt(filepath.Join(dir, "memory.usage_in_bytes"))
		m.Swap, m.Anon, m.File = stat["total_swap"], stat["total_rss"]+stat["total_shmem"], stat["total_cache"]-stat["total_shmem"]
	}
	if err != nil {
		return MemoryStat{}, fmt.Errorf("memory of %s: %w", id, err)
	}
	return m, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
}

// readKeyed reads a cgroup file of "key value" lines.
func readKeyed(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, sc.Err()
}

// Halt ends the container's task at once (SIGKILL to every process,
// frozen or not) and deletes it; the container and its snapshot stay for
// a later Run. A sleeping site needs no graceful stop: what it keeps is
// on its disk and in MariaDB, and nothing of a killed Apache is lost.
func (r *Runtime) Halt(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	task, err := r.task(ctx, id)
	if task == nil || err != nil {
		return err
	}
	// Killed while frozen, the processes die as they are thawed, without
	// running (and without reading back what is in swap); thawed whatever
	// happens, so that nothing stays frozen.
	defer func() { _ = r.Thaw(ctx, id) }()
	if err := task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("kill %s: %w", id, err)
	}
	_ = r.Thaw(ctx, id)
	if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete task %s: %w", id, err)
	}
	return nil
}
