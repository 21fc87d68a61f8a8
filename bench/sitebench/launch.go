package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/webhooks"
	"github.com/sandboxd/sandboxd/controlplane/webhookspec"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// launchPhases measures a template's public launch link and the demo
// webhooks:
//
//   - launch submit → signed-in landing page (wp-admin with its admin
//     bar), as a browser goes: the form's POST, the launcher's redirects,
//     the progress page's polls (every 250 ms, as its script does), the
//     one-time login and the landing page. Without a warm pool (a clone
//     per launch) and with one (a claim), alternated.
//   - webhook deliveries per second to a local receiver: the sender
//     posting signed bodies directly (baseline) next to the whole path
//     from N demo sites turning ready to N deliveries received and
//     recorded (the leader's demo loop, Raft entries, the delivery loop).
func launchPhases(ctx context.Context, sys *system, n int) error {
	src, err := sys.api("POST", "/api/app/sites", `{"name":"Launch source"}`)
	if err != nil {
		return err
	}
	srcID := src["site"].(map[string]any)["id"].(string)
	if err := sys.waitJob(ctx, src["jobId"].(string)); err != nil {
		return err
	}
	enable := `{"launchEnabled":true,"launchQuotaMode":"unlimited","launchEntryMode":"anonymous","launchExpirationMode":"none","launchLandingPath":"/wp-admin/"`
	link := func(name, extra string) (string, string, error) {
		made, err := sys.api("POST", "/api/app/templates", `{"siteId":"`+srcID+`","name":"`+name+`"}`)
		if err != nil {
			return "", "", err
		}
		id := made["template"].(map[string]any)["id"].(string)
		if err := sys.waitJob(ctx, made["jobId"].(string)); err != nil {
			return "", "", err
		}
		out, err := sys.api("PATCH", "/api/app/templates/"+id, enable+extra+"}")
		if err != nil {
			return "", "", err
		}
		return id, out["template"].(map[string]any)["launchToken"].(string), nil
	}
	_, cold, err := link("Launch cold", "")
	if err != nil {
		return err
	}
	warmID, warm, err := link("Launch warm", `,"warmPoolSize":1`)
	if err != nil {
		return err
	}

	var coldT, warmT []time.Duration
	for i := 0; i < n; i++ {
		d, siteID, err := sys.launchOnce(ctx, cold)
		if err != nil {
			return fmt.Errorf("launch without a pool: %w", err)
		}
		coldT = append(coldT, d)
		if err := sys.deleteSite(ctx, siteID); err != nil {
			return err
		}
		if err := sys.waitPool(ctx, "template:"+warmID, 1); err != nil {
			return err
		}
		d, siteID, err = sys.launchOnce(ctx, warm)
		if err != nil {
			return fmt.Errorf("launch from the pool: %w", err)
		}
		warmT = append(warmT, d)
		if err := sys.deleteSite(ctx, siteID); err != nil {
			return err
		}
	}
	fmt.Printf("  launch submit → signed-in wp-admin, %d launches each (alternated):\n", n)
	fmt.Printf("    without a warm pool (clone): p50 %s  p99 %s\n", ms(pct(coldT, .5)), ms(pct(coldT, .99)))
	fmt.Printf("    from the warm pool (claim):  p50 %s  p99 %s  (%.2fx of the clone's p50)\n", ms(pct(warmT, .5)), ms(pct(warmT, .99)),
		float64(pct(warmT, .5))/float64(pct(coldT, .5)))
	if _, err := sys.api("PATCH", "/api/app/templates/"+warmID, `{"warmPoolSize":0}`); err != nil {
		return err
	}
	return sys.webhookPhase(ctx, warm, warmID)
}

// launchOnce launches a demo as a browser would and returns the time from
// the form's submit to the signed-in landing page, and the demo's site.
func (s *system) launchOnce(ctx context.Context, token string) (time.Duration, string, error) {
	jar, _ := cookiejar.New(nil)
	edgeAddr := s.edge.Addr()
	client := &http.Client{Jar: jar, Timeout: 2 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if host, _, err := net.SplitHostPort(addr); err == nil && strings.HasSuffix(host, ".localhost") {
				addr = edgeAddr
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	page := s.srv.URL() + "/launch/" + token
	if _, err := fetchPage(ctx, client, page); err != nil {
		return 0, "", err
	}
	t0 := time.Now()
	req, _ := http.NewRequestWithContext(ctx, "POST", page, strings.NewReader(""))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for first := true; ; first = false {
		u := resp.Request.URL
		switch {
		case resp.StatusCode == 200 && strings.HasPrefix(u.Path, "/wp-admin/") && strings.Contains(string(body), "wpadminbar"):
			d := time.Since(t0)
			return d, s.demoSite(strings.Split(u.Host, ".")[0]), nil
		case resp.StatusCode == 200 && strings.HasPrefix(u.Path, "/launch/") && strings.Contains(string(body), "Preparing your demo"):
			wait := 250 * time.Millisecond
			if first {
				wait = 150 * time.Millisecond
			}
			time.Sleep(wait)
			status, err := fetchPage(ctx, client, u.String()+"/status")
			if err != nil {
				return 0, "", err
			}
			if !strings.Contains(status, `"creating"`) {
				resp, err = client.Get(u.String())
				if err != nil {
					return 0, "", err
				}
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
		default:
			return 0, "", fmt.Errorf("launch ended at %s: %d %.200s", u, resp.StatusCode, body)
		}
	}
}

// demoSite is the id of the site with a slug.
func (s *system) demoSite(slug string) string {
	sites, _, _ := s.srv.Node().Store().AllSites()
	for _, x := range sites {
		if x.Slug == slug {
			return x.ID
		}
	}
	return ""
}

func fetchPage(ctx context.Context, c *http.Client, u string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("GET %s: %d %.200s", u, resp.StatusCode, b)
	}
	return string(b), nil
}

// webhookPhase measures deliveries per second (see launchPhases).
func (s *system) webhookPhase(ctx context.Context, token, tplID string) error {
	const events, workers = 500, 32
	var got atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	if _, err := s.api("PUT", "/api/account/webhooks/demo-launches", `{"url":"`+rcv.URL+`/hook"}`); err != nil {
		return err
	}
	tpl, err := s.srv.Node().Store().Template(tplID)
	if err != nil || tpl == nil {
		return fmt.Errorf("template %s: %v", tplID, err)
	}
	owner, err := s.srv.Node().Store().Account(tpl.UserID)
	if err != nil || owner == nil {
		return fmt.Errorf("owner: %v", err)
	}
	// A node that is never dialed holds the measured demos' sites.
	node := state.Node{ID: "node-bench", Address: "http://127.0.0.1:1", BackendHost: "127.0.0.1", Status: state.NodeDown}
	if _, err := s.srv.Node().Apply(ctx, fsm.UpsertNode{Node: node}); err != nil {
		return err
	}
	sender := webhooks.NewSender([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil)
	var direct, full []float64
	for round := 0; round < 2; round++ {
		// A: the sender alone, the same number at the same concurrency.
		got.Store(0)
		t0 := time.Now()
		var wg sync.WaitGroup
		var next atomic.Int64
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= events {
					_, _ = sender.Send(ctx, webhooks.Message{URL: rcv.URL + "/hook", Secret: "whsec_bench", DeliveryID: ids.New(ids.Delivery),
						EventID: ids.New(ids.Event), Event: webhookspec.DemoReady, Body: []byte(`{"type":"demo.ready"}`)})
				}
			}()
		}
		wg.Wait()
		direct = append(direct, float64(got.Load())/time.Since(t0).Seconds())

		// B: events sites turning ready → delivered and recorded.
		got.Store(0)
		t0 = time.Now()
		var errs atomic.Int64
		next.Store(0)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= events {
					if err := s.readyDemo(ctx, tpl, owner); err != nil {
						errs.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if errs.Load() > 0 {
			return fmt.Errorf("%d demo rows refused", errs.Load())
		}
		for got.Load() < events {
			if time.Since(t0) > 5*time.Minute {
				return fmt.Errorf("%d of %d deliveries after 5 minutes", got.Load(), events)
			}
			time.Sleep(5 * time.Millisecond)
		}
		for {
			pending, _ := s.srv.Node().Store().PendingDeliveries()
			if len(pending) == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		full = append(full, events/time.Since(t0).Seconds())
	}
	fmt.Printf("  webhook deliveries/s to a local receiver, %d events, %d workers (A/B/A/B):\n", events, workers)
	for i := range direct {
		fmt.Printf("    pair %d: sender alone %.0f/s, site ready → delivered and recorded %.0f/s (%.2fx)\n",
			i+1, direct[i], full[i], full[i]/direct[i])
	}
	return nil
}

// readyDemo writes one launched demo whose site is already ready, as a
// claim does, on the never-dialed node (its job type has no runner, so
// nothing touches the site): the leader's demo loop then queues its
// demo.ready.
func (s *system) readyDemo(ctx context.Context, tpl *state.Template, owner *state.Account) error {
	now := time.Now().UTC()
	site := state.Site{ID: ids.New(ids.Site), WorkspaceID: tpl.WorkspaceID, UserID: tpl.UserID, CreatedByUserID: owner.ID,
		Name: "bench", Slug: "bench-" + ids.Random(4), Status: state.SiteReady, URL: "http://bench.localhost", PHPVersion: "8.2",
		NodeID: "node-bench", TemplateID: tpl.ID, CreatedAt: now, UpdatedAt: now}
	job, err := jobs.New("bench_noop", tpl.WorkspaceID, site.ID, nil, now)
	if err != nil {
		return err
	}
	demo := state.Demo{ID: ids.New(ids.Demo), TemplateID: tpl.ID, WorkspaceID: tpl.WorkspaceID, SiteID: site.ID, SiteURL: site.URL,
		JobID: job.ID, Visitor: ids.Random(8), CreatedAt: now}
	_, err = s.srv.Node().Apply(ctx, fsm.CreateSiteWithJob{Site: site, Job: job, Quota: state.Quota{Plan: "paid", Resource: "sites", Limit: 1 << 20},
		Launch: &state.DemoLaunch{Demo: demo, Token: tpl.Launch.Token}})
	return err
}
