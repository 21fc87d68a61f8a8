// Package sitenet gives every site a network namespace of its own on a
// bridge of its agent (CNI bridge + host-local IPAM, Debian's
// containernetworking-plugins, driven through libcni), and holds the
// node's egress policy for those bridges in nftables: a bridge takes at
// most 1,024 ports, so a node of thousands of sites has a bridge (and a
// /22) per thousand. The policy: a site reaches
// nothing on its node, no other site, no private, loopback, link-local,
// CGNAT or reserved range, and the public internet only when the
// operator turns it on. The edge and the agent reach a site at its own
// address.
package sitenet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sandboxd/sandboxd/agent/hostclaim"
)

// Egress is what a site may reach beyond its node.
type Egress string

// Egress modes: none (only allow-listed destinations) or public (the
// internet, never private or reserved ranges).
const (
	EgressNone   Egress = "none"
	EgressPublic Egress = "public"
)

// DefaultPluginDirs is where Debian's containernetworking-plugins puts
// the plugins.
var DefaultPluginDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// Config is one agent's site network.
type Config struct {
	// Dir holds the network's state: pinned namespaces, IPAM leases, the
	// chosen subnet.
	Dir string
	// Name tells this agent's network apart on the host (bridge and
	// nftables table names); a short hex id.
	Name string
	// Subnet for the sites; default: a free /22 of 10.200.0.0/16, chosen
	// once (not overlapping the host's routes or another agent's) and kept.
	Subnet netip.Prefix
	// Egress is the policy beyond the node; default none.
	Egress Egress
	// Allow lists destinations sites may reach whatever the policy.
	Allow []Allow
	// PluginDirs are searched for the CNI plugins; default DefaultPluginDirs.
	PluginDirs []string
	// Claims keeps subnets unique among the host's agents; required unless
	// Subnet is set.
	Claims *hostclaim.Registry
	Logger *slog.Logger
}

// Network is an agent's site bridges and policy.
type Network struct {
	cfg   Config
	log   *slog.Logger
	table string
	cni   *libcni.CNIConfig
	lo    *libcni.PluginConfig
	// mu guards shards, which only grow.
	mu     sync.Mutex
	shards []*shard
	// perBridge, when set, holds a bridge to fewer sites than its subnet
	// (tests grow a second bridge with two sites).
	perBridge int
}

// shard is one bridge of the network and its subnet.
type shard struct {
	bridge string
	subnet netip.Prefix
	list   *libcni.NetworkConfigList
	// leases is where host-local keeps its addresses.
	leases string
}

// capacity is how many sites a shard's subnet holds: all but its
// network, gateway and broadcast addresses (1,021 for a /22, within a
// bridge's 1,024 ports).
func (sh *shard) capacity() int { return 1<<(32-sh.subnet.Bits()) - 3 }

// used counts the addresses host-local has handed out on the shard.
func (sh *shard) used() int {
	ents, _ := os.ReadDir(sh.leases)
	n := 0
	for _, e := range ents {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			n++
		}
	}
	return n
}

// Attachment is a site's place on the network.
type Attachment struct {
	// NetNS is the path of the site's pinned network namespace.
	NetNS string
	// IP is the site's address; the edge dials it.
	IP netip.Addr
}

// New prepares the network and installs its policy. It needs root, nft
// and the CNI plugins, and says which package is missing.
func New(ctx context.Context, cfg Config) (*Network, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Egress == "" {
		cfg.Egress = EgressNone
	}
	if cfg.Egress != EgressNone && cfg.Egress != EgressPublic {
		return nil, fmt.Errorf("sitenet: egress %q: want none or public", cfg.Egress)
	}
	if len(cfg.PluginDirs) == 0 {
		cfg.PluginDirs = DefaultPluginDirs
	}
	if len(cfg.Name) < 4 || len(cfg.Name) > 10 || strings.Trim(cfg.Name, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("sitenet: name %q: want 4-10 hex digits", cfg.Name)
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "tuning"} {
		if !found(cfg.PluginDirs, p) {
			return nil, fmt.Errorf("sitenet: CNI plugin %q not in %v (install containernetworking-plugins)", p, cfg.PluginDirs)
		}
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, errors.New("sitenet: nft not found (install nftables)")
	}
	for _, d := range []string{cfg.Dir, filepath.Join(cfg.Dir, "netns"), filepath.Join(cfg.Dir, "ipam"), filepath.Join(cfg.Dir, "cache")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("sitenet: %w", err)
		}
	}
	n := &Network{cfg: cfg, log: cfg.Logger.With("component", "sitenet"), table: "sandboxd_" + cfg.Name}
	var err error
	if n.lo, err = libcni.NetworkPluginConfFromBytes([]byte(`{"cniVersion":"1.0.0","name":"sandboxd-lo","type":"loopback"}`)); err != nil {
		return nil, fmt.Errorf("sitenet: loopback conf: %w", err)
	}
	subnets, err := n.chooseSubnets()
	if err != nil {
		return nil, err
	}
	for i, p := range subnets {
		sh, err := n.newShard(i, p)
		if err != nil {
			return nil, err
		}
		n.shards = append(n.shards, sh)
	}
	n.cni = libcni.NewCNIConfigWithCacheDir(cfg.PluginDirs, filepath.Join(cfg.Dir, "cache"), nil)
	if err := n.install(); err != nil {
		return nil, err
	}
	n.log.Info("site network ready", "bridge", n.shards[0].bridge, "subnets", subnets, "egress", cfg.Egress, "allow", len(cfg.Allow))
	return n, nil
}

// install replaces the network's policy with one for every shard.
func (n *Network) install() error {
	var bridges []string
	var subnets []netip.Prefix
	for _, sh := range n.shards {
		bridges, subnets = append(bridges, sh.bridge), append(subnets, sh.subnet)
	}
	script, err := ruleset(n.table, bridges, subnets, n.cfg.Egress == EgressPublic, n.cfg.Allow)
	if err != nil {
		return err
	}
	if err := nft(script); err != nil {
		return fmt.Errorf("sitenet: install policy: %w", err)
	}
	return nil
}

// bridgeName is the bridge of shard i: the first keeps the name agents
// always gave their one bridge.
func bridgeName(name string, i int) string {
	if i == 0 {
		return "sbx" + name
	}
	return fmt.Sprintf("sbx%s-%d", name, i)
}

func found(dirs []string, plugin string) bool {
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, plugin)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// Subnet is the subnet of the network's first bridge.
func (n *Network) Subnet() netip.Prefix { return n.Subnets()[0] }

// Subnets are the subnets of every bridge, the first first.
func (n *Network) Subnets() []netip.Prefix {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]netip.Prefix, len(n.shards))
	for i, sh := range n.shards {
		out[i] = sh.subnet
	}
	return out
}

// Bridge is the first host-side bridge's name.
func (n *Network) Bridge() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.shards[0].bridge
}

// newShard makes the CNI configuration of bridge i on subnet.
func (n *Network) newShard(i int, subnet netip.Prefix) (*shard, error) {
	sh := &shard{bridge: bridgeName(n.cfg.Name, i), subnet: subnet}
	name := "sandboxd-" + n.cfg.Name
	if i > 0 {
		name += fmt.Sprintf("-%d", i)
	}
	sh.leases = filepath.Join(n.cfg.Dir, "ipam", name)
	routes := []map[string]string{}
	if n.cfg.Egress == EgressPublic {
		routes = append(routes, map[string]string{"dst": "0.0.0.0/0"})
	} else {
		// Without public egress a site has no default route (a connection
		// fails at once instead of timing out), only routes to what is
		// allow-listed.
		for _, a := range n.cfg.Allow {
			if !subnet.Overlaps(a.Prefix) {
				routes = append(routes, map[string]string{"dst": a.Prefix.String()})
			}
		}
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       name,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": sh.bridge, "isGateway": true, "ipMasq": false, "hairpinMode": false,
			"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(n.cfg.Dir, "ipam"),
				"ranges": [][]map[string]string{{{"subnet": subnet.String()}}}, "routes": routes},
		}, map[string]any{
			// No IPv6 in a site: link-local addresses would pass between
			// sites on the bridge where the IPv4 policy cannot see them.
			"type": "tuning", "sysctl": map[string]string{
				"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1",
			},
		}},
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	if sh.list, err = libcni.NetworkConfFromBytes(b); err != nil {
		return nil, fmt.Errorf("sitenet: conf: %w", err)
	}
	return sh, nil
}

func (n *Network) nsPath(id string) string { return filepath.Join(n.cfg.Dir, "netns", id) }

func (n *Network) rt(id, path string, want netip.Addr) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: path, IfName: "eth0", Args: [][2]string{{"IgnoreUnknown", "1"}}}
	if want.IsValid() {
		rt.Args = append(rt.Args, [2]string{"IP", want.String()})
	}
	return rt
}

// Attach gives the site id its namespace and address, or returns those it
// has. want, if valid, asks for the address the site had before (after a
// reboot or a stop the namespace is made anew with the same address).
func (n *Network) Attach(ctx context.Context, id string, want netip.Addr) (Attachment, error) {
	if strings.ContainsAny(id, "/.") || id == "" {
		return Attachment{}, fmt.Errorf("sitenet: bad id %q", id)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	path := n.nsPath(id)
	if isNetNS(path) {
		if _, ip, ok := n.cached(id, path); ok {
			return Attachment{NetNS: path, IP: ip}, nil
		}
	}
	// Whatever is left of an earlier attachment goes first.
	for _, sh := range n.shards {
		_ = n.cni.DelNetworkList(ctx, sh.list, n.rt(id, path, netip.Addr{}))
	}
	sh, err := n.shardFor(want)
	if err != nil {
		return Attachment{}, err
	}
	if err := removeNetNS(path); err != nil {
		return Attachment{}, err
	}
	if err := createNetNS(path); err != nil {
		return Attachment{}, fmt.Errorf("sitenet: %w", err)
	}
	if _, err := n.cni.AddNetwork(ctx, n.lo, n.rt(id, path, netip.Addr{})); err != nil {
		_ = removeNetNS(path)
		return Attachment{}, fmt.Errorf("sitenet: loopback: %w", err)
	}
	if want.IsValid() && !sh.subnet.Contains(want) {
		want = netip.Addr{}
	}
	res, err := n.cni.AddNetworkList(ctx, sh.list, n.rt(id, path, want))
	if err != nil && want.IsValid() {
		// The old address is taken or outside the subnet: take any.
		n.log.Warn("site address not available again; taking a new one", "site_id", id, "want", want, "err", err)
		res, err = n.cni.AddNetworkList(ctx, sh.list, n.rt(id, path, netip.Addr{}))
	}
	if err != nil {
		_ = removeNetNS(path)
		return Attachment{}, fmt.Errorf("sitenet: attach %s: %w", id, err)
	}
	ip, err := firstIP(res)
	if err != nil {
		return Attachment{}, err
	}
	// The address may have been a site's before, on another veth: the
	// host's neighbour entry for it would send the first half-minute of
	// packets to a MAC that is gone (a reset site answered ~30 s late).
	if out, err := exec.CommandContext(ctx, "ip", "neigh", "flush", "to", ip.String(), "dev", sh.bridge).CombinedOutput(); err != nil {
		n.log.Warn("flush the neighbour entry of a site address", "ip", ip, "err", err, "out", strings.TrimSpace(string(out)))
	}
	return Attachment{NetNS: path, IP: ip}, nil
}

func firstIP(res types.Result) (netip.Addr, error) {
	cur, err := types100.NewResultFromResult(res)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("sitenet: CNI result: %w", err)
	}
	for _, ip := range cur.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP.To4()); ok && ip.Address.IP.To4() != nil {
			return a, nil
		}
	}
	return netip.Addr{}, errors.New("sitenet: the CNI result has no IPv4 address")
}

// Detach removes the site's namespace and frees its address; a site with
// none is fine.
func (n *Network) Detach(ctx context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	path := n.nsPath(id)
	shards := n.shards
	if sh, _, ok := n.cached(id, path); ok {
		shards = []*shard{sh}
	}
	var errs []error
	for _, sh := range shards {
		if err := n.cni.DelNetworkList(ctx, sh.list, n.rt(id, path, netip.Addr{})); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil && isNetNS(path) {
		return fmt.Errorf("sitenet: detach %s: %w", id, err)
	}
	return removeNetNS(path)
}

// cached finds the shard a site is attached to, and its address, from
// the CNI cache. The caller holds n.mu.
func (n *Network) cached(id, path string) (*shard, netip.Addr, bool) {
	for _, sh := range n.shards {
		if res, err := n.cni.GetNetworkListCachedResult(sh.list, n.rt(id, path, netip.Addr{})); err == nil && res != nil {
			if ip, err := firstIP(res); err == nil {
				return sh, ip, true
			}
		}
	}
	return nil, netip.Addr{}, false
}

// shardFor picks the bridge a site is attached to: the one whose subnet
// holds want (the address it had), else the first with room, else a new
// one. The caller holds n.mu.
func (n *Network) shardFor(want netip.Addr) (*shard, error) {
	if want.IsValid() {
		for _, sh := range n.shards {
			if sh.subnet.Contains(want) {
				return sh, nil
			}
		}
	}
	for _, sh := range n.shards {
		limit := sh.capacity()
		if n.perBridge > 0 {
			limit = min(limit, n.perBridge)
		}
		if sh.used() < limit {
			return sh, nil
		}
	}
	p, err := n.claimSubnet(len(n.shards))
	if err != nil {
		return nil, err
	}
	sh, err := n.newShard(len(n.shards), p)
	if err != nil {
		return nil, err
	}
	n.shards = append(n.shards, sh)
	if err := n.install(); err != nil {
		n.shards = n.shards[:len(n.shards)-1]
		return nil, err
	}
	n.log.Info("site network grew a bridge", "bridge", sh.bridge, "subnet", sh.subnet)
	return sh, nil
}

// Attached lists the ids of sites with a pinned namespace.
func (n *Network) Attached() []string {
	ents, _ := os.ReadDir(filepath.Join(n.cfg.Dir, "netns"))
	var out []string
	for _, e := range ents {
		if isNetNS(n.nsPath(e.Name())) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Remove deletes the nftables tables and the bridges of the network
// name, whatever is attached; missing ones are fine.
func Remove(name string) error {
	var errs []error
	if err := nft(removal("sandboxd_" + name)); err != nil {
		errs = append(errs, err)
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		br := l.Name()
		if br != bridgeName(name, 0) && !strings.HasPrefix(br, bridgeName(name, 0)+"-") {
			continue
		}
		if out, err := exec.Command("ip", "link", "delete", br).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete bridge %s: %v: %s", br, err, out))
		}
	}
	return errors.Join(errs...)
}

// Shutdown, for an agent that stops with its sites, removes every site
// namespace pinned under dir (each site's veth goes with it) and the
// network's policy and bridge. Address leases stay, so a later Attach
// gives each site its address again.
func Shutdown(dir, name string) error {
	var errs []error
	ents, _ := os.ReadDir(filepath.Join(dir, "netns"))
	for _, e := range ents {
		errs = append(errs, removeNetNS(filepath.Join(dir, "netns", e.Name())))
	}
	errs = append(errs, Remove(name))
	return errors.Join(errs...)
}
