package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/sites"
)

// templatePhases measures what templates and pools buy, each against a
// baseline of the same run:
//
//   - site from a template → first 200 through the API and the edge, next
//     to the agent's clone called directly (overlay, database copy, URL
//     rewrite, container start: the hand-made clone), alternated;
//   - a claim from the template's warm pool, its sites dozing, → first
//     200 through the edge, each followed by the same site's page awake
//     (baseline) (goal: p50 <= 100 ms);
//   - 20 creates sent at once → all 20 serving through the edge, made by
//     cloning and claimed from a pool of 20 dozing sites, alternated
//     (goal: <= 1.5 s);
//   - idle memory per site of many sites cloned from one template.
func templatePhases(ctx context.Context, sys *system, n, claims, memSites int) error {
	mgr := sys.agent.Sites()

	// The template: a fresh site frozen.
	src, err := sys.api("POST", "/api/app/sites", `{"name":"Template source"}`)
	if err != nil {
		return err
	}
	srcID := src["site"].(map[string]any)["id"].(string)
	if err := sys.waitJob(ctx, src["jobId"].(string)); err != nil {
		return err
	}
	made, err := sys.api("POST", "/api/app/templates", `{"siteId":"`+srcID+`","name":"Bench template"}`)
	if err != nil {
		return err
	}
	tplID := made["template"].(map[string]any)["id"].(string)
	if err := sys.waitJob(ctx, made["jobId"].(string)); err != nil {
		return err
	}

	// Clone: agent directly (A) and API → edge (B), alternated.
	var base, full []time.Duration
	for i := 0; i < n; i++ {
		id, slug := fmt.Sprintf("site_tbase%04d", i), fmt.Sprintf("tbase%d", i)
		t0 := time.Now()
		st, err := sys.agent.Templates().Create(ctx, sites.CreateRequest{ID: id, Slug: slug, URL: "http://" + slug + ".localhost", AdminUser: "admin",
			AdminEmail: "a@example.com"}, tplID)
		if err != nil {
			return err
		}
		if err := waitOK(st.Addr(), slug+".localhost", time.Minute); err != nil {
			return err
		}
		base = append(base, time.Since(t0))
		if _, err := mgr.Delete(ctx, id); err != nil {
			return err
		}
		t0 = time.Now()
		_, siteID, err := sys.createVia(ctx, "/api/app/templates/"+tplID+"/sites", `{"name":"From template"}`)
		if err != nil {
			return err
		}
		full = append(full, time.Since(t0))
		if err := sys.deleteSite(ctx, siteID); err != nil {
			return err
		}
	}

	// Claims from the template's warm pool (filled back between rounds).
	const poolSize = 10
	if _, err := sys.api("PATCH", "/api/app/templates/"+tplID, fmt.Sprintf(`{"warmPoolSize":%d}`, poolSize)); err != nil {
		return err
	}
	var claimed, claimedAwake []time.Duration
	var claimedIDs []string
	for len(claimed) < claims {
		if err := sys.waitPool(ctx, "template:"+tplID, poolSize); err != nil {
			return err
		}
		if err := sys.waitPoolDozing(ctx, "template:"+tplID); err != nil {
			return err
		}
		for i := 0; i < poolSize && len(claimed) < claims; i++ {
			t0 := time.Now()
			host, id, err := sys.createVia(ctx, "/api/app/templates/"+tplID+"/sites", `{"name":"Claimed"}`)
			if err != nil {
				return err
			}
			claimed = append(claimed, time.Since(t0))
			claimedIDs = append(claimedIDs, id)
			t0 = time.Now()
			if err := waitOK(sys.edge.Addr(), host, time.Minute); err != nil {
				return err
			}
			claimedAwake = append(claimedAwake, time.Since(t0))
		}
		for _, id := range claimedIDs {
			if err := sys.deleteSite(ctx, id); err != nil {
				return err
			}
		}
		claimedIDs = nil
	}
	if _, err := sys.api("PATCH", "/api/app/templates/"+tplID, `{"warmPoolSize":0}`); err != nil {
		return err
	}

	// 20 at once: cloned (A) and claimed from a stock pool of 20 (B).
	const burst = 20
	var cloneBurst, poolBurst []time.Duration
	for range 2 {
		d, err := sys.burst(ctx, burst)
		if err != nil {
			return err
		}
		cloneBurst = append(cloneBurst, d)
		sys.srv.Pool().SetStock(map[string]int{"8.2": burst})
		if err := sys.waitPool(ctx, "php:8.2/disk:10240", burst); err != nil {
			return err
		}
		if err := sys.waitPoolDozing(ctx, "php:8.2/disk:10240"); err != nil {
			return err
		}
		if d, err = sys.burst(ctx, burst); err != nil {
			return err
		}
		poolBurst = append(poolBurst, d)
		// The pool goes before the next cloned burst: nothing refills
		// while it runs.
		sys.srv.Pool().SetStock(nil)
		if err := sys.waitPoolGone(ctx); err != nil {
			return err
		}
	}

	// Idle memory of many clones of one template.
	var memIDs []string
	for i := 0; i < memSites; i++ {
		_, id, err := sys.createVia(ctx, "/api/app/templates/"+tplID+"/sites", `{"name":"Idle"}`)
		if err != nil {
			return err
		}
		memIDs = append(memIDs, id)
	}
	time.Sleep(5 * time.Second)
	rss, usage, counted := idleMemory(agent.Namespace(filepath.Join(sys.dir, "agent")), memIDs)

	fmt.Printf("  site from a template → first 200, baseline (agent clone called directly): p50 %s  p95 %s\n", ms(pct(base, .5)), ms(pct(base, .95)))
	fmt.Printf("  site from a template → first 200, API → edge:                           p50 %s  p95 %s\n", ms(pct(full, .5)), ms(pct(full, .95)))
	fmt.Printf("  ratio API/baseline:                                                     p50 %6.2fx   p95 %6.2fx  (goal <= 1.2x)\n",
		pct(full, .5).Seconds()/pct(base, .5).Seconds(), pct(full, .95).Seconds()/pct(base, .95).Seconds())
	fmt.Printf("  claim from a warm pool of dozing sites → first 200 through the edge, %d claims: p50 %s  p99 %s; the claimed site's next page, awake (baseline): p50 %s (%.2fx at p50; goal: p50 <= 100 ms)\n",
		len(claimed), ms(pct(claimed, .5)), ms(pct(claimed, .99)), ms(pct(claimedAwake, .5)), pct(claimed, .5).Seconds()/pct(claimedAwake, .5).Seconds())
	for i := range cloneBurst {
		fmt.Printf("  %d creates at once → all serving through the edge, pair %d: cloned (baseline) %s, from a pool of %d dozing sites %s (%.2fx; goal <= 1.5 s)\n",
			burst, i+1, ms(cloneBurst[i]), burst, ms(poolBurst[i]), poolBurst[i].Seconds()/cloneBurst[i].Seconds())
	}
	if counted > 0 {
		fmt.Printf("  idle memory per site, %d clones of one template (cgroup): rss %.1f MiB, usage incl. page cache %.1f MiB\n",
			counted, rss/float64(counted)/(1<<20), usage/float64(counted)/(1<<20))
	}
	for _, id := range memIDs {
		if err := sys.deleteSite(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// createVia creates a site through a create route and waits for its
// first 200 through the edge; it returns the site's host and id.
func (s *system) createVia(ctx context.Context, path, body string) (string, string, error) {
	out, err := s.api("POST", path, body)
	if err != nil {
		return "", "", err
	}
	site := out["site"].(map[string]any)
	host := strings.TrimPrefix(site["url"].(string), "http://")
	if err := waitOK(s.edge.Addr(), host, time.Minute); err != nil {
		return "", "", err
	}
	return host, site["id"].(string), nil
}

// burst sends n creates at once and returns when all n serve through the
// edge; the sites are deleted afterwards.
func (s *system) burst(ctx context.Context, n int) (time.Duration, error) {
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ids[i], errs[i] = s.createVia(ctx, "/api/app/sites", `{"name":"Burst"}`)
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	for i, err := range errs {
		if err != nil {
			return 0, err
		}
		if err := s.deleteSite(ctx, ids[i]); err != nil {
			return 0, err
		}
	}
	return d, nil
}

// waitPool waits until a pool has size ready sites.
func (s *system) waitPool(ctx context.Context, key string, size int) error {
	for {
		sites, err := s.srv.Node().Store().PooledSites()
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range sites {
			if p.Pool == key && p.Status == "ready" {
				ready++
			}
		}
		if ready >= size {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pool %s: %d of %d ready: %w", key, ready, size, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitPoolDozing waits until every ready site of a pool dozes on the
// node (a pooled site dozes sites.PoolDoze after it is made).
func (s *system) waitPoolDozing(ctx context.Context, key string) error {
	for {
		pooled, err := s.srv.Node().Store().PooledSites()
		if err != nil {
			return err
		}
		awake := 0
		for _, p := range pooled {
			if p.Pool != key || p.Status != "ready" {
				continue
			}
			if st := s.agent.Sites().Get(p.ID); st == nil || st.Depth != sites.Dozing {
				awake++
			}
		}
		if awake == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pool %s: %d sites not dozing: %w", key, awake, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitPoolGone waits until no pooled site is left.
func (s *system) waitPoolGone(ctx context.Context) error {
	for {
		sites, err := s.srv.Node().Store().PooledSites()
		if err != nil {
			return err
		}
		if len(sites) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d pooled sites left: %w", len(sites), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitJob waits for a job to succeed.
func (s *system) waitJob(ctx context.Context, id string) error {
	for {
		out, err := s.api("GET", "/api/app/jobs/"+id, "")
		if err != nil {
			return err
		}
		switch st := out["job"].(map[string]any)["status"]; st {
		case "succeeded":
			return nil
		case "failed":
			return fmt.Errorf("job %s failed: %v", id, out["job"])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deleteSite deletes a site and waits for its job.
func (s *system) deleteSite(ctx context.Context, id string) error {
	out, err := s.api("DELETE", "/api/app/sites/"+id, "")
	if err != nil {
		return err
	}
	return s.waitJob(ctx, out["jobId"].(string))
}
