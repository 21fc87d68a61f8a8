package sitenet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/hostclaim"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/ids"
)

func TestRulesetText(t *testing.T) {
	sub := netip.MustParsePrefix("10.200.4.0/22")
	allow, err := ParseAllow("10.9.0.5:3306")
	if err != nil {
		t.Fatal(err)
	}
	sub2 := netip.MustParsePrefix("10.200.8.0/22")
	none, _ := ruleset("sandboxd_ab12", []string{"sbxab12", "sbxab12-1"}, []netip.Prefix{sub, sub2}, false, []Allow{allow})
	public, _ := ruleset("sandboxd_ab12", []string{"sbxab12"}, []netip.Prefix{sub}, true, nil)
	for _, want := range []string{`iifname { "sbxab12", "sbxab12-1" } counter drop comment "site to node"`, `egress off`,
		`iifname { "sbxab12", "sbxab12-1" } ip daddr 10.9.0.5/32 tcp dport 3306 accept`,
		`oifname { "sbxab12", "sbxab12-1" } counter drop comment "into a site from elsewhere"`,
		`ip saddr { 10.200.4.0/22, 10.200.8.0/22 } ip daddr { 10.200.4.0/22, 10.200.8.0/22 } counter drop`} {
		if !strings.Contains(none, want) {
			t.Errorf("egress none lacks %q", want)
		}
	}
	for _, want := range []string{"169.254.0.0/16", "100.64.0.0/10", `ip daddr @blocked counter drop`} {
		if !strings.Contains(public, want) {
			t.Errorf("egress public lacks %q", want)
		}
	}
	for _, bad := range []string{"", "10.0.0.1:0", "10.0.0.1:70000", "::1", "host:80", "10.0.0.0/33"} {
		if _, err := ParseAllow(bad); err == nil {
			t.Errorf("ParseAllow(%q) accepted", bad)
		}
	}
}

// world is what the test puts around a node: an "outside" namespace
// reached through a veth from the host, holding listeners at a private
// address, the metadata address and one public address, each routed from
// the host to that namespace only, so nothing leaves this machine.
type world struct {
	ns        string
	private   netip.Addr // 10.251.0.2
	metadata  netip.Addr // 169.254.169.254
	public    netip.Addr // 11.22.33.44
	hostSide  string
	listeners []net.Listener
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v: %s", args, err, out)
	}
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{ns: "sbxt-" + ids.Random(6), private: netip.MustParseAddr("10.251.0.2"),
		metadata: netip.MustParseAddr("169.254.169.254"), public: netip.MustParseAddr("11.22.33.44")}
	w.hostSide = "sbxv" + ids.Random(6)
	agenttest.HostRoutes(t)
	sh(t, "ip", "netns", "add", w.ns)
	t.Cleanup(func() {
		for _, l := range w.listeners {
			l.Close()
		}
		_ = exec.Command("ip", "link", "delete", w.hostSide).Run()
		_ = exec.Command("ip", "netns", "delete", w.ns).Run()
	})
	sh(t, "ip", "link", "add", w.hostSide, "type", "veth", "peer", "name", "eth0", "netns", w.ns)
	sh(t, "ip", "addr", "add", "10.251.0.1/30", "dev", w.hostSide)
	sh(t, "ip", "link", "set", w.hostSide, "up")
	for _, a := range []string{"10.251.0.2/30", w.metadata.String() + "/32", w.public.String() + "/32"} {
		sh(t, "ip", "-n", w.ns, "addr", "add", a, "dev", "eth0")
	}
	sh(t, "ip", "-n", w.ns, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", w.ns, "link", "set", "lo", "up")
	sh(t, "ip", "-n", w.ns, "route", "add", "default", "via", "10.251.0.1")
	for _, a := range []netip.Addr{w.metadata, w.public} {
		sh(t, "ip", "route", "add", a.String()+"/32", "via", "10.251.0.2", "dev", w.hostSide)
	}
	// Every listener answers; the host reaching each proves it is there.
	for _, a := range []netip.Addr{w.private, w.metadata, w.public} {
		w.listeners = append(w.listeners, listenIn(t, "/run/netns/"+w.ns, netip.AddrPortFrom(a, 8080)))
		if err := dial(netip.AddrPortFrom(a, 8080)); err != nil {
			t.Fatalf("the host cannot reach the test's own listener %s: %v", a, err)
		}
	}
	return w
}

func listenIn(t *testing.T, ns string, ap netip.AddrPort) net.Listener {
	t.Helper()
	var l net.Listener
	var err error
	agenttest.InNetns(t, ns, func() { l, err = net.Listen("tcp", ap.String()) })
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

func dial(ap netip.AddrPort) error {
	c, err := net.DialTimeout("tcp", ap.String(), time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

func dialFrom(t *testing.T, ns string, ap netip.AddrPort) error {
	var err error
	agenttest.InNetns(t, ns, func() { err = dial(ap) })
	return err
}

func newNetwork(t *testing.T, egress Egress, allow ...string) *Network {
	t.Helper()
	dir := t.TempDir()
	// The host's own registry: other tests' agents (another package's
	// run at the same time) hold subnets on this host too.
	claims, err := hostclaim.Open(hostclaim.DefaultDir, "subnet", 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := claims.ReleaseUnder(dir); err != nil {
			t.Error(err)
		}
	})
	cfg := Config{Dir: filepath.Join(dir, "net"), Name: fmt.Sprintf("%08x", rand.Uint32()), Egress: egress, Claims: claims}
	for _, a := range allow {
		al, err := ParseAllow(a)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Allow = append(cfg.Allow, al)
	}
	n, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, id := range n.Attached() {
			_ = n.Detach(context.Background(), id)
		}
		if err := Remove(cfg.Name); err != nil {
			t.Error(err)
		}
		links, _ := os.ReadDir("/sys/class/net")
		for _, l := range links {
			if l.Name() == bridgeName(cfg.Name, 0) || strings.HasPrefix(l.Name(), bridgeName(cfg.Name, 0)+"-") {
				t.Errorf("bridge %s left behind", l.Name())
			}
		}
	})
	return n
}

// TestSitePolicy attaches two sites and tries, from inside one, every
// destination a hostile tenant would; the listeners exist (the host
// reaches them), so a refusal is the policy's doing.
func TestSitePolicy(t *testing.T) {
	hosttest.Root(t)
	for _, egress := range []Egress{EgressPublic, EgressNone} {
		t.Run(string(egress), func(t *testing.T) {
			w := newWorld(t)
			n := newNetwork(t, egress, "10.251.0.2:8080")
			ctx := context.Background()
			a, err := n.Attach(ctx, "site_a", netip.Addr{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := n.Attach(ctx, "site_b", netip.Addr{})
			if err != nil {
				t.Fatal(err)
			}
			if !n.Subnet().Contains(a.IP) || a.IP == b.IP {
				t.Fatalf("addresses %s %s in %s", a.IP, b.IP, n.Subnet())
			}
			siteA := listenIn(t, a.NetNS, netip.AddrPortFrom(a.IP, 8080))
			defer siteA.Close()
			siteB := listenIn(t, b.NetNS, netip.AddrPortFrom(b.IP, 8080))
			defer siteB.Close()
			// The node (edge, agent) reaches a site.
			if err := dial(netip.AddrPortFrom(b.IP, 8080)); err != nil {
				t.Fatalf("node to site: %v", err)
			}
			// Node services: one on the bridge's own address, one on every address.
			gw := n.Subnet().Addr().Next()
			nodeSvc, err := net.Listen("tcp", netip.AddrPortFrom(gw, 0).String())
			if err != nil {
				t.Fatal(err)
			}
			defer nodeSvc.Close()
			anySvc, err := net.Listen("tcp", ":0")
			if err != nil {
				t.Fatal(err)
			}
			defer anySvc.Close()
			anyPort := uint16(anySvc.Addr().(*net.TCPAddr).Port)
			blocked := []netip.AddrPort{
				netip.MustParseAddrPort(nodeSvc.Addr().String()),
				netip.AddrPortFrom(gw, anyPort),
				netip.AddrPortFrom(netip.MustParseAddr("10.251.0.1"), anyPort), // the node's other address
				netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), anyPort),
				netip.AddrPortFrom(b.IP, 8080),       // another site
				netip.AddrPortFrom(w.metadata, 8080), // cloud metadata
				netip.AddrPortFrom(w.private, 8081),  // a private address, port not allowed
			}
			allowed := []netip.AddrPort{netip.AddrPortFrom(w.private, 8080)}
			if egress == EgressPublic {
				allowed = append(allowed, netip.AddrPortFrom(w.public, 8080))
			} else {
				blocked = append(blocked, netip.AddrPortFrom(w.public, 8080))
			}
			for _, ap := range blocked {
				if err := dialFrom(t, a.NetNS, ap); err == nil {
					t.Errorf("site reached %s", ap)
				}
			}
			for _, ap := range allowed {
				if err := dialFrom(t, a.NetNS, ap); err != nil {
					t.Errorf("site could not reach allowed %s: %v", ap, err)
				}
			}
			// No IPv6 in a site: link-local would pass the bridge unseen.
			agenttest.InNetns(t, a.NetNS, func() {
				b, err := os.ReadFile("/proc/sys/net/ipv6/conf/eth0/disable_ipv6")
				if err != nil || strings.TrimSpace(string(b)) != "1" {
					t.Errorf("IPv6 on a site's eth0: %q %v", b, err)
				}
			})
			// Attach is idempotent and a detached site's address can be had again.
			again, err := n.Attach(ctx, "site_a", netip.Addr{})
			if err != nil || again != a {
				t.Fatalf("re-attach: %+v %v, had %+v", again, err, a)
			}
			if err := dial(netip.AddrPortFrom(a.IP, 8080)); err != nil { // the host learns its MAC
				t.Fatalf("node to site: %v", err)
			}
			if err := n.Detach(ctx, "site_a"); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(a.NetNS); !os.IsNotExist(err) {
				t.Fatal("namespace file left after detach")
			}
			back, err := n.Attach(ctx, "site_a", a.IP)
			if err != nil || back.IP != a.IP {
				t.Fatalf("attach with the old address: %+v %v", back, err)
			}
			// The node reaches the address on its new interface at once: the
			// neighbour entry of the old one (made by the dials above) is
			// gone, not trusted for another half-minute.
			relisten := listenIn(t, back.NetNS, netip.AddrPortFrom(back.IP, 8080))
			defer relisten.Close()
			if err := dial(netip.AddrPortFrom(back.IP, 8080)); err != nil {
				t.Fatalf("node to the re-attached site: %v", err)
			}
		})
	}
}

// TestCreatingANamespaceLeavesEveryThreadHome: after pinning namespaces,
// no thread of this process is left in one of them (the main thread,
// which Go never ends, would otherwise show the process's sockets as the
// site's in /proc/<pid>/net).
func TestCreatingANamespaceLeavesEveryThreadHome(t *testing.T) {
	hosttest.Root(t)
	home, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i := range 20 {
		path := filepath.Join(dir, fmt.Sprintf("ns%d", i))
		if err := createNetNS(path); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = removeNetNS(path) })
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		ns, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net")
		if err == nil && ns != home {
			t.Errorf("thread %s is in %s, not the process's %s", task.Name(), ns, home)
		}
	}
}

// TestSitesOverBridges: a bridge takes at most 1,024 ports, so a node
// of thousands of sites grows a bridge (and a subnet) per thousand; here
// one site per bridge. Sites on two bridges are as apart as on one (read
// from inside each), the node reaches both, a restarted network finds
// both bridges and each site's address, and removal takes both bridges.
func TestSitesOverBridges(t *testing.T) {
	hosttest.Root(t)
	n := newNetwork(t, EgressNone)
	n.perBridge = 1
	ctx := context.Background()
	a, err := n.Attach(ctx, "site_a", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Attach(ctx, "site_b", netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	subnets := n.Subnets()
	if len(subnets) != 2 || !subnets[0].Contains(a.IP) || !subnets[1].Contains(b.IP) || subnets[0].Overlaps(subnets[1]) {
		t.Fatalf("two sites, one per bridge: %s %s in %v", a.IP, b.IP, subnets)
	}
	second := bridgeName(n.cfg.Name, 1)
	if _, err := os.Stat("/sys/class/net/" + second); err != nil {
		t.Fatalf("the second bridge: %v", err)
	}
	la := listenIn(t, a.NetNS, netip.AddrPortFrom(a.IP, 8080))
	defer la.Close()
	lb := listenIn(t, b.NetNS, netip.AddrPortFrom(b.IP, 8080))
	defer lb.Close()
	for _, ap := range []netip.AddrPort{netip.AddrPortFrom(a.IP, 8080), netip.AddrPortFrom(b.IP, 8080)} {
		if err := dial(ap); err != nil {
			t.Fatalf("node to %s: %v", ap, err)
		}
	}
	if err := dialFrom(t, a.NetNS, netip.AddrPortFrom(b.IP, 8080)); err == nil {
		t.Error("a site reached a site on another bridge")
	}
	if err := dialFrom(t, b.NetNS, netip.AddrPortFrom(a.IP, 8080)); err == nil {
		t.Error("a site on the second bridge reached one on the first")
	}
	if err := dialFrom(t, b.NetNS, netip.AddrPortFrom(subnets[1].Addr().Next(), 22)); err == nil {
		t.Error("a site on the second bridge reached its node")
	}

	// The agent restarts: the same bridges, and each site keeps its place.
	again, err := New(ctx, n.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Subnets(); len(got) != 2 || got[0] != subnets[0] || got[1] != subnets[1] {
		t.Fatalf("after a restart: %v, had %v", got, subnets)
	}
	for _, s := range []struct {
		id string
		at Attachment
	}{{"site_a", a}, {"site_b", b}} {
		if got, err := again.Attach(ctx, s.id, s.at.IP); err != nil || got != s.at {
			t.Fatalf("%s after a restart: %+v %v, had %+v", s.id, got, err, s.at)
		}
	}
	if err := again.Detach(ctx, "site_b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.NetNS); !os.IsNotExist(err) {
		t.Fatal("namespace left after detach")
	}
}
