package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/mirror"
)

// galleryDir holds the community gallery Blueprints the bench runs.
const galleryDir = "blueprint/testdata/gallery"

// booksPlugin stands in for the custom-post Blueprint's books.php, which
// the gallery leaves out.
const booksPlugin = `<?php
/* Plugin Name: Books */
add_action('init', function () { register_post_type('book', array('public' => true, 'label' => 'Books')); });`

// benchMirror serves what the benchmarked Blueprints fetch, as an
// operator's resource mirror would.
func benchMirror() (*mirror.Mirror, func(), error) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/custom-post/books.php") {
			fmt.Fprint(w, booksPlugin)
			return
		}
		http.NotFound(w, r)
	}))
	m, err := mirror.Parse("raw.githubusercontent.com="+srv.URL+"/raw", false)
	return m, srv.Close, err
}

// handScripts do by hand, in one PHP process, what each benchmarked
// gallery Blueprint does step by step.
var handScripts = map[string]string{
	"custom-post": `require '/wordpress/wp-load.php'; require_once ABSPATH.'wp-admin/includes/plugin.php';
if (!get_user_by('login', 'admin')) { exit(1); }
$dir = WP_PLUGIN_DIR.'/books'; if (!is_dir($dir)) { mkdir($dir, 0755, true); }
file_put_contents($dir.'/books.php', stream_get_contents(STDIN));
$r = activate_plugin('books/books.php'); if (is_wp_error($r)) { exit(1); }`,
	"posts-via-wp-cli": `require '/wordpress/wp-load.php';
if (!get_user_by('login', 'admin')) { exit(1); }
for ($i = 1; $i <= 12; $i++) {
  wp_insert_post(array('post_title' => 'Post '.$i, 'post_type' => 'post', 'post_status' => 'publish', 'post_date' => '1999-01-04 00:00:00', 'post_author' => 1));
}`,
}

// blueprintPhases measures a gallery Blueprint's run on a site against
// the same steps written by hand as one PHP script in the container
// (alternated), and a bake to a ready template against the same work
// driven step by step by a client.
func blueprintPhases(ctx context.Context, sys *system, n int) error {
	made, err := sys.api("POST", "/api/app/sites", `{"name":"Blueprint bench"}`)
	if err != nil {
		return err
	}
	siteID := made["site"].(map[string]any)["id"].(string)
	if err := sys.waitJob(ctx, made["jobId"].(string)); err != nil {
		return err
	}
	mgr := sys.agent.Sites()
	fmt.Printf("  a gallery Blueprint applied to a site (API request → run succeeded) vs the same steps as one PHP script, %d each (alternated):\n", n)
	for _, name := range []string{"custom-post", "posts-via-wp-cli"} {
		src, err := os.ReadFile(filepath.Join(galleryDir, name, "blueprint.json"))
		if err != nil {
			return err
		}
		var base, full, steps []time.Duration
		for i := 0; i < n; i++ {
			t0 := time.Now()
			res, err := mgr.Exec(ctx, siteID, []string{"php", "-r", handScripts[name]}, []byte(booksPlugin))
			if err != nil || res.ExitCode != 0 {
				return fmt.Errorf("hand script %s: %v %s", name, err, res.Stderr)
			}
			base = append(base, time.Since(t0))

			t0 = time.Now()
			body, _ := json.Marshal(map[string]any{"source": json.RawMessage(src)})
			out, err := sys.api("POST", "/api/app/sites/"+siteID+"/blueprint", string(body))
			if err != nil {
				return err
			}
			run, err := sys.waitRun(ctx, "unsaved", out["run"].(map[string]any)["id"].(string))
			if err != nil {
				return err
			}
			full = append(full, time.Since(t0))
			var sum time.Duration
			for _, s := range run["steps"].([]any) {
				sum += time.Duration(s.(map[string]any)["durationMs"].(float64)) * time.Millisecond
			}
			steps = append(steps, sum)
		}
		fmt.Printf("    %-17s hand script p50 %s | Blueprint run p50 %s (%.2fx), its steps on the node %s (%.2fx)\n", name,
			ms(pct(base, .5)), ms(pct(full, .5)), float64(pct(full, .5))/float64(pct(base, .5)),
			ms(pct(steps, .5)), float64(pct(steps, .5))/float64(pct(base, .5)))
	}
	if err := sys.deleteSite(ctx, siteID); err != nil {
		return err
	}

	// Bake: one request, against a client doing the same by hand (site
	// from the Blueprint, run, template of the site, site deleted).
	src, err := os.ReadFile(filepath.Join(galleryDir, "custom-post", "blueprint.json"))
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"name": "Bench bake", "source": json.RawMessage(src)})
	saved, err := sys.api("POST", "/api/app/blueprints", string(body))
	if err != nil {
		return err
	}
	bp := saved["blueprint"].(map[string]any)["id"].(string)
	bakes := max(2, n/2)
	var manual, baked []time.Duration
	for i := 0; i < bakes; i++ {
		t0 := time.Now()
		out, err := sys.api("POST", "/api/app/blueprints/"+bp+"/sites", `{"name":"Manual bake"}`)
		if err != nil {
			return err
		}
		if _, err := sys.waitRun(ctx, bp, out["run"].(map[string]any)["id"].(string)); err != nil {
			return err
		}
		site := out["site"].(map[string]any)["id"].(string)
		tpl, err := sys.api("POST", "/api/app/templates", fmt.Sprintf(`{"siteId":%q,"name":"Manual %d"}`, site, i))
		if err != nil {
			return err
		}
		if err := sys.waitTemplate(ctx, tpl["template"].(map[string]any)["id"].(string)); err != nil {
			return err
		}
		manual = append(manual, time.Since(t0))
		if err := sys.deleteSite(ctx, site); err != nil {
			return err
		}

		t0 = time.Now()
		out, err = sys.api("POST", "/api/app/blueprints/"+bp+"/bake", fmt.Sprintf(`{"name":"Baked %d"}`, i))
		if err != nil {
			return err
		}
		if err := sys.waitTemplate(ctx, out["template"].(map[string]any)["id"].(string)); err != nil {
			return err
		}
		baked = append(baked, time.Since(t0))
	}
	fmt.Printf("  bake → template ready, %d each (alternated): by hand (site, run, template) p50 %s | one bake request p50 %s (%.2fx)\n",
		bakes, ms(pct(manual, .5)), ms(pct(baked, .5)), float64(pct(baked, .5))/float64(pct(manual, .5)))
	return nil
}

// waitRun polls a Blueprint run until it ends; a failed run is an error.
func (s *system) waitRun(ctx context.Context, blueprintID, runID string) (map[string]any, error) {
	for {
		out, err := s.api("GET", "/api/app/blueprints/"+blueprintID+"/runs/"+runID, "")
		if err != nil {
			return nil, err
		}
		run := out["run"].(map[string]any)
		switch run["status"] {
		case "succeeded":
			return run, nil
		case "failed":
			return nil, fmt.Errorf("run %s failed: %v", runID, run["failureReason"])
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitTemplate polls a template until it is ready.
func (s *system) waitTemplate(ctx context.Context, id string) error {
	for {
		out, err := s.api("GET", "/api/app/templates/"+id, "")
		if err != nil {
			return err
		}
		switch st := out["template"].(map[string]any)["status"]; st {
		case "ready":
			return nil
		case "failed":
			return fmt.Errorf("template %s failed: %v", id, out["template"].(map[string]any)["failureReason"])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
