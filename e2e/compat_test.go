package e2e

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestOldAgentOnNewServer runs a node agent of the previous protocol
// release (e2e/testdata/oldagent: its generated code frozen from then)
// against the current server and edge: it joins, registers, takes a
// site, which the edge serves (straight to its backend: the old agent
// has no ingress); what it cannot do (snapshots) fails with a clear
// reason; the site is deleted as usual.
func TestOldAgentOnNewServer(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	old := filepath.Join(t.TempDir(), "oldagent")
	build := exec.Command("go", "build", "-o", old, "./e2e/testdata/oldagent")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the old agent: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "s")
	api, cluster := freeAddr(t), freeAddr(t)
	start(t, nil, "server", "--data-dir", dir, "--api-addr", api, "--cluster-addr", cluster, "--raft-addr", freeAddr(t),
		"--sandbox-domain", "compat.test", "--site-port", "80", "--snapshot-every", "0")
	operator := []string{"SANDBOXD_OPERATOR_TOKEN=" + func() string {
		st.WaitFor(t, time.Minute, "the operator token", func() bool { _, err := run(t, nil, "admin", "nodes", "--data-dir", dir); return err == nil })
		return readKey(t, filepath.Join(dir, "operator-token"))
	}()}
	a := startCmd(t, []string{"SANDBOXD_JOIN_TOKEN=" + joinToken(t, dir, "agent", "node-old")}, old, "--control-plane", "https://"+cluster,
		"--node-id", "node-old", "--data-dir", t.TempDir())
	a.waitLine(t, "old agent: registered")
	edgeAddr := freeAddr(t)
	e := start(t, []string{"SANDBOXD_JOIN_TOKEN=" + joinToken(t, dir, "edge", "edge-1")}, "edge", "--id", "edge-1", "--data-dir", t.TempDir(),
		"--control-plane", "https://"+cluster, "--addr", edgeAddr)
	e.waitLine(t, "sandboxd edge:")

	nodes, err := run(t, operator, "admin", "nodes", "--data-dir", dir)
	if err != nil || !strings.Contains(nodes, "node-old\tready") || !strings.Contains(nodes, "0.0.9-old") {
		t.Fatalf("nodes: %v %s", err, nodes)
	}
	if _, err := run(t, operator, "admin", "create-account", "--data-dir", dir, "--email", "old@example.com", "--plan", "paid"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, operator, "admin", "create-token", "--data-dir", dir, "--email", "old@example.com")
	if err != nil {
		t.Fatal(err)
	}
	owner := st.NewClient(t, "http://"+api, lastLine(out))
	r := owner.Do("POST", "/api/app/sites", map[string]any{"name": "On an old node"}).Must(t, 202)
	id, url := r.Str("site.id"), r.Str("site.url")
	waitJobDone := func(job string) map[string]any {
		var j map[string]any
		st.WaitFor(t, time.Minute, "job "+job, func() bool {
			j, _ = owner.Do("GET", "/api/app/jobs/"+job, nil).Must(t, 200).Get("job").(map[string]any)
			return j["status"] == "succeeded" || j["status"] == "failed"
		})
		return j
	}
	if j := waitJobDone(r.Str("jobId")); j["status"] != "succeeded" {
		t.Fatalf("create on the old agent: %v", j)
	}
	host := strings.TrimPrefix(url, "http://")
	st.WaitFor(t, 30*time.Second, "the edge serving the old agent's site", func() bool {
		code, body := fetchHost(t, "http://"+edgeAddr+"/", host)
		return code == 200 && strings.Contains(body, "old agent's site at "+host)
	})
	snap := st.NewClient(t, "http://"+api, strings.TrimPrefix(operator[0], "SANDBOXD_OPERATOR_TOKEN=")).
		Do("POST", "/api/app/sites/"+id+"/snapshot", nil).Must(t, 202).Str("jobId")
	if j := waitJobDone(snap); j["status"] != "failed" || !strings.Contains(j["error"].(map[string]any)["message"].(string), "too old") {
		t.Fatalf("a snapshot on the old agent: %v", j)
	}
	del := owner.Do("DELETE", "/api/app/sites/"+id, nil).Must(t, 202)
	if j := waitJobDone(del.Str("jobId")); j["status"] != "succeeded" {
		t.Fatalf("delete on the old agent: %v", j)
	}
}

// fetchHost GETs url with another Host header (a site's, at an edge's
// address).
func fetchHost(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
