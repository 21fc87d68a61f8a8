package e2e

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// metric reads one sample of the dev system's /metrics (0 when absent).
func (d *devSystem) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + d.api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// TestWarmPool: with --pool 8.2=2 the node keeps two ready sites that no
// workspace sees; a create claims one and answers with it ready, serving
// at its own URL with its own title at once; the pool refills; a
// template's warmPoolSize keeps ready sites of the template the same way.
func TestWarmPool(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	dir := devDataDir(t)
	d := startDev(t, dir, freeAddr(t), freeAddr(t), "--pool", "8.2=2")
	ready := `sandboxd_pool_sites{pool="php:8.2/disk:10240",status="ready"}`
	st.WaitFor(t, 3*time.Minute, "two pooled sites", func() bool { return d.metric(t, ready) == 2 })

	// Invisible before their claim: no listing shows them, and their ids
	// (read on the host) are unknown to the workspace.
	if n := len(d.owner.Do("GET", "/api/app/sites", nil).Must(t, 200).List("sites")); n != 0 {
		t.Fatalf("pooled sites listed: %d", n)
	}
	records, _ := filepath.Glob(filepath.Join(dir, "agent", "sites", "records", "site_*.json"))
	if len(records) < 2 {
		t.Fatalf("%d site records on the node", len(records))
	}
	for _, r := range records {
		id := strings.TrimSuffix(filepath.Base(r), ".json")
		if r := d.owner.Do("GET", "/api/app/sites/"+id, nil); r.Status != 404 {
			t.Fatalf("pooled site %s: %d %s", id, r.Status, r.Raw)
		}
		if r := d.owner.Do("POST", "/api/sites/"+id+"/magic-login", nil); r.Status != 404 {
			t.Fatalf("pooled site %s: %d %s", id, r.Status, r.Raw)
		}
	}

	// They doze while they wait (frozen, memory out of RAM: read on the
	// host), and a claim serves at once from there.
	host := newHostView(t, d)
	var pooled []string
	for _, r := range records {
		id := strings.TrimSuffix(filepath.Base(r), ".json")
		if !strings.HasPrefix(id, "site_stock") {
			pooled = append(pooled, id)
			host.waitDozing(t, id)
		}
	}
	created := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Claimed from the pool"}).Must(t, 202)
	id, url := created.Str("site.id"), created.Str("site.url")
	if created.Str("site.status") != "ready" || !strings.Contains(url, "claimed-from-the-pool-") {
		t.Fatalf("claim: %s", created.Raw)
	}
	if job := d.owner.Do("GET", "/api/app/jobs/"+created.Str("jobId"), nil).Must(t, 200); job.Str("job.status") != "succeeded" {
		t.Fatalf("claim job: %s", job.Raw)
	}
	if !slices.Contains(pooled, id) {
		t.Fatalf("claimed %s, not one of the dozing pooled sites %v", id, pooled)
	}
	code, body := served(t, url+"/")
	if code != 200 || !strings.Contains(body, "Claimed from the pool") {
		t.Fatalf("claimed site: %d %.300s", code, body)
	}
	if strings.Contains(body, "//pool-") {
		i := strings.Index(body, "//pool-")
		t.Fatalf("the claimed site still names its pool URL: %s", body[max(0, i-200):min(len(body), i+100)])
	}
	if d.metric(t, `sandboxd_pool_claims_total{result="hit"}`) != 1 {
		t.Fatal("the claim was not counted as a hit")
	}
	// The claimed site is an ordinary site: a login link, a reset.
	d.owner.Do("POST", "/api/sites/"+id+"/magic-login", nil).Must(t, 200)
	st.WaitFor(t, 3*time.Minute, "the pool to refill", func() bool { return d.metric(t, ready) == 2 })

	// A template's warm pool.
	d.putFile(t, id, "check.php", templateCheck)
	made := d.owner.Do("POST", "/api/app/templates", map[string]any{"siteId": id, "name": "Warm"}).Must(t, 202)
	tplID := made.Str("template.id")
	d.waitJob(t, made.Str("jobId"))
	d.owner.Do("PATCH", "/api/app/templates/"+tplID, map[string]any{"warmPoolSize": 1}).Must(t, 200)
	// Template pools share one label (templates are tenants', a label
	// each would grow without bound); this is the only template here.
	tplReady := `sandboxd_pool_sites{pool="template",status="ready"}`
	st.WaitFor(t, 3*time.Minute, "the template's pooled site", func() bool { return d.metric(t, tplReady) == 1 })
	warm := d.owner.Do("POST", "/api/app/templates/"+tplID+"/sites", map[string]any{"name": "Warm one"}).Must(t, 202)
	if warm.Str("site.status") != "ready" || warm.Str("site.templateId") != tplID {
		t.Fatalf("template claim: %s", warm.Raw)
	}
	code, body = served(t, warm.Str("site.url")+"/check.php")
	if code != 200 || !strings.Contains(body, `"home":"`+strings.ReplaceAll(warm.Str("site.url"), "/", `\/`)+`"`) {
		t.Fatalf("template claim at its URL: %d %s", code, body)
	}
	// Deleting the template empties its pool.
	d.owner.Do("DELETE", "/api/app/templates/"+tplID, nil).Must(t, 200)
	st.WaitFor(t, time.Minute, "the template's pool to go", func() bool {
		return d.metric(t, tplReady) == 0 && d.metric(t, `sandboxd_pool_sites{pool="template",status="creating"}`) == 0
	})
	if _, err := os.Stat(filepath.Join(dir, "agent", "sites", "templates", tplID)); err != nil {
		t.Fatalf("the template's tree went while a site of it lives: %v", err)
	}
}
