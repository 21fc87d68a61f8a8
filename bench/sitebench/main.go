// Command sitebench measures the first real sandbox on this machine, in
// one run, against baselines measured in the same run and alternated with
// it (baseline, subject, baseline, subject …):
//
//   - create → first 200 through the edge (p50/p95 over -sites sites)
//     next to the same provisioning steps called directly on the agent
//     (a clone of the node's stock install: overlay, database copy, URL
//     and identity, container, first request), with no API, Raft,
//     scheduler, job dispatch, RPC or edge in between;
//   - requests/s of a WordPress page through the edge next to direct to
//     the site's port;
//   - idle memory per site, from the containers' cgroups;
//   - plugin deploy → its output served, through the API, job and edge,
//     next to the agent's install called directly;
//   - templates and warm pools (templates.go);
//   - launch links and webhook deliveries (launch.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/logwriter"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/apiclient"
	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/launcher"
	"github.com/sandboxd/sandboxd/controlplane/server"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/pki"
)

func main() {
	// The agent runs in this process: a shim starts this binary as a
	// site's container logger.
	if logwriter.Invoked() {
		os.Exit(logwriter.Main(os.Args[1:]))
	}
	n := flag.Int("sites", 10, "sites per create measurement")
	dur := flag.Duration("duration", 5*time.Second, "length of each throughput run")
	conc := flag.Int("concurrency", 8, "concurrent clients in throughput runs")
	flag.StringVar(&sandbox, "runtime", agent.SandboxRunc, "what sites run under: runc or gvisor")
	flag.IntVar(&claims, "claims", 20, "warm-pool claims measured")
	flag.IntVar(&memSites, "mem-sites", 50, "clones of one template whose idle memory is measured")
	flag.BoolVar(&withTemplates, "templates", true, "measure templates and warm pools too")
	flag.BoolVar(&onlyTemplates, "only-templates", false, "measure templates and pools only (claims and bursts from dozing pools)")
	flag.BoolVar(&onlyLaunch, "only-launch", false, "measure launch links and webhooks only")
	flag.BoolVar(&onlyBlueprints, "only-blueprints", false, "measure Blueprint runs and bakes only")
	flag.BoolVar(&onlyImports, "only-imports", false, "measure import restores only")
	flag.BoolVar(&onlyAccess, "only-access", false, "measure SSH sessions, Git deploys and custom domains only")
	flag.BoolVar(&onlyAgents, "only-agents", false, "measure the AI-agent toolkit only: checkpoints, restores and forks against copies by hand, the MCP loop against REST")
	flag.IntVar(&agentRounds, "agent-rounds", 10, "rounds of each AI-agent toolkit measurement")
	flag.BoolVar(&onlySleep, "only-sleep", false, "measure idle sites' sleep only: wake latency, page time by profile, memory by depth")
	flag.IntVar(&sleepRounds, "sleep-rounds", 20, "wakes measured from each depth")
	flag.IntVar(&sleepSites, "sleep-sites", 40, "sites whose memory is read awake, dozing and asleep")
	flag.IntVar(&densitySites, "density-sites", 0, "sites held on the node at once, a tenth of them awake and the rest asleep (0: none)")
	flag.StringVar(&agentLog, "agent-log", "", "write the agent's log (JSON lines: each site's phase times among them) to this file")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (control plane and agent) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "sitebench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*n, *dur, *conc); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "sitebench:", err)
		os.Exit(1)
	}
}

// sandbox is the agent's runtime class for the run.
var sandbox string

// What the template phases measure.
var (
	claims, memSites int
	withTemplates    bool
	onlyLaunch       bool
	onlyTemplates    bool
	onlyBlueprints   bool
	onlyImports      bool
	onlyAccess       bool
	onlySleep        bool
	onlyAgents       bool
	agentRounds      int
	sleepRounds      int
	sleepSites       int
	densitySites     int
	agentLog         string
)

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

type system struct {
	srv   *server.Server
	agent *agent.Agent
	edge  *edge.Edge
	token string
	dir   string
	// closeMirror stops the resource mirror Blueprints fetch from.
	closeMirror func()
}

func start(ctx context.Context) (*system, error) {
	dir, err := os.MkdirTemp("/tmp", "sbx-bench-")
	if err != nil {
		return nil, err
	}
	edgeAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(edgeAddr)
	var tlsAddr string
	if onlyAccess {
		if tlsAddr, err = freePort(); err != nil {
			return nil, err
		}
		if access, err = setUpAccess(edgeAddr, tlsAddr); err != nil {
			return nil, err
		}
	}
	cfg := server.DefaultConfig()
	cfg.DataDir, cfg.APIAddr = filepath.Join(dir, "cp"), "127.0.0.1:0"
	cfg.SitePort, _ = strconv.Atoi(port)
	log := slog.New(slog.DiscardHandler)
	cfg.Logger = log
	cfg.RateLimits = api.RateLimits{} // the bench is one client writing fast, on purpose
	cfg.LaunchLimits = launcher.Limits{}
	cfg.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} // the webhook receiver
	m, closeMirror, err := benchMirror()
	if err != nil {
		return nil, err
	}
	cfg.ResourceMirror = m
	alog := log
	if agentLog != "" {
		f, err := os.Create(agentLog)
		if err != nil {
			return nil, err
		}
		alog = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	acfg := agent.Config{DataDir: filepath.Join(dir, "agent"), Logger: alog, Sandbox: sandbox}
	ecfg := edge.Config{Addr: edgeAddr, Logger: log}
	if access != nil {
		ecfg.TLSAddr = tlsAddr
		access.configure(&cfg, &acfg, &ecfg)
	}
	s, err := server.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	if err := s.WaitLeader(ctx); err != nil {
		return nil, err
	}
	token, err := s.EnsureDevOwner(ctx)
	if err != nil {
		return nil, err
	}
	acfg.ControlPlane = []string{s.ClusterURL()}
	if acfg.JoinToken, err = s.LocalJoinToken(ctx, filepath.Join(acfg.DataDir, "tls"), pki.RoleAgent); err != nil {
		return nil, err
	}
	a, err := agent.New(ctx, acfg)
	if err != nil {
		return nil, err
	}
	a.Start()
	<-a.Registered()
	<-a.ImagesImported() // background imports would skew every figure
	ecfg.ControlPlane = []string{s.ClusterURL()}
	if _, ecfg.Creds, err = s.LocalMember(ctx, filepath.Join(dir, "edge", "tls"), pki.RoleEdge, "edge-bench"); err != nil {
		return nil, err
	}
	e, err := edge.New(ecfg)
	if err != nil {
		return nil, err
	}
	e.Start()
	<-e.Ready()
	return &system{srv: s, agent: a, edge: e, token: token, dir: dir, closeMirror: closeMirror}, nil
}

func (s *system) stop() {
	s.edge.Close()
	s.agent.Close()
	s.srv.Close()
	s.closeMirror()
	if access != nil {
		access.t.done()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = agent.Purge(ctx, filepath.Join(s.dir, "agent"), "")
	_ = os.RemoveAll(s.dir)
}

var client = &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// get sends a GET to addr with the Host header of the site.
func get(addr, host string) (int, error) {
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func waitOK(addr, host string, deadline time.Duration) error {
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		if code, err := get(addr, host); err == nil && code == 200 {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("no 200 from %s for %s", host, addr)
}

// apiClient calls the control plane as the bench's owner.
func (s *system) apiClient() *apiclient.Client { return apiclient.New(s.srv.URL(), s.token) }

func (s *system) api(method, path, body string) (map[string]any, error) {
	var b any
	if body != "" {
		b = body
	}
	r, err := s.apiClient().Call(context.Background(), method, path, b)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return r.Body, nil
}

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%6.0f ms", float64(d.Microseconds())/1000) }

func run(n int, dur time.Duration, conc int) error {
	// A node of thousands of sites takes about a second a site to make
	// and to delete.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute+time.Duration(densitySites)*2*time.Second)
	defer cancel()
	sys, err := start(ctx)
	if err != nil {
		return err
	}
	defer sys.stop()
	if onlyLaunch {
		fmt.Println("launch links and webhooks")
		return launchPhases(ctx, sys, n)
	}
	if onlyBlueprints {
		fmt.Println("Blueprints")
		return blueprintPhases(ctx, sys, n)
	}
	if onlyImports {
		fmt.Println("Imports")
		return importPhases(ctx, sys, n)
	}
	if onlyAccess {
		fmt.Println("SSH, Git deploy, custom domains")
		return accessPhases(ctx, sys, n)
	}
	if onlyTemplates {
		fmt.Println("Templates and pools")
		return templatePhases(ctx, sys, n, claims, memSites)
	}
	if onlyAgents {
		fmt.Println("AI-agent toolkit")
		return agentPhases(ctx, sys, agentRounds)
	}
	if onlySleep {
		fmt.Println("Idle sites' sleep")
		return sleepPhases(ctx, sys, sleepRounds, sleepSites, densitySites, densitySites/10)
	}
	mgr := sys.agent.Sites()
	edgeAddr := sys.edge.Addr()

	// Warm-up: the first site pays one-off costs (page cache, opcache of
	// the image files) that neither side should carry.
	if _, err := sys.agent.Templates().Create(ctx, sites.CreateRequest{ID: "site_warmup0", Slug: "warmup", PHPVersion: "8.2", URL: "http://warmup.localhost",
		AdminUser: "admin", AdminEmail: "a@example.com"}, ""); err != nil {
		return err
	}
	_, _ = mgr.Delete(ctx, "site_warmup0")

	// Baseline and subject alternate (A B A B …), so drift in the
	// machine's load falls on both. Each baseline site is deleted before
	// the next API create: both sides see the same sites running.
	var base, full []time.Duration
	var ids []string
	var host, direct string
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("site_base%04d", i)
		slug := fmt.Sprintf("base%d", i)
		t0 := time.Now()
		st, err := sys.agent.Templates().Create(ctx, sites.CreateRequest{ID: id, Slug: slug, PHPVersion: "8.2", URL: "http://" + slug + ".localhost",
			AdminUser: "admin", AdminEmail: "a@example.com"}, "")
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
		out, err := sys.api("POST", "/api/app/sites", `{"name":"Bench"}`)
		if err != nil {
			return err
		}
		site := out["site"].(map[string]any)
		u := strings.TrimPrefix(site["url"].(string), "http://")
		if err := waitOK(edgeAddr, u, time.Minute); err != nil {
			return err
		}
		full = append(full, time.Since(t0))
		ids = append(ids, site["id"].(string))
		host = u
	}
	last := mgr.Get(ids[len(ids)-1])
	direct = last.Addr()

	// Idle memory of the n sites, after they settle.
	time.Sleep(5 * time.Second)
	rss, usage, counted := idleMemory(agent.Namespace(filepath.Join(sys.dir, "agent")), ids)

	// Direct and through the edge alternate, twice each, half the time
	// each. Idle keep-alive connections pin Apache prefork workers: close
	// each run's connections before the next one, as separate clients would.
	var directRPS, edgeRPS float64
	for range 2 {
		directRPS += throughput(direct, host, dur/2, conc) / 2
		client.CloseIdleConnections()
		edgeRPS += throughput(edgeAddr, host, dur/2, conc) / 2
		client.CloseIdleConnections()
	}

	client.CloseIdleConnections()
	deployAPI, deployBase, err := measureDeploys(ctx, sys, mgr, edgeAddr, ids[len(ids)-1], ids[0], n)
	if err != nil {
		return err
	}

	fmt.Printf("sitebench: %d sites per measurement, PHP 8.2, WordPress %s, runtime %s\n", n, last.WordPressVersion, sandbox)
	fmt.Printf("  create → first 200, baseline (agent steps by hand): p50 %s  p95 %s\n", ms(pct(base, .5)), ms(pct(base, .95)))
	fmt.Printf("  create → first 200, API → edge:                      p50 %s  p95 %s\n", ms(pct(full, .5)), ms(pct(full, .95)))
	fmt.Printf("  ratio API/baseline:                                  p50 %6.2fx   p95 %6.2fx  (goal <= 1.5x)\n",
		pct(full, .5).Seconds()/pct(base, .5).Seconds(), pct(full, .95).Seconds()/pct(base, .95).Seconds())
	fmt.Printf("  WordPress home page, %d clients, %s: direct %7.1f req/s, through the edge %7.1f req/s, ratio %.2fx (goal >= 0.95x)\n",
		conc, dur, directRPS, edgeRPS, edgeRPS/directRPS)
	fmt.Printf("  plugin deploy → output served, baseline (agent install called directly): p50 %s  p95 %s\n", ms(pct(deployBase, .5)), ms(pct(deployBase, .95)))
	fmt.Printf("  plugin deploy → output served, API → job → edge:                      p50 %s  p95 %s\n", ms(pct(deployAPI, .5)), ms(pct(deployAPI, .95)))
	fmt.Printf("  ratio API/baseline:                                                   p50 %6.2fx   p95 %6.2fx\n",
		pct(deployAPI, .5).Seconds()/pct(deployBase, .5).Seconds(), pct(deployAPI, .95).Seconds()/pct(deployBase, .95).Seconds())
	if counted > 0 {
		fmt.Printf("  idle memory per site (%d sites, cgroup): rss %.1f MiB, usage incl. page cache %.1f MiB\n",
			counted, rss/float64(counted)/(1<<20), usage/float64(counted)/(1<<20))
	} else {
		fmt.Println("  idle memory per site: cgroup memory files not found")
	}
	if !withTemplates {
		return nil
	}
	for _, id := range ids {
		if err := sys.deleteSite(ctx, id); err != nil {
			return err
		}
	}
	if err := templatePhases(ctx, sys, n, claims, memSites); err != nil {
		return err
	}
	fmt.Println("launch links and webhooks")
	if err := launchPhases(ctx, sys, n); err != nil {
		return err
	}
	fmt.Println("Blueprints")
	return blueprintPhases(ctx, sys, n)
}

func throughput(addr, host string, dur time.Duration, conc int) float64 {
	var n, bad atomic.Int64
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				code, err := get(addr, host)
				if err == nil && code == 200 {
					n.Add(1)
				} else if bad.Add(1) == 1 {
					fmt.Fprintf(os.Stderr, "sitebench: %s answered %d %v\n", addr, code, err)
				}
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

// idleMemory sums rss and usage of the sites' container cgroups (cgroup
// v1 memory controller, /<namespace>/<container id>).
func idleMemory(ns string, ids []string) (rss, usage float64, counted int) {
	for _, id := range ids {
		dir := filepath.Join("/sys/fs/cgroup/memory", ns, "wp-"+id)
		stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(stat), "\n") {
			if v, ok := strings.CutPrefix(line, "total_rss "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				rss += f
			}
		}
		u, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
		if err == nil {
			f, _ := strconv.ParseFloat(strings.TrimSpace(string(u)), 64)
			usage += f
		}
		counted++
	}
	return
}
