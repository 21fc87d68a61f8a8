package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/sites"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/sitepath"
)

// asleepCount is how `sandboxd admin nodes` shows a node with sleeping
// sites.
var asleepCount = regexp.MustCompile(`\b[1-9][0-9]* asleep\b`)

// hostView reads a dev system's sites from the host: their cgroups and
// containers, never through the system itself.
type hostView struct {
	rt *runtime.Runtime
}

func newHostView(t *testing.T, d *devSystem) *hostView {
	t.Helper()
	rt, err := runtime.ConnectScoped(shared.socket, shared.namespace, agent.ContainerScope(filepath.Join(d.dir, "agent")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return &hostView{rt: rt}
}

func (h *hostView) frozen(id string) bool {
	f, err := h.rt.Frozen(sites.ContainerID(id))
	return err == nil && f
}

func (h *hostView) running(id string) bool {
	r, err := h.rt.Running(context.Background(), sites.ContainerID(id))
	return err == nil && r
}

// pids are the host pids of the site's processes (none once its task is
// gone).
func (h *hostView) pids(id string) []int {
	var out []int
	for _, d := range h.rt.CgroupDirs(sites.ContainerID(id)) {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		if len(out) > 0 {
			break
		}
	}
	return out
}

// waitDozing waits until the site dozes (frozen on the host).
func (h *hostView) waitDozing(t *testing.T, id string) {
	t.Helper()
	st.WaitFor(t, time.Minute, id+" to doze", func() bool { return h.frozen(id) })
}

// waitAsleep waits until the site's task is gone.
func (h *hostView) waitAsleep(t *testing.T, id string) {
	t.Helper()
	st.WaitFor(t, time.Minute, id+" to sleep", func() bool { return !h.running(id) && !h.frozen(id) })
}

// TestIdleSitesSleepAndWake, on a node whose sites doze after 3 idle
// seconds and sleep 3 seconds later: a site that served a page dozes
// (frozen, its memory out of RAM: read on the host) and then sleeps (its
// processes gone from the host's /proc), and the API says so; a page
// through the edge wakes it with the same content, twenty at once during
// one wake all answered; an SSH command, a file-manager read and a
// one-time login each wake it from its deepest sleep; a loop of its own
// keeps it from neither depth; a site that cannot wake gets the edge's
// 503 page while its neighbour serves; and a sleeping site survives a
// restart of the node asleep, and wakes on its next request.
func TestIdleSitesSleepAndWake(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	dir := devDataDir(t)
	api, edgeAddr := freeAddr(t), freeAddr(t)
	flags := []string{"--sleep-after", "3s", "--deep-sleep-after", "3s"}
	d := startDev(t, dir, api, edgeAddr, flags...)
	host := newHostView(t, d)
	create := func(name string) (id, url string) {
		made := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": name}).Must(t, 202)
		if job := d.waitJob(t, made.Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("create %s: %v", name, job)
		}
		return made.Str("site.id"), made.Str("site.url")
	}
	id, url := create("Nap Shop")
	other, otherURL := create("Wide Awake")
	page := func(t *testing.T, url, want string) string {
		t.Helper()
		code, body := served(t, url+"/")
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("%s: %d %.300s", url, code, body)
		}
		return body
	}
	before := page(t, url, "Nap Shop")
	awake, err := host.rt.Memory(sites.ContainerID(id))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("idle, it dozes and then sleeps", func(t *testing.T) {
		host.waitDozing(t, id)
		// Frozen first, then its memory goes: a tenth of a second later.
		var dozing runtime.MemoryStat
		st.WaitFor(t, 10*time.Second, "the dozing site's memory to leave RAM", func() bool {
			dozing, _ = host.rt.Memory(sites.ContainerID(id))
			return dozing.Usage > 0 && dozing.Usage*3 < awake.Usage && dozing.Swap > 0
		})
		pids := host.pids(id)
		t.Logf("awake %d KiB in RAM; dozing %d KiB in RAM and %d KiB in swap; %d processes", awake.Usage>>10, dozing.Usage>>10, dozing.Swap>>10, len(pids))
		if len(pids) == 0 || !host.frozen(id) {
			t.Fatalf("dozing: %d processes, frozen %v", len(pids), host.frozen(id))
		}
		st.WaitFor(t, time.Minute, "the API to say it sleeps", func() bool {
			s := d.owner.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200)
			return s.Get("site.sleeping") == true && s.Str("site.status") == "ready" && s.Str("site.lastRequestAt") != ""
		})
		host.waitAsleep(t, id)
		st.WaitFor(t, time.Minute, "the operator to see it asleep", func() bool {
			out, err := run(t, nil, "admin", "nodes", "--data-dir", dir)
			return err == nil && asleepCount.MatchString(out)
		})
		for _, pid := range pids {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				t.Fatalf("process %d of the sleeping site is still on the host", pid)
			}
		}
		if page(t, url, "Nap Shop") != before {
			t.Fatal("the page changed across its sleep")
		}
	})

	t.Run("twenty requests during one wake", func(t *testing.T) {
		host.waitDozing(t, id)
		var wg sync.WaitGroup
		errs := make(chan string, 20)
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if code, body := fetch(t, url+"/"); code != 200 || body != before {
					errs <- fmt.Sprintf("%d %.100s", code, body)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error("a request during the wake:", e)
		}
	})

	t.Run("every door wakes it", func(t *testing.T) {
		keys, pub := newSSHClient(t, t.TempDir())
		d.owner.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "nap", "publicKey": pub}).Must(t, 201)
		info := d.owner.Do("GET", "/api/app/sites/"+id+"/ssh", nil).Must(t, 200)
		keys.host, keys.port = info.Str("ssh.host"), strconv.Itoa(int(info.Get("ssh.port").(float64)))
		if err := os.WriteFile(keys.knownHosts, []byte(info.Str("ssh.knownHosts")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Jar: jar, Transport: localhostClient.Transport, Timeout: time.Minute}
		for _, door := range []struct {
			name string
			open func() error
		}{
			{"an SSH command", func() error {
				out, err := keys.ssh(id, "test -f index.php && echo in-the-site")
				if err != nil || !strings.Contains(out, "in-the-site") {
					return fmt.Errorf("%v: %s", err, out)
				}
				return nil
			}},
			{"a file-manager read", func() error {
				r := d.owner.Do("GET", "/api/app/sites/"+id+"/files/content?path="+sitepath.Encode("index.php"), nil)
				if r.Status != 200 {
					return fmt.Errorf("%d %.200s", r.Status, r.Raw)
				}
				if b, err := base64.StdEncoding.DecodeString(r.Str("contentBase64")); err != nil || !strings.Contains(string(b), "wp-blog-header") {
					return fmt.Errorf("index.php read as %.100q (%v)", b, err)
				}
				return nil
			}},
			{"a one-time login", func() error {
				link := d.owner.Do("POST", "/api/sites/"+id+"/magic-login", nil).Must(t, 200)
				resp, err := browser.Get(link.Str("url"))
				if err != nil {
					return err
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.Contains(resp.Request.URL.Path, "/wp-admin") || !strings.Contains(string(b), "wp-admin-bar") {
					return fmt.Errorf("%d at %s: %.200s", resp.StatusCode, resp.Request.URL, b)
				}
				return nil
			}},
		} {
			host.waitAsleep(t, id)
			if err := door.open(); err != nil {
				t.Fatalf("%s to a sleeping site: %v", door.name, err)
			}
		}
	})

	t.Run("its own loop keeps it from neither depth", func(t *testing.T) {
		keys, pub := newSSHClient(t, t.TempDir())
		d.owner.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "loop", "publicKey": pub}).Must(t, 201)
		info := d.owner.Do("GET", "/api/app/sites/"+id+"/ssh", nil).Must(t, 200)
		keys.host, keys.port = info.Str("ssh.host"), strconv.Itoa(int(info.Get("ssh.port").(float64)))
		if err := os.WriteFile(keys.knownHosts, []byte(info.Str("ssh.knownHosts")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// Busy on its own, and asking its own web server for pages.
		loop := `nohup php -r 'for(;;){ @file_get_contents("http://127.0.0.1:8080/?loop"); usleep(50000); }' >/dev/null 2>&1 </dev/null &`
		if out, err := keys.ssh(id, loop); err != nil {
			t.Fatalf("start the loop: %v %s", err, out)
		}
		host.waitDozing(t, id)
		host.waitAsleep(t, id)
	})

	startPath := filepath.Join(dir, "agent", "sites", "fs", other, "conf", "start.sh")
	t.Run("a site that cannot wake", func(t *testing.T) {
		page(t, otherURL, "Wide Awake")
		host.waitAsleep(t, other)
		good, err := os.ReadFile(startPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(startPath, []byte("#!/bin/sh\nexit 3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		resp, err := localhostClient.Get(otherURL + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "could not be woken") {
			t.Fatalf("a site that cannot wake: %d %v %.300s", resp.StatusCode, resp.Header, body)
		}
		page(t, url, "Nap Shop")
		if err := os.WriteFile(startPath, good, 0o644); err != nil {
			t.Fatal(err)
		}
		// Tried again once its wait is over (a second, doubling with
		// each failure).
		st.WaitFor(t, time.Minute, "the repaired site to wake", func() bool {
			code, body := fetch(t, otherURL+"/")
			return code == 200 && strings.Contains(body, "Wide Awake")
		})
	})

	t.Run("asleep across a restart", func(t *testing.T) {
		host.waitAsleep(t, id)
		d.proc.stop(t)
		d = startDev(t, dir, api, edgeAddr, flags...)
		if host.running(id) {
			t.Fatal("the restart started the sleeping site")
		}
		if page(t, url, "Nap Shop") != before {
			t.Fatal("the page changed across the restart")
		}
	})
}
