package sites_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/nodeswap"
	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sites/sitestest"
)

// wakes counts what the sites told their observer.
type wakes struct {
	mu    sync.Mutex
	woke  map[sites.Depth]int
	slept map[sites.Depth]int
	errs  []error
}

func (w *wakes) Woke(from sites.Depth, _ sites.Door, _ time.Duration, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.woke[from]++
	if err != nil {
		w.errs = append(w.errs, err)
	}
}

func (w *wakes) Slept(to sites.Depth, _ time.Duration, _ error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.slept[to]++
}

func (w *wakes) count(from sites.Depth) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.woke[from]
}

// procs are the host pids of a container's processes, from its cgroup.
func procs(t *testing.T, rt *runtime.Runtime, id string) []int {
	t.Helper()
	var out []int
	for _, d := range rt.CgroupDirs(sites.ContainerID(id)) {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return out
}

// cpuTicks is the CPU time (user+system, in clock ticks) process pid
// has used, from the host's /proc; -1 when it is gone.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

// TestSitesSleepAndWake, on real sites: a dozing site's processes are
// frozen and its memory leaves RAM (both read on the host), a touch
// wakes it with its content as it was, twenty requests during one wake
// cause one wake and are all served, a command in the site wakes it
// from its deepest sleep (the container's task gone), a loop of its own
// neither keeps it awake nor wakes its dozing neighbour, and a restarted
// agent finds it asleep and wakes it on the next request.
func TestSitesSleepAndWake(t *testing.T) {
	if _, err := nodeswap.Ensure(4 << 30); err != nil {
		t.Fatal(err)
	}
	w := &wakes{woke: map[sites.Depth]int{}, slept: map[sites.Depth]int{}}
	e := sitestest.SetUp(t, sitestest.Observing(w))
	rt := e.Cfg.Runtime.(*runtime.Runtime)
	ctx := context.Background()
	a, err := e.Sites.Make(ctx, sitestest.Req("site_sleep1111", "sleepy", "Sleepy Shop"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Sites.Make(ctx, sitestest.Req("site_sleep2222", "neighbour", "Neighbour"), nil)
	if err != nil {
		t.Fatal(err)
	}
	home := func(s *sites.Site, host string) string {
		t.Helper()
		resp, body := sitestest.Get(t, s.Addr(), host, "/")
		if resp.StatusCode != 200 || !strings.Contains(body, "Sleepy Shop") && !strings.Contains(body, "Neighbour") {
			t.Fatalf("home of %s: %d %.200s", s.ID, resp.StatusCode, body)
		}
		return body
	}
	before := home(a, "sleepy.localhost:8081")
	home(a, "sleepy.localhost:8081")
	awake, err := rt.Memory(sites.ContainerID(a.ID))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("dozing frees memory and freezes", func(t *testing.T) {
		pids := procs(t, rt, a.ID)
		if len(pids) == 0 {
			t.Fatal("no processes in the site's cgroup")
		}
		if err := e.Sites.Doze(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if d := e.Sites.Get(a.ID).Depth; d != sites.Dozing {
			t.Fatalf("depth %q", d)
		}
		if frozen, err := rt.Frozen(sites.ContainerID(a.ID)); err != nil || !frozen {
			t.Fatalf("not frozen: %v", err)
		}
		dozing, err := rt.Memory(sites.ContainerID(a.ID))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("awake %d KiB in RAM; dozing %d KiB in RAM, %d KiB in swap", awake.Usage>>10, dozing.Usage>>10, dozing.Swap>>10)
		if dozing.Usage*3 > awake.Usage || dozing.Swap == 0 {
			t.Fatalf("memory stayed: awake %+v, dozing %+v", awake, dozing)
		}
		ticks := cpuTicks(pids[0])
		if ticks < 0 {
			t.Fatal("the site's process is gone while dozing")
		}
	})

	t.Run("a prefetch reads a thawed site's memory back from swap", func(t *testing.T) {
		cid := sites.ContainerID(a.ID)
		dozing, err := rt.Memory(cid)
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Thaw(ctx, cid); err != nil {
			t.Fatal(err)
		}
		if err := rt.Prefetch(ctx, cid); err != nil {
			t.Fatal(err)
		}
		back, berr := rt.Memory(cid)
		// Left as the manager had it: frozen, its memory in swap.
		if err := rt.Freeze(ctx, cid); err != nil {
			t.Fatal(err)
		}
		if err := rt.Reclaim(ctx, cid); err != nil {
			t.Fatal(err)
		}
		if berr != nil {
			t.Fatal(berr)
		}
		t.Logf("dozing %d KiB in RAM, %d KiB in swap; prefetched %d KiB in RAM", dozing.Usage>>10, dozing.Swap>>10, back.Usage>>10)
		if back.Usage < dozing.Usage+dozing.Swap/2 {
			t.Fatalf("the prefetch read back less than half of what was in swap: dozing %+v, after %+v", dozing, back)
		}
	})

	t.Run("twenty requests during a wake, one wake", func(t *testing.T) {
		n := w.count(sites.Dozing)
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := e.Sites.Touch(ctx, a.ID); err != nil {
					errs <- err
					return
				}
				resp, body := sitestest.Get(t, a.Addr(), "sleepy.localhost:8081", "/")
				if resp.StatusCode != 200 || body != before {
					errs <- fmt.Errorf("after the wake: %d, same page %v", resp.StatusCode, body == before)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got := w.count(sites.Dozing) - n; got != 1 {
			t.Fatalf("%d wakes for 20 requests", got)
		}
		if frozen, _ := rt.Frozen(sites.ContainerID(a.ID)); frozen || e.Sites.Get(a.ID).Depth != sites.Awake {
			t.Fatal("still dozing after the wake")
		}
	})

	t.Run("asleep, a command wakes it", func(t *testing.T) {
		pids := procs(t, rt, a.ID)
		if err := e.Sites.Sleep(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if running, _ := e.Sites.Running(ctx, a.ID); running {
			t.Fatal("the task still runs asleep")
		}
		for _, pid := range pids {
			if cpuTicks(pid) >= 0 {
				t.Fatalf("process %d of the sleeping site is still there", pid)
			}
		}
		n := w.count(sites.Asleep)
		res, err := e.Sites.Exec(ctx, a.ID, []string{"cat", "/srv/site/wordpress/index.php"}, nil)
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "wp-blog-header") {
			t.Fatalf("a command in a sleeping site: %v %+v", err, res)
		}
		if w.count(sites.Asleep) != n+1 {
			t.Fatal("the command did not wake it")
		}
		if home(a, "sleepy.localhost:8081") != before {
			t.Fatal("the page changed across sleep")
		}
		// Its compiled scripts came from the file cache on its own disk,
		// which holds every script but the one with its secrets.
		var cached, secret int
		_ = filepath.WalkDir(filepath.Join(e.Sites.Data(a.ID), "tmp", "opcache"), func(p string, d os.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(p, ".php.bin") {
				cached++
				if strings.HasSuffix(p, "wp-config.php.bin") {
					secret++
				}
			}
			return nil
		})
		if cached < 50 || secret != 0 {
			t.Fatalf("the opcache file cache: %d scripts, wp-config.php among them %d times", cached, secret)
		}
	})

	t.Run("its own loop keeps it not awake, nor wakes a neighbour", func(t *testing.T) {
		if err := e.Sites.Doze(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		// A loop of the site's own, hammering its neighbour's address.
		loop := `nohup php -r 'for(;;){ $c=@fsockopen("` + b.IP + `", 8080, $e, $s, 0.2); if($c){fwrite($c,"GET / HTTP/1.0\r\n\r\n"); fclose($c);} usleep(20000); }' >/dev/null 2>&1 &`
		if res, err := e.Sites.Exec(ctx, a.ID, []string{"sh", "-c", loop}, nil); err != nil || res.ExitCode != 0 {
			t.Fatal(err, res)
		}
		time.Sleep(300 * time.Millisecond)
		if d := e.Sites.Get(b.ID).Depth; d != sites.Dozing {
			t.Fatalf("the neighbour woke: %q", d)
		}
		var loopPID int
		for _, pid := range procs(t, rt, a.ID) {
			if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(c), "fsockopen") {
				loopPID = pid
			}
		}
		if loopPID == 0 {
			t.Fatal("the loop is not running")
		}
		// Idle by the clock although the loop runs: the site dozes.
		if err := e.Sites.Doze(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		t0 := cpuTicks(loopPID)
		time.Sleep(500 * time.Millisecond)
		if t1 := cpuTicks(loopPID); t1 != t0 {
			t.Fatalf("the loop ran while its site dozed: %d -> %d ticks", t0, t1)
		}
		if err := e.Sites.Sleep(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if cpuTicks(loopPID) >= 0 {
			t.Fatal("the loop outlived its site's sleep")
		}
		if d := e.Sites.Get(b.ID).Depth; d != sites.Dozing {
			t.Fatalf("the neighbour woke: %q", d)
		}
	})

	t.Run("a restarted agent keeps it asleep", func(t *testing.T) {
		again, err := sites.New(e.Cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := again.Reattach(ctx); err != nil {
			t.Fatal(err)
		}
		if d := again.Get(a.ID).Depth; d != sites.Asleep {
			t.Fatalf("depth after a restart %q", d)
		}
		if running, _ := again.Running(ctx, a.ID); running {
			t.Fatal("a restart started the sleeping site")
		}
		if d := again.Get(b.ID).Depth; d != sites.Dozing {
			t.Fatalf("the dozing neighbour after a restart: %q", d)
		}
		if err := again.Touch(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if home(a, "sleepy.localhost:8081") != before {
			t.Fatal("the page changed across the restart")
		}
		if err := again.Touch(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		home(b, "neighbour.localhost:8081")
	})
}

// TestSiteWakeFails: a site whose start fails answers every waiting
// request with the error (one wake tried for them) and leaves nothing
// running; requests right after are told at once, and once its wait is
// over the next request tries again.
func TestSiteWakeFails(t *testing.T) {
	w := &wakes{woke: map[sites.Depth]int{}, slept: map[sites.Depth]int{}}
	e := sitestest.SetUp(t, sitestest.Observing(w))
	ctx := context.Background()
	a, err := e.Sites.Make(ctx, sitestest.Req("site_broke1111", "broke", "Broke"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Sites.Sleep(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	start := filepath.Join(e.Sites.FS(a.ID), "conf", "start.sh")
	good, err := os.ReadFile(start)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(start, []byte("#!/bin/sh\nexec >>/srv/site/logs/start.log 2>&1\necho broken on purpose\nexit 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = e.Sites.Touch(ctx, a.ID) }()
	}
	wg.Wait()
	for _, err := range errs {
		if !errors.Is(err, sites.ErrWake) || !strings.Contains(err.Error(), "broken on purpose") {
			t.Fatalf("a failed wake: %v", err)
		}
	}
	// Right after, a request is told at once, and starts nothing: a
	// site that cannot start does not start a container per request.
	tries := w.count(sites.Asleep)
	if err := e.Sites.Touch(ctx, a.ID); !errors.Is(err, sites.ErrWake) || w.count(sites.Asleep) != tries {
		t.Fatalf("a request right after a failed wake: %v, %d more wakes", err, w.count(sites.Asleep)-tries)
	}
	if running, _ := e.Sites.Running(ctx, a.ID); running {
		t.Fatal("the failed start left its task running")
	}
	if err := os.WriteFile(start, good, 0o644); err != nil {
		t.Fatal(err)
	}
	// Once its wait is over, the next request tries again.
	deadline := time.Now().Add(30 * time.Second)
	for err = e.Sites.Touch(ctx, a.ID); err != nil && time.Now().Before(deadline); err = e.Sites.Touch(ctx, a.ID) {
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the next request did not try again: %v", err)
	}
	if resp, _ := sitestest.Get(t, a.Addr(), "broke.localhost:8081", "/"); resp.StatusCode != 200 {
		t.Fatalf("after the wake: %d", resp.StatusCode)
	}
}
