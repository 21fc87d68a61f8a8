package e2e

import (
	"bufio"
	"strconv"
	"strings"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
)

// sample reads one sample (its exact name and labels) from a scrape
// text; ok is false when it is absent.
func sample(text, series string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// TestFleetMetrics runs a dev system with the edge's operator listener,
// makes and visits a site, and reads each component's metrics: the
// server's on its API, the agent's on its AgentService listener, the
// edge's on --edge-metrics-addr only. None of them, nor health, shows an
// address.
func TestFleetMetrics(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	dir := devDataDir(t)
	api, edgeAddr, metricsAddr, agentMetrics := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	d := startDev(t, dir, api, edgeAddr, "--edge-metrics-addr", metricsAddr, "--agent-metrics-addr", agentMetrics)
	created := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Metered"}).Must(t, 202)
	if job := d.waitJob(t, created.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("create job: %v", job)
	}
	if code, _ := served(t, created.Str("site.url")+"/"); code != 200 {
		t.Fatalf("the site answered %d", code)
	}

	scrape := func(url string) string {
		code, body := fetch(t, url)
		if code != 200 {
			t.Fatalf("%s: %d %.200s", url, code, body)
		}
		return body
	}
	atLeast := func(what, url, series string, want float64) {
		t.Helper()
		var got float64
		st.WaitFor(t, 30*time.Second, what, func() bool {
			got, _ = sample(scrape(url), series)
			return got >= want
		})
	}
	server, agent, edge := "http://"+api+"/metrics", "http://"+agentMetrics+"/metrics", "http://"+metricsAddr+"/metrics"
	atLeast("a ready site", server, `sandboxd_sites{status="ready"}`, 1)
	atLeast("a ready node", server, `sandboxd_nodes{status="ready"}`, 1)
	atLeast("a timed create", server, `sandboxd_job_duration_seconds_count{result="succeeded",type="create_site"}`, 1)
	atLeast("heartbeats", server, `sandboxd_node_heartbeats_total{result="ok"}`, 1)
	atLeast("the agent's ready site", agent, `sandboxd_agent_sites{state="ready"}`, 1)
	atLeast("a container start", agent, `sandboxd_agent_container_starts_total{result="ok"}`, 1)
	atLeast("the agent's heartbeats", agent, `sandboxd_agent_heartbeats_total{result="ok"}`, 1)
	atLeast("a proxied page", edge, `sandboxd_edge_request_duration_seconds_count{code_class="2xx",route="site"}`, 1)

	// The edge's public port serves sites only.
	for _, path := range []string{"/metrics", "/healthz"} {
		if code, body := fetch(t, "http://"+edgeAddr+path); code != 404 || strings.Contains(body, "sandboxd_") {
			t.Errorf("public edge %s: %d %.200s", path, code, body)
		}
	}
	for _, url := range []string{server, "http://" + api + "/healthz", agent, edge, "http://" + metricsAddr + "/healthz"} {
		if found := promtest.Addresses(scrape(url)); len(found) > 0 {
			t.Errorf("%s shows addresses %q", url, found)
		}
	}
}
