package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/agent/sites"
)

// sleepPhases measures idle sites' sleep, each figure against a baseline
// of the same run, alternated with it:
//
//   - wake → first byte through the edge, from dozing and from asleep,
//     against the same page of the same site awake;
//   - a page's time on sites sized by the lean profile against the
//     classic one (what sites had before);
//   - host memory per awake, dozing and asleep site, all in
//     (MemTotal − MemAvailable, page cache dropped), with where it goes
//     by proportional set size;
//   - a node of many sites, a tenth awake and the rest asleep, and what
//     it has left.
func sleepPhases(ctx context.Context, sys *system, rounds, memSites, densitySites, densityAwake int) error {
	if err := wakeLatency(ctx, sys, rounds); err != nil {
		return err
	}
	if err := pageTimeByProfile(ctx, sys, rounds); err != nil {
		return err
	}
	if err := memoryByDepth(ctx, sys, memSites); err != nil {
		return err
	}
	if densitySites == 0 {
		return nil
	}
	return density(ctx, sys, densitySites, densityAwake)
}

// ttfb sends a GET of / for host through addr and times its first byte.
func ttfb(addr, host string) (time.Duration, error) {
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Host = host
	var first time.Time
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotFirstResponseByte: func() { first = time.Now() }}))
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("%s: %d", host, resp.StatusCode)
	}
	return first.Sub(t0), nil
}

func wakeLatency(ctx context.Context, sys *system, rounds int) error {
	const n = 4
	mgr := sys.agent.Sites()
	type site struct{ id, host string }
	var ss []site
	for range n {
		host, id, err := sys.createVia(ctx, "/api/app/sites", `{"name":"Sleeper"}`)
		if err != nil {
			return err
		}
		ss = append(ss, site{id, host})
	}
	edge := sys.edge.Addr()
	var awake, fromDoze, fromSleep []time.Duration
	for i := range rounds {
		s := ss[i%n]
		// A (awake) B (from dozing) A B (from asleep): the same page.
		for _, to := range []sites.Depth{sites.Dozing, sites.Asleep} {
			if _, err := ttfb(edge, s.host); err != nil { // served just before: warm
				return err
			}
			d, err := ttfb(edge, s.host)
			if err != nil {
				return err
			}
			awake = append(awake, d)
			if err := deepen(ctx, mgr, s.id, to); err != nil {
				return err
			}
			if d, err = ttfb(edge, s.host); err != nil {
				return err
			}
			if to == sites.Dozing {
				fromDoze = append(fromDoze, d)
			} else {
				fromSleep = append(fromSleep, d)
			}
		}
	}
	fmt.Printf("  first byte through the edge, %d rounds (awake, dozing, awake, asleep alternated):\n", rounds)
	fmt.Printf("    awake (baseline): p50 %s  p99 %s\n", ms(pct(awake, .5)), ms(pct(awake, .99)))
	for _, w := range []struct {
		name string
		d    []time.Duration
		goal string
	}{{"from dozing", fromDoze, "p50 <= 100 ms"}, {"from asleep", fromSleep, "p50 <= 400 ms"}} {
		fmt.Printf("    %-16s  p50 %s  p99 %s  (%.2fx awake at p50; p99 %.2fx its p50; goals: %s, p99 <= 3x p50)\n", w.name,
			ms(pct(w.d, .5)), ms(pct(w.d, .99)), pct(w.d, .5).Seconds()/pct(awake, .5).Seconds(), pct(w.d, .99).Seconds()/pct(w.d, .5).Seconds(), w.goal)
	}
	for _, s := range ss {
		if err := sys.deleteSite(ctx, s.id); err != nil {
			return err
		}
	}
	return nil
}

// deepen puts a site to depth once it is not in use: the connection
// that served its last page holds it until its web server closes it
// (two idle seconds).
func deepen(ctx context.Context, mgr *sites.Manager, id string, to sites.Depth) error {
	f := mgr.Doze
	if to == sites.Asleep {
		f = mgr.Sleep
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := f(ctx, id)
		if !errors.Is(err, sites.ErrBusy) || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("put %s to sleep: %w", id, err)
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pageTimeByProfile times the same page on sites of the classic profile
// (A) and the lean one (B), request by request alternated.
func pageTimeByProfile(ctx context.Context, sys *system, rounds int) error {
	const per = 3
	type site struct{ id, addr, host string }
	var a, b []site
	for i := range per * 2 {
		prof := sites.Classic.Name
		if i%2 == 1 {
			prof = sites.Lean.Name
		}
		id, slug := fmt.Sprintf("site_prof%04d", i), fmt.Sprintf("prof%d", i)
		st, err := sys.agent.Templates().Create(ctx, sites.CreateRequest{ID: id, Slug: slug, PHPVersion: "8.2", URL: "http://" + slug + ".localhost",
			AdminUser: "admin", AdminEmail: "a@example.com", Profile: prof}, "")
		if err != nil {
			return err
		}
		s := site{id, st.Addr(), slug + ".localhost"}
		for range 3 { // warm
			if _, err := ttfb(s.addr, s.host); err != nil {
				return err
			}
		}
		if i%2 == 0 {
			a = append(a, s)
		} else {
			b = append(b, s)
		}
	}
	page := func(s site) (time.Duration, error) {
		t0 := time.Now()
		code, err := get(s.addr, s.host)
		if err == nil && code != 200 {
			err = fmt.Errorf("%s: %d", s.host, code)
		}
		return time.Since(t0), err
	}
	var ta, tb []time.Duration
	for i := range rounds * 4 {
		da, err := page(a[i%per])
		if err != nil {
			return err
		}
		db, err := page(b[i%per])
		if err != nil {
			return err
		}
		ta, tb = append(ta, da), append(tb, db)
	}
	fmt.Printf("  a page of a stock site on its port, %d requests each, alternated: classic profile p50 %s p95 %s; lean p50 %s p95 %s (%.2fx at p50; goal <= 1.1x)\n",
		len(ta), ms(pct(ta, .5)), ms(pct(ta, .95)), ms(pct(tb, .5)), ms(pct(tb, .95)), pct(tb, .5).Seconds()/pct(ta, .5).Seconds())
	for _, s := range append(a, b...) {
		if _, err := sys.agent.Sites().Delete(ctx, s.id); err != nil {
			return err
		}
	}
	return nil
}

// hostUsed is the host's memory in use, page cache dropped first:
// MemTotal − MemAvailable.
func hostUsed() (int64, error) {
	// Dirty pages (the sites' opcache file caches, just written) go to
	// disk first: only clean ones can be dropped.
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		return 0, fmt.Errorf("drop the page cache: %w", err)
	}
	time.Sleep(time.Second)
	info, err := meminfo()
	if err != nil {
		return 0, err
	}
	return (info["MemTotal"] - info["MemAvailable"]) << 10, nil
}

func meminfo() (map[string]int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			out[strings.TrimSuffix(f[0], ":")] = n
		}
	}
	return out, sc.Err()
}

// pssByKind sums the proportional set size (bytes) of the host's
// processes by what they are.
func pssByKind() map[string]int64 {
	self := strconv.Itoa(os.Getpid())
	out := map[string]int64{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		comm, err := os.ReadFile(filepath.Join(p, "comm"))
		if err != nil {
			continue
		}
		kind := ""
		switch c := strings.TrimSpace(string(comm)); {
		case c == "apache2" || c == "php":
			kind = "apache+php"
		case strings.HasPrefix(c, "containerd-shim"):
			kind = "shims"
		case c == "mariadbd":
			kind = "mariadb"
		case c == "containerd":
			kind = "containerd"
		case filepath.Base(p) == self:
			kind = "control plane+agent+edge"
		default:
			continue
		}
		b, err := os.ReadFile(filepath.Join(p, "smaps_rollup"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Pss:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				out[kind] += n << 10
			}
		}
	}
	return out
}

// memoryByDepth makes n stock sites, serves each a page, and reads the
// host's memory with every site awake, then dozing, then asleep, and
// once they are deleted: each depth's figure is against that last read,
// taken right after on the same host.
func memoryByDepth(ctx context.Context, sys *system, n int) error {
	mgr := sys.agent.Sites()
	var ids []string
	for i := range n {
		id, slug := fmt.Sprintf("site_mem%05d", i), fmt.Sprintf("mem%d", i)
		st, err := sys.agent.Templates().Create(ctx, sites.CreateRequest{ID: id, Slug: slug, PHPVersion: "8.2", URL: "http://" + slug + ".localhost",
			AdminUser: "admin", AdminEmail: "a@example.com"}, "")
		if err != nil {
			return fmt.Errorf("site %d of %d: %w", i+1, n, err)
		}
		for range 2 {
			if err := waitOK(st.Addr(), slug+".localhost", time.Minute); err != nil {
				return err
			}
		}
		ids = append(ids, id)
	}
	time.Sleep(3 * time.Second) // Apache culls its spare workers
	type reading struct {
		used int64
		pss  map[string]int64
		info map[string]int64
		zram int64
	}
	read := func() (reading, error) {
		used, err := hostUsed()
		if err != nil {
			return reading{}, err
		}
		return reading{used, pssByKind(), must(meminfo()), zramUsed()}, nil
	}
	each := func(f func(context.Context, string) error) error {
		var wg sync.WaitGroup
		errs := make(chan error, len(ids))
		sem := make(chan struct{}, 2)
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				if err := f(ctx, id); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}
	var at []reading
	doze := func(ctx context.Context, id string) error { return deepen(ctx, mgr, id, sites.Dozing) }
	sleep := func(ctx context.Context, id string) error { return deepen(ctx, mgr, id, sites.Asleep) }
	for _, step := range []func(context.Context, string) error{nil, doze, sleep,
		func(ctx context.Context, id string) error { _, err := mgr.Delete(ctx, id); return err }} {
		if step != nil {
			if err := each(step); err != nil {
				return err
			}
		}
		r, err := read()
		if err != nil {
			return err
		}
		at = append(at, r)
	}
	end := at[3]
	per := func(v int64) string { return fmt.Sprintf("%.1f", float64(v)/float64(n)/(1<<20)) }
	fmt.Printf("  host memory per site, %d stock sites, each served a page (MemTotal - MemAvailable, page cache dropped, against the host once they are deleted):\n", n)
	for i, depth := range []string{"awake", "dozing", "asleep"} {
		r := at[i]
		kinds := make([]string, 0, len(r.pss))
		for k := range r.pss {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		var parts []string
		for _, k := range kinds {
			parts = append(parts, k+" "+per(r.pss[k]-end.pss[k]))
		}
		for _, k := range []string{"Slab", "PageTables", "KernelStack"} {
			parts = append(parts, k+" "+per((r.info[k]-end.info[k])<<10))
		}
		parts = append(parts, "zram "+per(r.zram-end.zram))
		fmt.Printf("    %-7s %5s MiB per site; by PSS and kernel counters, per site: %s\n", depth, per(r.used-end.used), strings.Join(parts, ", "))
	}
	fmt.Println("    goals: awake <= 20 MiB, dozing <= 8 MiB, asleep <= 1 MiB per site")
	return nil
}

// zramUsed is what the compressed swap holds of RAM.
func zramUsed() int64 {
	b, err := os.ReadFile("/sys/block/zram0/mm_stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0
	}
	n, _ := strconv.ParseInt(f[2], 10, 64)
	return n
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// density holds n stock sites on the node, awake of them awake (each
// served a page in the last minute) and the rest asleep, and reads what
// the host has left: the node of 2,000 sites, 200 awake.
func density(ctx context.Context, sys *system, n, awake int) error {
	mgr := sys.agent.Sites()
	base, err := hostUsed()
	if err != nil {
		return err
	}
	start := time.Now()
	var ids []string
	defer func() {
		// Deleted two at a time, as they were made: the purge at the end
		// would do it too, one by one.
		var wg sync.WaitGroup
		sem := make(chan struct{}, 2)
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				_, _ = mgr.Delete(context.WithoutCancel(ctx), id)
			}()
		}
		wg.Wait()
	}()
	type made struct{ addr, host string }
	var last []made
	for i := range n {
		id, slug := fmt.Sprintf("site_dens%05d", i), fmt.Sprintf("dens%d", i)
		st, err := sys.agent.Templates().Create(ctx, sites.CreateRequest{ID: id, Slug: slug, PHPVersion: "8.2", URL: "http://" + slug + ".localhost",
			AdminUser: "admin", AdminEmail: "a@example.com"}, "")
		if err != nil {
			return fmt.Errorf("site %d of %d (%s after the first): %w", i+1, n, time.Since(start).Round(time.Second), err)
		}
		ids = append(ids, id)
		if err := waitOK(st.Addr(), slug+".localhost", time.Minute); err != nil {
			return err
		}
		if i < n-awake {
			if err := deepen(ctx, mgr, id, sites.Asleep); err != nil {
				return err
			}
		} else {
			last = append(last, made{st.Addr(), slug + ".localhost"})
		}
		if (i+1)%250 == 0 {
			fmt.Printf("    %d sites made in %s\n", i+1, time.Since(start).Round(time.Second))
		}
	}
	for _, s := range last { // each awake site served a page in the last minute
		if err := waitOK(s.addr, s.host, time.Minute); err != nil {
			return err
		}
	}
	used, err := hostUsed()
	if err != nil {
		return err
	}
	info := must(meminfo())
	free := float64(info["MemAvailable"]) / float64(info["MemTotal"])
	fmt.Printf("  %d sites on one node, %d awake and %d asleep (made in %s): host memory in use %.1f GiB more than before them, %.0f%% of its memory available (goal: a quarter)\n",
		n, awake, n-awake, time.Since(start).Round(time.Second), float64(used-base)/(1<<30), 100*free)
	return nil
}
