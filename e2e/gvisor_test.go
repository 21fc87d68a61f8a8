package e2e

import (
	"encoding/base64"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/agent/toolbox"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/sitepath"
)

// TestSiteUnderGVisor runs a node with --runtime gvisor: a site is made,
// served through the edge, driven through the file manager (an exec in its
// sandbox), runs on gVisor's kernel, and is deleted with its sandbox.
func TestSiteUnderGVisor(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Fatal("runsc is not installed (deploy/dev/install-deps.sh installs it)")
	}
	dir := devDataDir(t)
	d := startDev(t, dir, freeAddr(t), freeAddr(t), "--runtime", "gvisor")
	created := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Under gVisor"}).Must(t, 202)
	id, url := created.Str("site.id"), created.Str("site.url")
	if job := d.waitJob(t, created.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("create: %v", job)
	}
	if code, body := served(t, url+"/"); code != 200 || !strings.Contains(body, "Under gVisor") {
		t.Fatalf("home: %d %.200s", code, body)
	}
	page := `<?php echo php_uname('r'), ' ', (int)file_exists('/run/mysqld/mysqld.sock');`
	d.owner.Do("POST", "/api/app/sites/"+id+"/files/write?path="+sitepath.Encode("kernel.php"),
		map[string]string{"contentBase64": base64.StdEncoding.EncodeToString([]byte(page))}).Must(t, 200)
	back := d.owner.Do("GET", "/api/app/sites/"+id+"/files/content?path="+sitepath.Encode("kernel.php"), nil).Must(t, 200)
	if back.Str("contentBase64") != base64.StdEncoding.EncodeToString([]byte(page)) {
		t.Fatalf("read back: %s", back.Raw)
	}
	// gVisor's sentry answers uname with its own version; runc would give
	// the host's.
	host, _ := exec.Command("uname", "-r").Output()
	code, body := fetch(t, url+"/kernel.php")
	if code != 200 || body == strings.TrimSpace(string(host))+" 1" || !strings.HasSuffix(body, " 1") {
		t.Fatalf("kernel seen by the site: %d %q (host %s)", code, body, host)
	}
	if !runscRunning(id) {
		t.Fatal("no runsc sandbox process for the site")
	}
	// The site makes its debug log 4 GiB of nothing, not one newline in
	// it: the tail is its bounded end, and says there is more.
	trunc := `<?php $f = fopen('/srv/site/wordpress/wp-content/debug.log', 'c'); echo (int)ftruncate($f, 4 << 30);`
	d.owner.Do("POST", "/api/app/sites/"+id+"/files/write?path="+sitepath.Encode("trunc.php"),
		map[string]string{"contentBase64": base64.StdEncoding.EncodeToString([]byte(trunc))}).Must(t, 200)
	if code, body := fetch(t, url+"/trunc.php"); code != 200 || body != "1" {
		t.Fatalf("ftruncate in the site: %d %q", code, body)
	}
	tail := d.owner.Do("GET", "/api/app/sites/"+id+"/debug/log?lines=1", nil).Must(t, 200)
	if n := len(tail.Str("content")); tail.Get("exists") != true || tail.Get("truncated") != true || n == 0 || n > toolbox.MaxDebugLogBytes {
		t.Fatalf("tail of a 4 GiB log without a newline: exists %v, truncated %v, %d bytes of content", tail.Get("exists"), tail.Get("truncated"), n)
	}
	if job := d.waitJob(t, d.owner.Do("DELETE", "/api/app/sites/"+id, nil).Must(t, 202).Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("delete: %v", job)
	}
	if runscRunning(id) {
		t.Fatal("the site's sandbox outlived its delete")
	}
}

// runscRunning reports whether a runsc process of the site is alive.
func runscRunning(siteID string) bool {
	out, _ := exec.Command("pgrep", "-f", "runsc.*"+siteID).Output()
	return len(strings.TrimSpace(string(out))) > 0
}
