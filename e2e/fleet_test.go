package e2e

import (
	"context"
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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/agenttest"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/sitepath"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// site is a site of a fleet test.
type site struct{ id, url, node string }

// fleet is hosts simulated with network namespaces on a bridge the test
// makes: every component runs in its own namespace with its own address,
// and they talk over real TCP through the bridge. The test itself (the
// operator and the visitors) is on the bridge's address.
type fleet struct {
	t      *testing.T
	id     string
	bridge string
	prefix string // 10.252.N.
	next   int
	mu     sync.Mutex
	hosts  map[string]*host
	env    []string // the servers' shared environment (sealing key)
	dir    string
}

// host is one simulated machine.
type host struct {
	f      *fleet
	name   string
	ns     string
	ip     string
	veth   string // the bridge's end
	dir    string // its data
	mu     sync.Mutex
	proc   *proc
	env    []string
	args   []string
	binary string
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	// A /24 of 10.252/16 no other fleet (a parallel test) has taken.
	routes, _ := exec.Command("ip", "-4", "route").Output()
	n := 1 + int(b[0])%250
	for strings.Contains(string(routes), fmt.Sprintf("10.252.%d.0/24", n)) {
		n = 1 + n%250
	}
	f := &fleet{t: t, id: id, bridge: "sbxf" + id, prefix: fmt.Sprintf("10.252.%d.", n), next: 10,
		hosts: map[string]*host{}, dir: agenttest.ShortDir(t)}
	f.ip("link", "add", f.bridge, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", f.bridge).Run() })
	f.ip("addr", "add", f.prefix+"1/24", "dev", f.bridge)
	f.ip("link", "set", f.bridge, "up")
	return f
}

func (f *fleet) ip(args ...string) {
	f.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		f.t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// host makes a machine: a namespace with one interface on the bridge.
func (f *fleet) host(name string) *host {
	f.t.Helper()
	f.mu.Lock()
	n := f.next
	f.next++
	f.mu.Unlock()
	h := &host{f: f, name: name, ns: "sbxf" + f.id + "-" + name, ip: f.prefix + fmt.Sprint(n), veth: fmt.Sprintf("sbxf%s%d", f.id, n),
		dir: filepath.Join(f.dir, name), binary: binary}
	f.ip("netns", "add", h.ns)
	f.t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", h.veth).Run()
		_ = exec.Command("ip", "netns", "del", h.ns).Run()
	})
	f.ip("link", "add", h.veth, "type", "veth", "peer", "name", h.veth+"n")
	f.ip("link", "set", h.veth+"n", "netns", h.ns)
	f.ip("-n", h.ns, "link", "set", h.veth+"n", "name", "eth0")
	f.ip("-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
	f.ip("-n", h.ns, "link", "set", "eth0", "up")
	f.ip("-n", h.ns, "link", "set", "lo", "up")
	f.ip("link", "set", h.veth, "master", f.bridge)
	f.ip("link", "set", h.veth, "up")
	f.hosts[name] = h
	return h
}

// addr is the host's address with a port.
func (h *host) addr(port int) string { return net.JoinHostPort(h.ip, fmt.Sprint(port)) }

// start runs sandboxd on the host (in its network namespace only: the
// file system is the machine's, as containerd's socket and the image
// cache need).
func (h *host) start(env []string, args ...string) *proc {
	h.f.t.Helper()
	h.mu.Lock()
	h.env, h.args = env, args
	h.mu.Unlock()
	return h.run()
}

func (h *host) run() *proc {
	t := h.f.t
	t.Helper()
	p := startCmd(t, h.env, "nsenter", append([]string{"--net=/run/netns/" + h.ns, "--", h.binary}, h.args...)...)
	h.mu.Lock()
	h.proc = p
	h.mu.Unlock()
	return p
}

// kill SIGKILLs the host's sandboxd (what it started, containerd and the
// sites, keeps running, as on a machine whose agent crashed).
func (h *host) kill() {
	h.f.t.Helper()
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	st.Await(h.f.t, p.done, time.Minute, h.name+"'s sandboxd to die")
	p.done <- nil
}

// restart starts the host's sandboxd again with the same arguments (the
// binary may have been replaced: a rolling upgrade).
func (h *host) restart() *proc { return h.run() }

// unplug and plug take the host's link off the network and back.
func (h *host) unplug() { h.f.ip("link", "set", h.veth, "down") }
func (h *host) plug()   { h.f.ip("link", "set", h.veth, "up") }

// fleetSystem is three servers, two agents and two edges, each on a host.
type fleetSystem struct {
	f        *fleet
	servers  []*host
	agents   []*host
	edges    []*host
	operator string // token
	api      string // s1's API URL
	owner    *st.Client
}

const (
	fleetAPIPort     = 8080
	fleetClusterPort = 7443
	fleetRaftPort    = 8300
	fleetEdgePort    = 80
	fleetDomain      = "fleet.test"
)

// startFleet runs the system: s1 bootstraps, s2 and s3 join with join
// tokens, agents and edges join with theirs; serverArgs are added to
// every server's flags.
func startFleet(t *testing.T, serverArgs ...string) *fleetSystem {
	t.Helper()
	f := newFleet(t)
	key, err := run(t, nil, "admin", "sealing-key", "new")
	if err != nil {
		t.Fatal(err)
	}
	f.env = []string{"SANDBOXD_SEALING_KEY=" + strings.TrimSpace(key)}
	fs := &fleetSystem{f: f}
	var clusterURLs []string
	for i := 1; i <= 3; i++ {
		h := f.host(fmt.Sprintf("s%d", i))
		fs.servers = append(fs.servers, h)
		clusterURLs = append(clusterURLs, "https://"+h.addr(fleetClusterPort))
	}
	serverFlags := func(h *host) []string {
		return append([]string{"server", "--data-dir", h.dir, "--node-id", h.name, "--api-addr", h.addr(fleetAPIPort),
			"--cluster-addr", h.addr(fleetClusterPort), "--raft-addr", h.addr(fleetRaftPort),
			"--sandbox-domain", fleetDomain, "--site-port", "80", "--log-format", "json", "--log-level", "debug"}, serverArgs...)
	}
	fs.servers[0].start(f.env, serverFlags(fs.servers[0])...)
	fs.api = "http://" + fs.servers[0].addr(fleetAPIPort)
	st.WaitFor(t, time.Minute, "s1's operator token", func() bool {
		_, err := os.Stat(filepath.Join(fs.servers[0].dir, "operator-token"))
		return err == nil
	})
	fs.operator = readKey(t, filepath.Join(fs.servers[0].dir, "operator-token"))
	for _, h := range fs.servers[1:] {
		env := append(append([]string{}, f.env...), "SANDBOXD_JOIN_TOKEN="+fs.joinToken("server", h.name))
		h.start(env, append(serverFlags(h), "--join", clusterURLs[0])...)
	}
	op := st.NewClient(t, fs.api, fs.operator)
	st.WaitFor(t, 2*time.Minute, "three voters", func() bool {
		r, err := op.DoErr("GET", "/api/admin/cluster", nil)
		if err != nil || r.Status != 200 {
			return false
		}
		servers, _ := r.Get("cluster.servers").([]any)
		return len(servers) == 3
	})
	controlPlane := strings.Join(clusterURLs, ",")
	for i := 1; i <= 2; i++ {
		h := f.host(fmt.Sprintf("a%d", i))
		fs.agents = append(fs.agents, h)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := agent.Purge(ctx, h.dir, ""); err != nil {
				t.Errorf("purge %s: %v", h.name, err)
			}
		})
		// Each agent starts a containerd of its own, in its namespace:
		// its sites and MariaDB live on its machine. It offers PHP 8.2
		// only, so that it imports no image the test does not use.
		args := []string{"agent", "--data-dir", h.dir, "--node-id", h.name,
			"--control-plane", controlPlane, "--listen-addr", h.addr(8090), "--backend-host", h.ip, "--ingress-addr", h.addr(8444),
			"--containerd-socket", filepath.Join(h.dir, "none.sock"), "--php-versions", "8.2", "--site-egress", "none", "--ssh-addr", "",
			"--log-format", "json"}
		if i == 1 {
			// a1's sites sleep after a few idle seconds: every visit below
			// may wake one, and the drain moves them asleep.
			args = append(args, "--sleep-after", "4s", "--deep-sleep-after", "4s")
		}
		h.start([]string{"SANDBOXD_JOIN_TOKEN=" + fs.joinToken("agent", h.name)}, args...)
	}
	for i := 1; i <= 2; i++ {
		h := f.host(fmt.Sprintf("e%d", i))
		fs.edges = append(fs.edges, h)
		h.start([]string{"SANDBOXD_JOIN_TOKEN=" + fs.joinToken("edge", h.name)}, "edge", "--data-dir", h.dir, "--id", h.name,
			"--control-plane", controlPlane, "--addr", h.addr(fleetEdgePort), "--log-format", "json")
	}
	st.WaitFor(t, 5*time.Minute, "both agents ready and both edges joined", func() bool {
		r, err := op.DoErr("GET", "/api/admin/nodes", nil)
		if err != nil || r.Status != 200 || strings.Count(string(r.Raw), `"status":"ready"`) != 2 {
			return false
		}
		m, err := op.DoErr("GET", "/api/admin/members", nil)
		return err == nil && m.Status == 200 && strings.Count(string(m.Raw), `"role":"edge"`) == 2
	})
	out, err := run(t, []string{"SANDBOXD_OPERATOR_TOKEN=" + fs.operator}, "admin", "create-account", "--server", fs.api, "--email", "fleet@example.com", "--plan", "paid")
	if err != nil {
		t.Fatalf("create-account: %v %s", err, out)
	}
	out, err = run(t, []string{"SANDBOXD_OPERATOR_TOKEN=" + fs.operator}, "admin", "create-token", "--server", fs.api, "--email", "fleet@example.com")
	if err != nil {
		t.Fatal(err)
	}
	fs.owner = st.NewClient(t, fs.api, lastLine(out))
	return fs
}

// joinToken makes a join token through s1's API.
func (fs *fleetSystem) joinToken(role, name string) string {
	fs.f.t.Helper()
	var out string
	var err error
	st.WaitFor(fs.f.t, 2*time.Minute, "a join token for "+name, func() bool {
		out, err = run(fs.f.t, []string{"SANDBOXD_OPERATOR_TOKEN=" + fs.operatorToken()}, "admin", "join-token", "create",
			"--server", "http://"+fs.servers[0].addr(fleetAPIPort), "--role", role, "--name", name)
		return err == nil
	})
	return lastLine(out)
}

func (fs *fleetSystem) operatorToken() string {
	if fs.operator == "" {
		fs.operator = readKey(fs.f.t, filepath.Join(fs.servers[0].dir, "operator-token"))
	}
	return fs.operator
}

// visit asks edge e for a site's page; the status and body.
func (fs *fleetSystem) visit(e *host, siteURL, path string) (int, string, error) {
	host := strings.TrimPrefix(strings.TrimPrefix(siteURL, "http://"), "https://")
	host, _, _ = strings.Cut(host, "/")
	req, err := http.NewRequest("GET", "http://"+e.addr(fleetEdgePort)+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	client := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b), err
}

// waitJob waits for a job to end and returns it.
func (fs *fleetSystem) waitJob(t *testing.T, id string) map[string]any {
	t.Helper()
	var job map[string]any
	st.WaitFor(t, 5*time.Minute, "job "+id, func() bool {
		r := fs.owner.Do("GET", "/api/app/jobs/"+id, nil)
		if r.Status != 200 {
			return false
		}
		job, _ = r.Get("job").(map[string]any)
		return job["status"] == "succeeded" || job["status"] == "failed"
	})
	return job
}

// TestFleetAcrossHosts: three servers, two agents and two edges, each on
// a host of its own: sites land on both agents and every site is served
// by both edges (through its node's ingress: an edge cannot reach a
// site's address on another host). An agent that is lost (its process
// killed, its link cut) has its sites unavailable at both edges and in
// the API, and back when it returns.
func TestFleetAcrossHosts(t *testing.T) {
	t.Parallel() // with the other fleet: they share nothing but the machine
	hosttest.Root(t)
	// A node lost for --reschedule-after has its sites restored elsewhere
	// (the last subtest); the first loses one for less than that, even on
	// a loaded machine, so that it comes back to its own sites.
	fs := startFleet(t, "--heartbeat-interval", "500ms", "--node-down-after", "3s", "--snapshot-every", "10s",
		"--reschedule-after", "60s", "--orphan-grace", "3s")
	t.Logf("fleet up: servers %s %s %s, agents %s %s, edges %s %s", fs.servers[0].ip, fs.servers[1].ip, fs.servers[2].ip,
		fs.agents[0].ip, fs.agents[1].ip, fs.edges[0].ip, fs.edges[1].ip)

	var sites []site
	for i := 0; i < 4; i++ {
		r := fs.owner.Do("POST", "/api/app/sites", map[string]any{"name": fmt.Sprintf("Fleet %d", i)}).Must(t, 202)
		if job := fs.waitJob(t, r.Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("create %d: %v", i, job)
		}
		s := fs.owner.Do("GET", "/api/app/sites/"+r.Str("site.id"), nil).Must(t, 200)
		sites = append(sites, site{id: s.Str("site.id"), url: s.Str("site.url"), node: s.Str("site.nodeId")})
	}
	nodes := map[string]int{}
	for _, s := range sites {
		nodes[s.node]++
	}
	if nodes["a1"] == 0 || nodes["a2"] == 0 {
		t.Fatalf("sites are not on both agents: %v", nodes)
	}
	servedBy := func(e *host, s site) bool {
		code, body, err := fs.visit(e, s.url, "/")
		return err == nil && code == 200 && strings.Contains(body, "wp-content")
	}
	for _, s := range sites {
		for _, e := range fs.edges {
			st.WaitFor(t, time.Minute, s.id+" through "+e.name, func() bool { return servedBy(e, s) })
		}
	}

	t.Run("a lost agent's sites are unavailable until it returns", func(t *testing.T) {
		lost := fs.agents[0]
		lost.kill()
		lost.unplug()
		var onLost []site
		for _, s := range sites {
			if s.node == lost.name {
				onLost = append(onLost, s)
			}
		}
		for _, s := range onLost {
			st.WaitFor(t, time.Minute, s.id+" unavailable in the API", func() bool {
				return fs.owner.Do("GET", "/api/app/sites/"+s.id, nil).Str("site.status") == "unavailable"
			})
			// Each edge follows the state a moment after the API.
			for _, e := range fs.edges {
				var code int
				var body string
				var err error
				st.WaitFor(t, 30*time.Second, s.id+" unavailable at "+e.name, func() bool {
					code, body, err = fs.visit(e, s.url, "/")
					return err == nil && code == 503 && strings.Contains(body, "temporarily unavailable")
				})
			}
		}
		// The other agent's sites are untouched.
		for _, s := range sites {
			if s.node != lost.name && !servedBy(fs.edges[0], s) {
				t.Errorf("%s (on %s) is not served while another node is lost", s.id, s.node)
			}
		}
		lost.plug()
		lost.restart()
		for _, s := range onLost {
			st.WaitFor(t, 2*time.Minute, s.id+" back", func() bool {
				return fs.owner.Do("GET", "/api/app/sites/"+s.id, nil).Str("site.status") == "ready" && servedBy(fs.edges[1], s)
			})
		}
	})

	t.Run("stolen credentials do only their own role's work", func(t *testing.T) {
		// What an attacker who copied a node's or an edge's data dir holds.
		agentCreds, err := enroll.Load(filepath.Join(fs.agents[1].dir, "tls"))
		if err != nil {
			t.Fatal(err)
		}
		edgeCreds, err := enroll.Load(filepath.Join(fs.edges[0].dir, "tls"))
		if err != nil {
			t.Fatal(err)
		}
		cluster := "https://" + fs.servers[1].addr(fleetClusterPort)
		for name, creds := range map[string]*rpcauth.Creds{"an agent's": agentCreds, "an edge's": edgeCreds} {
			c := st.NewClient(t, cluster, "")
			c.HTTP = creds.Client("", pki.RoleServer)
			for _, call := range []struct{ method, path string }{
				{"GET", "/api/admin/accounts"}, {"POST", "/api/admin/join-tokens"}, {"POST", "/api/admin/nodes/a1/drain"},
				{"POST", "/internal/cluster/join"}, {"GET", "/api/app/sites"},
			} {
				if r := c.Do(call.method, call.path, map[string]any{"role": "agent"}); r.Status != 403 {
					t.Errorf("%s certificate: %s %s answered %d", name, call.method, call.path, r.Status)
				}
			}
		}
		// An edge cannot write state: it cannot register a node or
		// heartbeat for one (its only writes are its own certificates).
		reg := agentv1connect.NewRegistryServiceClient(edgeCreds.Client("", pki.RoleServer), cluster)
		if _, err := reg.Register(context.Background(), connect.NewRequest(&agentv1.RegisterRequest{NodeId: "e1", Address: "https://x"})); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("an edge registered a node: %v", err)
		}
		// A revoked join token joins nothing.
		out, err := run(t, []string{"SANDBOXD_OPERATOR_TOKEN=" + fs.operator}, "admin", "join-token", "create", "--server", fs.api, "--role", "agent")
		if err != nil {
			t.Fatal(err)
		}
		tok := lastLine(out)
		id := strings.Split(tok, ".")[2]
		if _, err := run(t, []string{"SANDBOXD_OPERATOR_TOKEN=" + fs.operator}, "admin", "join-token", "revoke", id, "--server", fs.api); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := enroll.Obtain(ctx, enroll.Config{Dir: t.TempDir(), Role: pki.RoleAgent, Name: "intruder", Servers: []string{cluster}, JoinToken: tok}); err == nil || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("a revoked join token: %v", err)
		}
	})

	// A file in each site's wp-content, which moves must carry.
	marker := func(s site, name, text string) {
		fs.owner.Do("POST", "/api/app/sites/"+s.id+"/files/write?path="+sitepath.Encode("wp-content/uploads/"+name),
			map[string]string{"contentBase64": base64.StdEncoding.EncodeToString([]byte(text))}).Must(t, 200)
	}
	serves := func(s site, path, want string) bool {
		for _, e := range fs.edges {
			code, body, err := fs.visit(e, s.url, path)
			if err != nil || code != 200 || body != want {
				return false
			}
		}
		return true
	}
	for _, s := range sites {
		marker(s, "moved.txt", "content of "+s.id)
	}
	op := st.NewClient(t, fs.api, fs.operator)
	nodeOf := func(id string) string {
		return fs.owner.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200).Str("site.nodeId")
	}

	t.Run("drain moves every site, asleep, with its content and URL", func(t *testing.T) {
		onA1 := 0
		for _, s := range sites {
			if nodeOf(s.id) == "a1" {
				onA1++
			}
		}
		if onA1 == 0 {
			t.Fatal("no site is on a1 to drain: its sites were restored elsewhere while it was lost (longer than --reschedule-after)")
		}
		// They move asleep: a move wakes a site to copy it.
		for _, s := range sites {
			if nodeOf(s.id) == "a1" {
				st.WaitFor(t, time.Minute, s.id+" asleep on a1", func() bool {
					return fs.owner.Do("GET", "/api/app/sites/"+s.id, nil).Must(t, 200).Get("site.sleeping") == true
				})
			}
		}
		out, err := run(t, []string{"SANDBOXD_OPERATOR_TOKEN=" + fs.operator}, "admin", "drain", "a1", "--wait", "--server", fs.api)
		if err != nil {
			t.Fatalf("admin drain: %v\n%s", err, out)
		}
		t.Logf("drain:\n%s", out)
		if !strings.Contains(out, "a1 is drained") || !strings.Contains(out, "unavailable for") {
			t.Fatalf("drain output: %s", out)
		}
		for _, s := range sites {
			if got := nodeOf(s.id); got != "a2" {
				t.Errorf("%s on %s after the drain", s.id, got)
			}
			st.WaitFor(t, time.Minute, s.id+" served with its content", func() bool {
				return serves(s, "/wp-content/uploads/moved.txt", "content of "+s.id) && servedBy(fs.edges[0], s)
			})
			if got := fs.owner.Do("GET", "/api/app/sites/"+s.id, nil).Must(t, 200); got.Str("site.url") != s.url {
				t.Errorf("URL changed: %s", got.Raw)
			}
		}
		// The drained node holds nothing any more (host side).
		st.WaitFor(t, time.Minute, "a1's site records gone", func() bool {
			recs, _ := filepath.Glob(filepath.Join(fs.agents[0].dir, "sites", "records", "site_*.json"))
			return len(recs) == 0
		})
		op.Do("DELETE", "/api/admin/nodes/a1/drain", nil).Must(t, 200)
		for i := range sites {
			sites[i].node = "a2"
		}
	})

	t.Run("a lost node's sites are restored elsewhere from their snapshots", func(t *testing.T) {
		// Each site's latest snapshot (taken on the schedule) holds a
		// file written before it; one written after is what the loss
		// costs. A snapshot reads the files after its takenAt, so one
		// taken after every write is done holds them.
		for _, s := range sites {
			marker(s, "before.txt", "saved")
		}
		before := time.Now()
		for _, s := range sites {
			st.WaitFor(t, 2*time.Minute, "a snapshot of "+s.id+" after the write", func() bool {
				list := op.Do("GET", "/api/admin/sites/"+s.id+"/snapshots", nil).Must(t, 200).List("snapshots")
				if len(list) == 0 {
					return false
				}
				taken, err := time.Parse(time.RFC3339Nano, fmt.Sprint(list[0]["takenAt"]))
				return err == nil && taken.After(before)
			})
		}
		wrote := time.Now()
		for _, s := range sites {
			marker(s, "after.txt", "lost")
		}
		lost := fs.agents[1]
		lost.kill()
		lost.unplug()
		for _, s := range sites {
			st.WaitFor(t, 3*time.Minute, s.id+" restored on a1", func() bool {
				r := fs.owner.Do("GET", "/api/app/sites/"+s.id, nil).Must(t, 200)
				return r.Str("site.nodeId") == "a1" && r.Str("site.status") == "ready" && r.Get("site.restoredFromSnapshotAt") != nil
			})
			st.WaitFor(t, time.Minute, s.id+" served from a1", func() bool { return serves(s, "/wp-content/uploads/before.txt", "saved") })
			// The schedule (every 10 s) may take another snapshot between
			// the write and the kill, on a loaded machine: that one holds
			// the file. A snapshot read well before the write cannot.
			r := fs.owner.Do("GET", "/api/app/sites/"+s.id, nil).Must(t, 200)
			restoredFrom, err := time.Parse(time.RFC3339Nano, r.Str("site.restoredFromSnapshotAt"))
			if err != nil {
				t.Fatalf("restoredFromSnapshotAt: %s", r.Raw)
			}
			if !restoredFrom.Before(wrote.Add(-5 * time.Second)) {
				t.Logf("%s was restored from a snapshot taken %s after the write began: the file may be in it", s.id, restoredFrom.Sub(wrote))
				continue
			}
			for _, e := range fs.edges {
				if code, _, _ := fs.visit(e, s.url, "/wp-content/uploads/after.txt"); code == 200 {
					t.Errorf("%s serves a file written after its last snapshot", s.id)
				}
			}
		}
		// The lost node comes back: it serves nothing and removes its
		// stale copies.
		lost.plug()
		lost.restart()
		st.WaitFor(t, 2*time.Minute, "a2's stale copies removed", func() bool {
			recs, _ := filepath.Glob(filepath.Join(lost.dir, "sites", "records", "site_*.json"))
			return len(recs) == 0
		})
		for _, s := range sites {
			if got := nodeOf(s.id); got != "a1" || !serves(s, "/wp-content/uploads/before.txt", "saved") {
				t.Errorf("%s after a2 came back: on %s", s.id, got)
			}
		}
	})
}

// apiCaller makes API calls the way a careful client does: every write
// carries an Idempotency-Key, and a call that gets no answer, a 503 or
// outcome_unknown is sent again (same key) to the next server, for up to
// a minute. A call that never succeeds is a failed call.
type apiCaller struct {
	servers []string
	token   string
	client  *http.Client
	next    atomic.Int64
	calls   atomic.Int64
	retries atomic.Int64
	failed  atomic.Int64
}

func (c *apiCaller) do(method, path, body, key string) (int, []byte) {
	c.calls.Add(1)
	deadline := time.Now().Add(time.Minute)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			c.retries.Add(1)
			time.Sleep(200 * time.Millisecond)
		}
		base := c.servers[int(c.next.Add(1))%len(c.servers)]
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := c.client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusServiceUnavailable:
			case http.StatusTooManyRequests:
				// Slowed down, not failed: as long as it says.
				secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
				time.Sleep(time.Duration(max(secs, 1)) * time.Second)
			default:
				return resp.StatusCode, b
			}
		}
		if time.Now().After(deadline) {
			c.failed.Add(1)
			return 0, nil
		}
	}
}

// TestFleetRollingUpgrade restarts servers, then agents, then edges, one
// at a time, on a new binary (another version), while a client writes
// and reads through the API and visitors browse every site through the
// edges: no API call fails (retried with its Idempotency-Key), every
// write is applied exactly once, and no site is unreachable outside its
// own agent's restart. The fleet then runs the new version everywhere.
func TestFleetRollingUpgrade(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	fs := startFleet(t, "--heartbeat-interval", "500ms")
	next := filepath.Join(t.TempDir(), "sandboxd-next")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=0.2.0-next", "-o", next, "./cmd/sandboxd")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the new binary: %v\n%s", err, out)
	}
	var sites []site
	for i := range 2 {
		r := fs.owner.Do("POST", "/api/app/sites", map[string]any{"name": fmt.Sprint("Upgraded ", i)}).Must(t, 202)
		if job := fs.waitJob(t, r.Str("jobId")); job["status"] != "succeeded" {
			t.Fatalf("create: %v", job)
		}
		s := fs.owner.Do("GET", "/api/app/sites/"+r.Str("site.id"), nil).Must(t, 200)
		sites = append(sites, site{s.Str("site.id"), s.Str("site.url"), s.Str("site.nodeId")})
	}

	var apis []string
	for _, h := range fs.servers {
		apis = append(apis, "http://"+h.addr(fleetAPIPort))
	}
	caller := &apiCaller{servers: apis, token: fs.owner.Token, client: &http.Client{Timeout: 10 * time.Second}}
	stop := make(chan struct{})
	var loops sync.WaitGroup
	var written []string
	var writes atomic.Int64 // len(written), for waits while the loop runs
	loops.Add(1)
	go func() { // the client: a write (a token made, then revoked) every few seconds
		defer loops.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Second): // within the per-token write limit
			}
			name := fmt.Sprintf("upgrade-%d", i)
			code, body := caller.do("POST", "/api/account/tokens", `{"name":"`+name+`"}`, name)
			if code != 201 {
				if code != 0 {
					t.Errorf("write %s: %d %s", name, code, body)
				}
				continue
			}
			written = append(written, name)
			writes.Add(1)
			var made struct{ Token struct{ ID string } }
			_ = json.Unmarshal(body, &made)
			// A revoke that is sent again may find it gone: done either way.
			if code, body := caller.do("DELETE", "/api/account/tokens/"+made.Token.ID, "", ""); code != 200 && code != 404 && code != 0 {
				t.Errorf("revoke %s: %d %s", name, code, body)
			}
		}
	}()
	loops.Add(1)
	go func() { // and reads, all the time
		defer loops.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if code, body := caller.do("GET", "/api/app/sites", "", ""); code != 200 && code != 0 {
				t.Errorf("read: %d %s", code, body)
			}
		}
	}()
	// Visitors: every site through whichever edge answers; an outage is
	// a round in which no edge served it.
	type window struct{ from, to time.Time }
	var mu sync.Mutex
	outages := map[string][]window{}
	loops.Add(1)
	go func() {
		defer loops.Done()
		down := map[string]time.Time{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, s := range sites {
				ok := false
				for _, e := range fs.edges {
					if code, body, err := fs.visit(e, s.url, "/"); err == nil && code == 200 && strings.Contains(body, "wp-content") {
						ok = true
						break
					}
				}
				now := time.Now()
				switch {
				case !ok && down[s.id].IsZero():
					down[s.id] = now
				case ok && !down[s.id].IsZero():
					mu.Lock()
					outages[s.id] = append(outages[s.id], window{down[s.id], now})
					mu.Unlock()
					down[s.id] = time.Time{}
				}
			}
		}
	}()

	op := st.NewClient(t, fs.api, fs.operator)
	writesGoThrough := func(after string) {
		t.Helper()
		n := writes.Load()
		st.WaitFor(t, time.Minute, "three writes to go through after "+after, func() bool { return writes.Load() >= n+3 })
	}
	upgrade := func(h *host, ready func() bool) window {
		t.Helper()
		from := time.Now()
		h.proc.stop(t)
		h.binary = next
		h.restart()
		st.WaitFor(t, 3*time.Minute, h.name+" upgraded and back", ready)
		w := window{from, time.Now()}
		t.Logf("%s upgraded in %v", h.name, w.to.Sub(w.from).Round(time.Millisecond))
		// An operator checks that the service works before the next.
		writesGoThrough(h.name + " upgraded")
		return w
	}
	for _, h := range fs.servers {
		h := h
		upgrade(h, func() bool {
			r, err := st.NewClient(t, "http://"+h.addr(fleetAPIPort), "").DoErr("GET", "/healthz", nil)
			return err == nil && r.Status == 200 && r.Str("version") == "0.2.0-next"
		})
		if h == fs.servers[0] {
			op = st.NewClient(t, "http://"+fs.servers[1].addr(fleetAPIPort), fs.operator)
		}
	}
	restarts := map[string]window{}
	for _, h := range fs.agents {
		h := h
		restarts[h.name] = upgrade(h, func() bool {
			r, err := op.DoErr("GET", "/api/admin/nodes", nil)
			if err != nil || r.Status != 200 {
				return false
			}
			for _, n := range r.List("nodes") {
				if n["id"] == h.name {
					return n["status"] == "ready" && n["version"] == "0.2.0-next"
				}
			}
			return false
		})
	}
	for _, h := range fs.edges {
		h := h
		upgrade(h, func() bool {
			code, _, err := fs.visit(h, sites[0].url, "/")
			return err == nil && code == 200
		})
	}
	writesGoThrough("the last upgrade")
	close(stop)
	loops.Wait()

	t.Logf("%d API calls, %d retried sends, %d failed; %d writes", caller.calls.Load(), caller.retries.Load(), caller.failed.Load(), len(written))
	if caller.failed.Load() != 0 {
		t.Errorf("%d API calls failed during the upgrade", caller.failed.Load())
	}
	if len(written) < 20 {
		t.Errorf("only %d writes went through", len(written))
	}
	// Every token made was revoked by the id its answer gave: a write
	// applied twice would have left a second one behind.
	for _, tok := range fs.owner.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens") {
		if strings.HasPrefix(fmt.Sprint(tok["name"]), "upgrade-") {
			t.Errorf("token %v was made twice (or never revoked)", tok["name"])
		}
	}
	for _, s := range sites {
		own := restarts[s.node]
		for _, w := range outages[s.id] {
			t.Logf("%s (on %s) unreachable %v", s.id, s.node, w.to.Sub(w.from).Round(time.Millisecond))
			// Its own agent's restart, and the edges' next look at its
			// route (a second) after it.
			if w.from.Before(own.from) || w.to.After(own.to.Add(5*time.Second)) {
				t.Errorf("%s unreachable from %s to %s, outside its node's restart (%s to %s)", s.id, w.from.Format(time.StampMilli),
					w.to.Format(time.StampMilli), own.from.Format(time.StampMilli), own.to.Format(time.StampMilli))
			}
		}
	}
}
