package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/agenttest"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/sitepath"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// attackPHP is the hostile tenant: one page of the site's own PHP, put
// there through the file manager, that does what the test asks of it.
const attackPHP = `<?php
set_time_limit(600);
header('Content-Type: application/json');
function out($v) { echo json_encode($v, JSON_UNESCAPED_SLASHES); exit; }
$dirs = ['/srv/site/wordpress', '/srv/site/wordpress/wp-content', '/srv/site/wordpress/wp-content/uploads',
    '/srv/site/wordpress/wp-content/plugins', '/srv/site/state', '/srv/site/logs', '/srv/site/mail', '/srv/site/tmp'];
switch ($_GET['op'] ?? '') {
case 'plant':
    // Every name the node might read or write in a tenant-writable
    // directory becomes a link to the host: reads to a secret, writes to
    // files that must never appear, plus relative, directory and /proc links.
    $canary = $_GET['canary'];
    $reads = ['debug.log', 'apache-error.log', 'php-error.log', 'access.log', 'error.log', 'container.log',
        'leak.eml', 'php.ini', 'install.json', 'wp-config.php.bak'];
    $writes = ['install.json.tmp', 'container.log.1', 'used-tokens', 'pwn.eml.tmp', 'debug.log.1', 'sandbox.tmp', 'index.html'];
    $n = 0;
    foreach ($dirs as $d) {
        if (!is_dir($d)) @mkdir($d, 0755, true);
        foreach ($reads as $name) { $p = "$d/$name"; if (is_link($p) || is_file($p)) @unlink($p); if (@symlink("$canary/secret", $p)) $n++; }
        foreach ($writes as $i => $name) { $p = "$d/$name"; if (is_link($p) || is_file($p)) @unlink($p); if (@symlink("$canary/pwned-" . md5($d) . "-$i", $p)) $n++; }
        foreach (['relative.log' => str_repeat('../', 12) . ltrim($canary, '/') . '/pwned-rel-' . md5($d),
            'hostdir' => $canary, 'environ.log' => '/proc/self/environ'] as $name => $target) {
            @unlink("$d/$name");
            if (@symlink($target, "$d/$name")) $n++;
        }
    }
    out(['planted' => $n]);
case 'version':
    // WordPress's version file, read by the node on create and reset.
    $v = '/srv/site/wordpress/wp-includes/version.php';
    if (!is_link($v)) @rename($v, "$v.orig");
    @unlink($v);
    out(['linked' => @symlink($_GET['canary'] . '/secret', $v)]);
case 'status':
    $st = [];
    foreach (file('/proc/self/status') as $l) { $kv = explode(':', $l, 2); $st[trim($kv[0])] = trim($kv[1] ?? ''); }
    $listen = [];
    foreach (['/proc/net/tcp', '/proc/net/tcp6'] as $f) {
        foreach (@file($f) ?: [] as $i => $l) { $c = preg_split('/\s+/', trim($l)); if ($i > 0 && ($c[3] ?? '') === '0A') $listen[] = $c[1]; }
    }
    foreach (@file('/proc/net/route') ?: [] as $i => $l) {
        $c = preg_split('/\s+/', trim($l));
        if ($i > 0 && $c[1] === '00000000') $gw = long2ip(hexdec(implode('', array_reverse(str_split($c[2], 2)))));
    }
    out(['status' => $st, 'listen' => $listen, 'pids' => count(array_filter(scandir('/proc'), 'ctype_digit')),
        'addr' => $_SERVER['SERVER_ADDR']]);
case 'connect':
    $res = [];
    foreach (explode(',', $_GET['to']) as $to) {
        $s = @stream_socket_client("tcp://$to", $errno, $errstr, 1.5);
        if ($s) { fwrite($s, "GET / HTTP/1.0\r\n\r\n"); fclose($s); $res[$to] = 'connected'; }
        else $res[$to] = "refused or dropped: $errno $errstr";
    }
    out($res);
case 'fill':
    $f = fopen('/srv/site/tmp/fill', 'w');
    $buf = str_repeat("\1", 1 << 20);
    $n = 0;
    while ($n < (64 << 30)) { $w = @fwrite($f, $buf); if (!$w) break; $n += $w; if ($w < strlen($buf)) break; }
    fclose($f);
    out(['written' => $n, 'free' => disk_free_space('/srv/site/tmp')]);
case 'unfill':
    @unlink('/srv/site/tmp/fill');
    out(['free' => disk_free_space('/srv/site/tmp')]);
case 'sparse':
    $p = '/srv/site/wordpress/wp-content/debug.log';
    @unlink($p);
    $f = fopen($p, 'c');
    fseek($f, 4 << 30);
    out(['ok' => (bool)fwrite($f, "sandbox-last-line\n")]);
}
out(['error' => 'unknown op']);
`

// TestHostileTenant is a tenant trying to get out: its own PHP plants
// links to the host in every directory it can write, then every operation
// that makes the node touch the site runs; it tries every address of the
// node, another site and a metadata service; it fills its disk and makes
// a 4 GiB log. Each check looks at the host: files that must not appear,
// a secret that must not leak into any answer or log, listeners that
// must see no connection from the site. The other site keeps serving.
func TestHostileTenant(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	dir := devDataDir(t)
	plansFile := filepath.Join(t.TempDir(), "plans.json")
	if err := os.WriteFile(plansFile, []byte(`{"paid": {"siteDiskMb": 256}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// On every address, like a production node: the site must be stopped
	// by the node's policy, not by a loopback-only bind.
	api, edgeAddr := "0.0.0.0:"+port(freeAddr(t)), "0.0.0.0:"+port(freeAddr(t))
	d := startDev(t, dir, api, edgeAddr, "--plans", plansFile)

	// The host's canary: a secret any leak would carry, and a directory
	// in which a write following a tenant's link would land.
	canary := t.TempDir()
	if err := os.Chmod(canary, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := "sbx-canary-" + randHex(12)
	secretPath := filepath.Join(canary, "secret")
	if err := os.WriteFile(secretPath, []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostIntact := func(stage string) {
		t.Helper()
		names, err := os.ReadDir(canary)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0].Name() != "secret" {
			var got []string
			for _, n := range names {
				got = append(got, n.Name())
			}
			t.Fatalf("%s: the host's canary directory now holds %v", stage, got)
		}
		if b, err := os.ReadFile(secretPath); err != nil || string(b) != marker+"\n" {
			t.Fatalf("%s: the host's secret was changed: %q %v", stage, b, err)
		}
	}
	noLeak := func(stage string, b []byte) {
		t.Helper()
		if strings.Contains(string(b), marker) {
			t.Fatalf("%s: the host's secret leaked: %.500s", stage, b)
		}
	}
	call := func(method, path string, body any, header ...string) *st.Response {
		t.Helper()
		r := d.owner.Do(method, path, body, header...)
		noLeak(method+" "+path, r.Raw)
		return r
	}
	job := func(stage string, r *st.Response) map[string]any {
		t.Helper()
		j := d.waitJob(t, r.Must(t, 202).Str("jobId"))
		b, _ := json.Marshal(j)
		noLeak(stage, b)
		hostIntact(stage)
		return j
	}

	newSite := func(name string) (id, url string) {
		created := call("POST", "/api/app/sites", map[string]any{"name": name})
		if j := job("create "+name, created); j["status"] != "succeeded" {
			t.Fatalf("create %s: %v", name, j)
		}
		return created.Str("site.id"), created.Str("site.url")
	}
	victim, victimURL := newSite("Victim")
	attacker, attackerURL := newSite("Attacker")
	victimServes := func(stage string) {
		t.Helper()
		if code, body := fetch(t, victimURL+"/"); code != 200 || !strings.Contains(body, "Victim") {
			t.Fatalf("%s: the other site stopped serving: %d %.200s", stage, code, body)
		}
	}
	upload := func(id string) {
		t.Helper()
		call("POST", "/api/app/sites/"+id+"/files/write?path="+sitepath.Encode("attack.php"),
			map[string]string{"contentBase64": base64.StdEncoding.EncodeToString([]byte(attackPHP))}).Must(t, 200)
	}
	attack := func(siteURL, query string, out any) {
		t.Helper()
		resp, err := slowClient.Get(siteURL + "/attack.php?" + query)
		if err != nil {
			t.Fatalf("attack %s: %v", query, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode != 200 || json.Unmarshal(b, out) != nil {
			t.Fatalf("attack %s: %d %.300s", query, resp.StatusCode, b)
		}
	}
	plant := func(stage string) {
		t.Helper()
		upload(attacker)
		var r struct{ Planted int }
		attack(attackerURL, "op=plant&canary="+canary, &r)
		if r.Planted < 100 {
			t.Fatalf("%s: planted only %d links", stage, r.Planted)
		}
		hostIntact(stage)
	}
	upload(victim)
	plant("plant")
	fsRoot := func(id string) string { return filepath.Join(dir, "agent", "sites", "fs", id) }
	// As if the data dir were world-traversable like /var/lib: each site's
	// own modes must keep other uids out, not the test's private temp dir.
	for p := fsRoot(""); len(p) >= len(filepath.Dir(dir)); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("operations that touch the site follow none of its links", func(t *testing.T) {
		// A restart (php.ini), with the debug log on.
		if j := job("php-config", call("PUT", "/api/app/sites/"+attacker+"/php-config",
			map[string]any{"settings": map[string]any{"memory_limit": "200M"}})); j["status"] != "succeeded" {
			t.Fatalf("php-config: %v", j)
		}
		call("PUT", "/api/app/sites/"+attacker+"/debug", map[string]bool{"wpDebug": true, "wpDebugLog": true}).Must(t, 200)
		plant("plant again after the restart")
		if r := call("GET", "/api/app/sites/"+attacker+"/debug/log?lines=50", nil); r.Status == 200 && r.Get("exists") == true {
			t.Fatalf("a debug.log that is a link was read: %s", r.Raw)
		}
		hostIntact("debug tail")
		call("GET", "/api/app/sites/"+attacker+"/email", nil).Must(t, 200)
		hostIntact("mail list")
		// Plugin deploy: unpacked where links wait.
		zip := wpzip.BuildPlugin("hostile-probe", "Hostile Probe", "1.0.0", `// nothing`)
		body, ct := st.Multipart(map[string]string{"activate": "false"}, "file", "hostile-probe.zip", zip)
		if j := job("plugin deploy", call("POST", "/api/app/sites/"+attacker+"/plugins", body, "Content-Type", ct)); j["status"] != "succeeded" {
			t.Fatalf("plugin deploy: %v", j)
		}
		call("GET", "/api/app/sites/"+attacker+"/plugins", nil)
		hostIntact("plugin list")
		// The file manager reads and lists through the links: refused.
		for _, p := range []string{"wp-content/debug.log", "environ.log", "hostdir/secret", "wp-content/uploads/relative.log"} {
			if r := call("GET", "/api/app/sites/"+attacker+"/files/content?path="+sitepath.Encode(p), nil); r.Status == 200 {
				t.Fatalf("file read through the link %s: %s", p, r.Raw)
			}
		}
		call("GET", "/api/app/sites/"+attacker+"/files?path="+sitepath.Encode("hostdir"), nil)
		call("POST", "/api/app/sites/"+attacker+"/files/write?path="+sitepath.Encode("hostdir/pwned-fm"),
			map[string]string{"contentBase64": base64.StdEncoding.EncodeToString([]byte("x"))})
		hostIntact("file manager")
		// A one-time login (its token lands in a root-owned mount).
		link := call("POST", "/api/sites/"+attacker+"/magic-login", nil).Must(t, 200)
		if code, _ := fetch(t, link.Str("url")); code >= 500 {
			t.Fatalf("magic login: %d", code)
		}
		hostIntact("magic login")
		// A PHP switch and back.
		for _, v := range []string{"7.4", "8.2"} {
			if j := job("php switch to "+v, call("PUT", "/api/app/sites/"+attacker+"/php-version", map[string]string{"phpVersion": v})); j["status"] != "succeeded" {
				t.Fatalf("php switch to %s: %v", v, j)
			}
		}
		// WordPress's version file as a link, then a reset reads it.
		upload(attacker)
		var lr struct{ Linked bool }
		attack(attackerURL, "op=version&canary="+canary, &lr)
		if !lr.Linked {
			t.Fatal("version.php was not replaced by a link")
		}
		j := job("reset", call("POST", "/api/app/sites/"+attacker+"/reset", nil))
		if j["status"] != "succeeded" {
			t.Fatalf("reset: %v", j)
		}
		site := call("GET", "/api/app/sites/"+attacker, nil).Must(t, 200)
		if !strings.HasPrefix(site.Str("site.wordpressVersion"), "6.") {
			t.Fatalf("after reset: %s", site.Raw)
		}
		plant("plant after the reset")
		victimServes("after every operation")
	})

	var me, other siteStatus
	upload(attacker)
	attack(attackerURL, "op=status", &me)
	attack(victimURL, "op=status", &other)

	t.Run("inside a site", func(t *testing.T) {
		s := me.Status
		if s["Seccomp"] != "2" || s["NoNewPrivs"] != "1" || s["CapEff"] != "0000000000000000" || s["CapPrm"] != "0000000000000000" {
			t.Fatalf("confinement: Seccomp %q NoNewPrivs %q CapEff %q CapPrm %q", s["Seccomp"], s["NoNewPrivs"], s["CapEff"], s["CapPrm"])
		}
		uid, otherUID := me.uid(t), other.uid(t)
		if uid < agent.FirstSiteUID || otherUID < agent.FirstSiteUID || uid == otherUID {
			t.Fatalf("uids: this site %d, the other %d", uid, otherUID)
		}
		// Its own web server is all it sees listening; only its own processes.
		if len(me.Listen) != 1 || !strings.HasSuffix(me.Listen[0], ":1F90") {
			t.Fatalf("listening sockets seen from the site: %v", me.Listen)
		}
		if me.Pids > 64 {
			t.Fatalf("the site sees %d processes", me.Pids)
		}
		// Host side: the attacker's uid cannot read the other site's files
		// by path, while that site's own uid can read its secrets.
		for _, p := range []string{
			filepath.Join(fsRoot(victim), "secrets", "wp-config.php"),
			filepath.Join(fsRoot(victim), "disk", "wordpress", "wp-config.php"),
			filepath.Join(fsRoot(victim), "disk", "wordpress", "index.php"),
			filepath.Join(fsRoot(victim), "logs", "container.log"),
		} {
			if out, err := catAs(uid, p); err == nil {
				t.Fatalf("uid %d read %s: %.100s", uid, p, out)
			}
		}
		if _, err := catAs(otherUID, filepath.Join(fsRoot(victim), "secrets", "wp-config.php")); err != nil {
			t.Fatalf("control: the site's own uid cannot read its secrets: %v", err)
		}
	})

	t.Run("the network ends at the site", func(t *testing.T) {
		gw := gatewayOf(t, me.Addr)
		if me.Addr == "" || other.Addr == "" || me.Addr == other.Addr {
			t.Fatalf("addresses: site %q, other %q, gateway %q", me.Addr, other.Addr, gw)
		}
		// Listeners of the test's own on every address of the node, and a
		// metadata service and a private host in a namespace of its own.
		node := newRecorder(t, "0.0.0.0:0")
		meta := newMetadataService(t)
		targets := []string{other.Addr + ":8080", other.Addr + ":80", meta.addr + ":80", meta.private + ":80"}
		addrs := []string{"127.0.0.1", gw}
		ifaddrs, _ := net.InterfaceAddrs()
		for _, a := range ifaddrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !slices.Contains(addrs, ip.IP.String()) && ip.IP.String() != meta.private {
				addrs = append(addrs, ip.IP.String())
			}
		}
		// dev runs Raft in process: a server process of its own, on every
		// address, stands for a control-plane node's Raft and API ports.
		raftPort := port(freeAddr(t))
		srv := start(t, nil, "server", "--data-dir", filepath.Join(t.TempDir(), "s"), "--api-addr", "0.0.0.0:"+port(freeAddr(t)),
			"--cluster-addr", "0.0.0.0:"+port(freeAddr(t)), "--advertise-cluster", "https://127.0.0.1:1",
			"--raft-addr", "0.0.0.0:"+raftPort, "--advertise-raft", "127.0.0.1:"+raftPort)
		srv.waitLine(t, "sandboxd server ")
		ports := append(listenPorts(t, d.proc.cmd.Process.Pid, 4), listenPorts(t, srv.cmd.Process.Pid, 3)...)
		ports = append(ports, node.port)
		for _, a := range addrs {
			for _, p := range ports {
				targets = append(targets, net.JoinHostPort(a, strconv.Itoa(p)))
			}
		}
		// The node itself reaches every listener of the test (so a site
		// failing is the policy, not a missing listener).
		for _, to := range []string{net.JoinHostPort(gw, strconv.Itoa(node.port)), meta.addr + ":80", meta.private + ":80"} {
			c, err := net.DialTimeout("tcp", to, 2*time.Second)
			if err != nil {
				t.Fatalf("control: the node cannot reach %s: %v", to, err)
			}
			c.Close()
		}
		for len(targets) > 0 {
			n := min(len(targets), 12)
			var res map[string]string
			attack(attackerURL, "op=connect&to="+strings.Join(targets[:n], ","), &res)
			for to, r := range res {
				if r == "connected" {
					t.Errorf("the site connected to %s", to)
				}
			}
			targets = targets[n:]
		}
		for _, l := range []*recorder{node, meta.recorder} {
			if peers := l.from(me.Addr); len(peers) > 0 {
				t.Fatalf("host side: %s accepted connections from the site: %v", l.addr, peers)
			}
		}
		victimServes("after the network attempts")
	})

	t.Run("a full disk refuses writes with a clear error", func(t *testing.T) {
		var f struct{ Written, Free int64 }
		attack(attackerURL, "op=fill", &f)
		if f.Written < 64<<20 || f.Written > 256<<20 {
			t.Fatalf("a 256 MiB disk took %d bytes", f.Written)
		}
		r := call("POST", "/api/app/sites/"+attacker+"/files/write?path="+sitepath.Encode("wp-content/more.bin"),
			map[string]string{"contentBase64": base64.StdEncoding.EncodeToString(make([]byte, 1<<20))})
		if r.Status != 402 || r.Code() != "plan_limit_reached" || r.Details()["resource"] != "siteDiskMb" ||
			r.Details()["limit"] != float64(256) || !strings.Contains(r.Str("error.message"), "full") {
			t.Fatalf("write to a full disk: %d %s", r.Status, r.Raw)
		}
		// Host side: the image holds no more than its size.
		var stat syscall.Stat_t
		if err := syscall.Stat(filepath.Join(fsRoot(attacker), "disk.img"), &stat); err != nil || stat.Blocks*512 > 260<<20 {
			t.Fatalf("disk image: %d bytes allocated, %v", stat.Blocks*512, err)
		}
		victimServes("while the other site's disk is full")
		attack(attackerURL, "op=unfill", &f)
		call("POST", "/api/app/sites/"+attacker+"/files/write?path="+sitepath.Encode("wp-content/more.bin"),
			map[string]string{"contentBase64": base64.StdEncoding.EncodeToString(make([]byte, 1<<20))}).Must(t, 200)
	})

	t.Run("a 4 GiB sparse log", func(t *testing.T) {
		var ok struct{ OK bool }
		attack(attackerURL, "op=sparse", &ok)
		r := call("GET", "/api/app/sites/"+attacker+"/debug/log?lines=1", nil).Must(t, 200)
		if r.Get("truncated") != true || !strings.Contains(r.Str("content"), "sandbox-last-line") {
			t.Fatalf("tail: %.300s", r.Raw)
		}
	})

	t.Run("delete leaves nothing and follows nothing", func(t *testing.T) {
		plant("plant before delete")
		job("delete", call("DELETE", "/api/app/sites/"+attacker, nil))
		if _, err := os.Stat(fsRoot(attacker)); !os.IsNotExist(err) {
			t.Fatalf("site directory left: %v", err)
		}
		if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), attacker) {
			t.Fatal("a mount of the deleted site is left")
		}
		victimServes("after the delete")
	})
	noLeak("the service's own log", []byte(d.proc.output()))
	hostIntact("end")
}

// slowClient waits for attack pages that try many addresses in turn.
var slowClient = &http.Client{Timeout: 3 * time.Minute, Transport: localhostClient.Transport}

type siteStatus struct {
	Status map[string]string
	Listen []string
	Pids   int
	Addr   string
}

func (s siteStatus) uid(t *testing.T) uint32 {
	f := strings.Fields(s.Status["Uid"])
	if len(f) != 4 || f[0] != f[1] || f[1] != f[2] {
		t.Fatalf("Uid line %q", s.Status["Uid"])
	}
	n, err := strconv.ParseUint(f[0], 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(n)
}

// gatewayOf is the node's address on the bridge a site is attached to.
func gatewayOf(t *testing.T, site string) string {
	t.Helper()
	ip := net.ParseIP(site)
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.Contains(ip) {
				return n.IP.String()
			}
		}
	}
	t.Fatalf("no interface of the node is on %s's network", site)
	return ""
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// catAs reads a host file as uid, as a site that broke out of its
// container would.
func catAs(uid uint32, path string) ([]byte, error) {
	cmd := exec.Command("cat", "--", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return cmd.Output()
}

// listenPorts is every TCP port a process listens on: the API (and its
// /metrics), the edge, the agent's RPC, Raft, whatever it opened.
func listenPorts(t *testing.T, pid, atLeast int) []int {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			c := strings.Fields(sc.Text())
			if len(c) < 10 || c[3] != "0A" || !inodes[c[9]] {
				continue
			}
			p, _ := strconv.ParseUint(c[1][strings.LastIndex(c[1], ":")+1:], 16, 16)
			if !slices.Contains(ports, int(p)) {
				ports = append(ports, int(p))
			}
		}
		f.Close()
	}
	if len(ports) < atLeast {
		t.Fatalf("process %d listens on %v only, %d ports expected", pid, ports, atLeast)
	}
	return ports
}

// recorder is a listener that notes who connected.
type recorder struct {
	addr  string
	port  int
	mu    sync.Mutex
	peers []string
}

func newRecorder(t *testing.T, addr string) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	return serveRecorder(t, ln)
}

func serveRecorder(t *testing.T, ln net.Listener) *recorder {
	r := &recorder{addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.peers = append(r.peers, c.RemoteAddr().String())
			r.mu.Unlock()
			c.Close()
		}
	}()
	return r
}

func (r *recorder) from(ip string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range r.peers {
		if h, _, _ := net.SplitHostPort(p); h == ip {
			out = append(out, p)
		}
	}
	return out
}

// metadata is a cloud metadata service at 169.254.169.254 and a private
// host, both in a network namespace the test makes, routed from the node.
type metadata struct {
	*recorder
	addr, private string
}

func newMetadataService(t *testing.T) metadata {
	t.Helper()
	agenttest.HostRoutes(t)
	name := "sbxmeta" + randHex(3)
	hostEnd, nsEnd := name+"h", name+"n"
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	sh("netns", "add", name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostEnd).Run()
		_ = exec.Command("ip", "netns", "del", name).Run()
	})
	sh("link", "add", hostEnd, "type", "veth", "peer", "name", nsEnd)
	sh("link", "set", nsEnd, "netns", name)
	sh("addr", "add", "10.251.7.1/30", "dev", hostEnd)
	sh("link", "set", hostEnd, "up")
	sh("-n", name, "addr", "add", "10.251.7.2/30", "dev", nsEnd)
	sh("-n", name, "addr", "add", "169.254.169.254/32", "dev", nsEnd)
	sh("-n", name, "link", "set", nsEnd, "up")
	sh("-n", name, "link", "set", "lo", "up")
	sh("-n", name, "route", "add", "default", "via", "10.251.7.1")
	sh("route", "add", "169.254.169.254/32", "via", "10.251.7.2")
	var ln net.Listener
	var err error
	agenttest.InNetns(t, "/run/netns/"+name, func() { ln, err = net.Listen("tcp4", "0.0.0.0:80") })
	if err != nil {
		t.Fatal(err)
	}
	return metadata{recorder: serveRecorder(t, ln), addr: "169.254.169.254", private: "10.251.7.2"}
}
