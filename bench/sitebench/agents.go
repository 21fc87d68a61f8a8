package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/internal/sitepath"
)

// The AI-agent toolkit: checkpoints and restores (of a fresh site and of
// one with 10,000 posts) against copying the same site's files and
// tables by hand; a fork against a template and a clone of it; the
// agent's loop end to end through MCP against the same loop over REST.
// Baseline and subject alternate, round by round.

// bandPlugin is the plugin the loop installs.
const bandPlugin = `<?php
/*
Plugin Name: Bench Band
*/
add_action('wp_footer', function () { echo '<div style="position:fixed;top:0;left:0;right:0;height:80px;background:#ff00ff"></div>'; });
`

func agentPhases(ctx context.Context, sys *system, rounds int) error {
	mgr := sys.agent.Sites()
	mk := func(id, slug string) (*sites.Site, error) {
		s, err := sys.agent.Templates().Create(ctx, sites.CreateRequest{ID: id, Slug: slug, PHPVersion: "8.2", URL: "http://" + slug + ".localhost",
			AdminUser: "admin", AdminEmail: "a@example.com"}, "")
		if err != nil {
			return nil, err
		}
		return s, waitOK(s.Addr(), slug+".localhost", time.Minute)
	}
	fresh, err := mk("site_cpfresh01", "cpfresh")
	if err != nil {
		return err
	}
	defer mgr.Delete(context.WithoutCancel(ctx), fresh.ID)
	big, err := mk("site_cpbig0001", "cpbig")
	if err != nil {
		return err
	}
	defer mgr.Delete(context.WithoutCancel(ctx), big.ID)
	if err := addPosts(ctx, mgr, big.ID, 10000); err != nil {
		return err
	}
	for _, s := range []*sites.Site{fresh, big} {
		label := "a fresh site"
		if s == big {
			label = "a site of 10,000 posts"
		}
		if err := checkpointRounds(ctx, sys, s, label, rounds); err != nil {
			return err
		}
	}
	if err := forkRounds(ctx, sys, fresh, rounds); err != nil {
		return err
	}
	return loopRounds(ctx, sys, rounds)
}

// addPosts fills a site's database with n posts of about a kilobyte,
// each with two meta rows, over the site's own account.
func addPosts(ctx context.Context, mgr *sites.Manager, id string, n int) error {
	body := strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 18)
	for i := 0; i < n; i += 200 {
		var posts, meta []string
		for j := i; j < min(i+200, n); j++ {
			posts = append(posts, fmt.Sprintf("(1,NOW(),NOW(),'%s %d','Post %d','','publish','open','open','','post-%d','','',NOW(),NOW(),'',0,'',0,'post','',0)",
				body, j, j, j))
			meta = append(meta, fmt.Sprintf("(%d,'_bench_a','%s'),(%d,'_bench_b','value %d')", j+10, strings.Repeat("x", 100), j+10, j))
		}
		for _, q := range []string{"INSERT INTO wp_posts (post_author,post_date,post_date_gmt,post_content,post_title,post_excerpt,post_status," +
			"comment_status,ping_status,post_password,post_name,to_ping,pinged,post_modified,post_modified_gmt,post_content_filtered,post_parent," +
			"guid,menu_order,post_type,post_mime_type,comment_count) VALUES " + strings.Join(posts, ","),
			"INSERT INTO wp_postmeta (post_id,meta_key,meta_value) VALUES " + strings.Join(meta, ",")} {
			if _, err := mgr.RunSQL(ctx, id, q, 0); err != nil {
				return fmt.Errorf("posts: %w", err)
			}
		}
	}
	return nil
}

// copyByHand copies a site's files (its WordPress tree, as it reads) and
// its tables (CREATE … LIKE, INSERT … SELECT), as one would without
// checkpoints; undo removes the copies.
func copyByHand(ctx context.Context, mgr *sites.Manager, id, tmp string) (undo func(), err error) {
	dst := filepath.Join(tmp, "files")
	if out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=never", filepath.Join(mgr.Data(id), "wordpress"), dst).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cp: %v: %s", err, out)
	}
	res, err := mgr.RunSQL(ctx, id, "SHOW TABLES", 0)
	if err != nil {
		return nil, err
	}
	var copies []string
	undo = func() {
		os.RemoveAll(dst)
		for _, c := range copies {
			_, _ = mgr.RunSQL(context.WithoutCancel(ctx), id, "DROP TABLE IF EXISTS `"+c+"`", 0)
		}
	}
	for _, r := range res.Rows {
		t := *r[0]
		if strings.HasPrefix(t, "bk_") {
			continue
		}
		c := "bk_" + t
		copies = append(copies, c)
		for _, q := range []string{"CREATE TABLE `" + c + "` LIKE `" + t + "`", "INSERT INTO `" + c + "` SELECT * FROM `" + t + "`"} {
			if _, err := mgr.RunSQL(ctx, id, q, 0); err != nil {
				undo()
				return nil, err
			}
		}
	}
	return undo, nil
}

func checkpointRounds(ctx context.Context, sys *system, s *sites.Site, label string, rounds int) error {
	mgr := sys.agent.Sites()
	tmp, err := os.MkdirTemp(sys.dir, "byhand-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	host := strings.TrimPrefix(s.URL, "http://")
	var byHand, made, restored []time.Duration
	for i := range rounds {
		t0 := time.Now()
		undo, err := copyByHand(ctx, mgr, s.ID, tmp)
		if err != nil {
			return err
		}
		byHand = append(byHand, time.Since(t0))
		undo()

		id := fmt.Sprintf("cp_bench%04d", i)
		t0 = time.Now()
		if _, err := mgr.MakeCheckpoint(ctx, s.ID, id); err != nil {
			return err
		}
		made = append(made, time.Since(t0))
		t0 = time.Now()
		if _, err := mgr.RestoreCheckpoint(ctx, s.ID, id); err != nil {
			return err
		}
		if err := waitOK(s.Addr(), host, time.Minute); err != nil {
			return err
		}
		restored = append(restored, time.Since(t0))
		if err := mgr.DeleteCheckpoint(s.ID, id); err != nil {
			return err
		}
	}
	fmt.Printf("  %s, %d rounds:\n", label, rounds)
	fmt.Printf("    copy of files and tables by hand (baseline): p50 %s  p99 %s\n", ms(pct(byHand, .5)), ms(pct(byHand, .99)))
	fmt.Printf("    checkpoint:                                  p50 %s  p99 %s  ratio p50 %5.2fx (goal p50 <= 300 ms)\n",
		ms(pct(made, .5)), ms(pct(made, .99)), pct(made, .5).Seconds()/pct(byHand, .5).Seconds())
	fmt.Printf("    restore → first 200:                         p50 %s  p99 %s  ratio p50 %5.2fx (goal p50 <= 500 ms)\n",
		ms(pct(restored, .5)), ms(pct(restored, .99)), pct(restored, .5).Seconds()/pct(byHand, .5).Seconds())
	return nil
}

func forkRounds(ctx context.Context, sys *system, src *sites.Site, rounds int) error {
	mgr, tpls := sys.agent.Sites(), sys.agent.Templates()
	var viaTemplate, forked []time.Duration
	for i := range rounds {
		tpl := fmt.Sprintf("tpl_benchfork%03d", i)
		slug := fmt.Sprintf("viatpl%d", i)
		t0 := time.Now()
		if _, err := tpls.Freeze(ctx, src.ID, tpl); err != nil {
			return err
		}
		s, err := tpls.Create(ctx, sites.CreateRequest{ID: fmt.Sprintf("site_viatpl%03d", i), Slug: slug, PHPVersion: "8.2",
			URL: "http://" + slug + ".localhost", AdminUser: "admin", AdminEmail: "a@example.com"}, tpl)
		if err != nil {
			return err
		}
		if err := waitOK(s.Addr(), slug+".localhost", time.Minute); err != nil {
			return err
		}
		viaTemplate = append(viaTemplate, time.Since(t0))
		if _, err := mgr.Delete(ctx, s.ID); err != nil {
			return err
		}
		if _, err := tpls.Delete(ctx, tpl); err != nil {
			return err
		}

		slug = fmt.Sprintf("fork%d", i)
		t0 = time.Now()
		f, err := mgr.Fork(ctx, src.ID, sites.CreateRequest{ID: fmt.Sprintf("site_fork%04d", i), Slug: slug, URL: "http://" + slug + ".localhost",
			AdminUser: "admin", AdminEmail: "a@example.com"})
		if err != nil {
			return err
		}
		if err := waitOK(f.Addr(), slug+".localhost", time.Minute); err != nil {
			return err
		}
		forked = append(forked, time.Since(t0))
		if _, err := mgr.Delete(ctx, f.ID); err != nil {
			return err
		}
	}
	fmt.Printf("  fork → first 200, %d rounds:\n", rounds)
	fmt.Printf("    template of the site, then a site from it (baseline): p50 %s  p99 %s\n", ms(pct(viaTemplate, .5)), ms(pct(viaTemplate, .99)))
	fmt.Printf("    fork:                                                 p50 %s  p99 %s  ratio p50 %5.2fx (goal p50 <= 1 s)\n",
		ms(pct(forked, .5)), ms(pct(forked, .99)), pct(forked, .5).Seconds()/pct(viaTemplate, .5).Seconds())
	return nil
}

// bearerTransport adds the bench owner's token.
type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func loopRounds(ctx context.Context, sys *system, rounds int) error {
	c := mcp.NewClient(&mcp.Implementation{Name: "sitebench", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: sys.srv.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport(sys.token)}}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	var viaREST, viaMCP []time.Duration
	for i := range rounds {
		t0 := time.Now()
		if err := restLoop(ctx, sys, i); err != nil {
			return fmt.Errorf("REST loop: %w", err)
		}
		viaREST = append(viaREST, time.Since(t0))
		t0 = time.Now()
		if err := mcpLoop(ctx, cs, i); err != nil {
			return fmt.Errorf("MCP loop: %w", err)
		}
		viaMCP = append(viaMCP, time.Since(t0))
	}
	fmt.Printf("  the agent loop (create, checkpoint, plugin, screenshot, restore, delete), %d rounds:\n", rounds)
	fmt.Printf("    over REST (baseline): p50 %s  p99 %s\n", ms(pct(viaREST, .5)), ms(pct(viaREST, .99)))
	fmt.Printf("    over MCP:             p50 %s  p99 %s  ratio p50 %5.2fx (goal p50 <= 3 s)\n",
		ms(pct(viaMCP, .5)), ms(pct(viaMCP, .99)), pct(viaMCP, .5).Seconds()/pct(viaREST, .5).Seconds())
	return nil
}

func mcpLoop(ctx context.Context, cs *mcp.ClientSession, i int) error {
	call := func(name string, args map[string]any) (map[string]any, error) {
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return nil, err
		}
		if r.IsError {
			return nil, fmt.Errorf("%s: %s", name, r.Content[0].(*mcp.TextContent).Text)
		}
		m, _ := r.StructuredContent.(map[string]any)
		return m, nil
	}
	made, err := call("site_create", map[string]any{"name": fmt.Sprintf("MCP loop %d", i)})
	if err != nil {
		return err
	}
	id := made["site"].(map[string]any)["id"].(string)
	cp, err := call("checkpoint_create", map[string]any{"siteId": id})
	if err != nil {
		return err
	}
	for _, step := range []struct {
		name string
		args map[string]any
	}{
		{"file_write", map[string]any{"siteId": id, "path": "wp-content/plugins/band/band.php", "text": bandPlugin}},
		{"plugin_activate", map[string]any{"siteId": id, "slug": "band", "active": true}},
		{"screenshot", map[string]any{"siteId": id}},
		{"checkpoint_restore", map[string]any{"siteId": id, "checkpointId": cp["checkpoint"].(map[string]any)["id"]}},
		{"site_delete", map[string]any{"siteId": id}},
	} {
		if _, err := call(step.name, step.args); err != nil {
			return err
		}
	}
	return nil
}

// restLoop is the same loop over REST, polling its jobs as a client does.
func restLoop(ctx context.Context, sys *system, i int) error {
	wait := func(job string) error {
		for {
			out, err := sys.api("GET", "/api/app/jobs/"+job, "")
			if err != nil {
				return err
			}
			switch out["job"].(map[string]any)["status"] {
			case "succeeded":
				return nil
			case "failed":
				return fmt.Errorf("job %s failed: %v", job, out["job"])
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	made, err := sys.api("POST", "/api/app/sites", fmt.Sprintf(`{"name":"REST loop %d"}`, i))
	if err != nil {
		return err
	}
	id := made["site"].(map[string]any)["id"].(string)
	if err := wait(made["jobId"].(string)); err != nil {
		return err
	}
	cp, err := sys.api("POST", "/api/app/sites/"+id+"/checkpoints", `{}`)
	if err != nil {
		return err
	}
	cpID := cp["checkpoint"].(map[string]any)["id"].(string)
	if _, err := sys.api("POST", "/api/app/sites/"+id+"/files/write?path="+sitepath.Encode("wp-content/plugins/band/band.php"),
		fmt.Sprintf(`{"contentBase64":%q}`, base64.StdEncoding.EncodeToString([]byte(bandPlugin)))); err != nil {
		return err
	}
	if _, err := sys.api("POST", "/api/app/sites/"+id+"/php", `{"code":"<?php require 'wp-load.php'; require_once ABSPATH . 'wp-admin/includes/plugin.php'; activate_plugin('band/band.php');"}`); err != nil {
		return err
	}
	shot, err := sys.api("POST", "/api/app/sites/"+id+"/screenshot", `{}`)
	if err != nil {
		return err
	}
	// The picture itself, as the MCP tool hands it over.
	resp, err := client.Get(shot["screenshot"].(map[string]any)["url"].(string))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("screenshot URL: %d", resp.StatusCode)
	}
	rs, err := sys.api("POST", "/api/app/sites/"+id+"/checkpoints/"+cpID+"/restore", `{}`)
	if err != nil {
		return err
	}
	if err := wait(rs["jobId"].(string)); err != nil {
		return err
	}
	del, err := sys.api("DELETE", "/api/app/sites/"+id, "")
	if err != nil {
		return err
	}
	return wait(del["jobId"].(string))
}
