// Package sitenet gives every site a network namespace of its own on a
// bridge of its agent (CNI bridge + host-local IPAM, Debian's
// containernetworking-plugins, driven through libcni), and holds the
// node's egress policy for that bridge in nftables: a site reaches
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

// Network is an agent's site bridge and policy.
type Network struct {
	cfg    Config
	log    *slog.Logger
	bridge string
	table  string
	subnet netip.Prefix
	cni    *libcni.CNIConfig
	list   *libcni.NetworkConfigList
	lo     *libcni.PluginConfig
	mu     sync.Mutex
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
	n := &Network{cfg: cfg, log: cfg.Logger.With("component", "sitenet"), bridge: "sbx" + cfg.Name, table: "sandboxd_" + cfg.Name}
	var err error
	if n.subnet, err = n.chooseSubnet(); err != nil {
		return nil, err
	}
	if err := n.loadConf(); err != nil {
		return nil, err
	}
	n.cni = libcni.NewCNIConfigWithCacheDir(cfg.PluginDirs, filepath.Join(cfg.Dir, "cache"), nil)
	script, err := ruleset(n.table, n.bridge, n.subnet, cfg.Egress == EgressPublic, cfg.Allow)
	if err != nil {
		return nil, err
	}
	if err := nft(script); err != nil {
		return nil, fmt.Errorf("sitenet: install policy: %w", err)
	}
	n.log.Info("site network ready", "bridge", n.bridge, "subnet", n.subnet, "egress", cfg.Egress, "allow", len(cfg.Allow))
	return n, nil
}

func found(dirs []string, plugin string) bool {
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, plugin)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// Subnet is the sites' subnet.
func (n *Network) Subnet() netip.Prefix { return n.subnet }

// Bridge is the host-side bridge's name.
func (n *Network) Bridge() string { return n.bridge }

func (n *Network) loadConf() error {
	routes := []map[string]string{}
	if n.cfg.Egress == EgressPublic {
		routes = append(routes, map[string]string{"dst": "0.0.0.0/0"})
	} else {
		// Without public egress a site has no default route (a connection
		// fails at once instead of timing out), only routes to what is
		// allow-listed.
		for _, a := range n.cfg.Allow {
			if !n.subnet.Overlaps(a.Prefix) {
				routes = append(routes, map[string]string{"dst": a.Prefix.String()})
			}
		}
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "sandboxd-" + n.cfg.Name,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": n.bridge, "isGateway": true, "ipMasq": false, "hairpinMode": false,
			"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(n.cfg.Dir, "ipam"),
				"ranges": [][]map[string]string{{{"subnet": n.subnet.String()}}}, "routes": routes},
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
		return err
	}
	if n.list, err = libcni.NetworkConfFromBytes(b); err != nil {
		return fmt.Errorf("sitenet: conf: %w", err)
	}
	if n.lo, err = libcni.NetworkPluginConfFromBytes([]byte(`{"cniVersion":"1.0.0","name":"sandboxd-lo","type":"loopback"}`)); err != nil {
		return fmt.Errorf("sitenet: loopback conf: %w", err)
	}
	return nil
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
		if res, err := n.cni.GetNetworkListCachedResult(n.list, n.rt(id, path, netip.Addr{})); err == nil && res != nil {
			if ip, err := firstIP(res); err == nil {
				return Attachment{NetNS: path, IP: ip}, nil
			}
		}
	}
	// Whatever is left of an earlier attachment goes first.
	_ = n.cni.DelNetworkList(ctx, n.list, n.rt(id, path, netip.Addr{}))
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
	res, err := n.cni.AddNetworkList(ctx, n.list, n.rt(id, path, want))
	if err != nil && want.IsValid() {
		// The old address is taken or outside the subnet: take any.
		n.log.Warn("site address not available again; taking a new one", "site_id", id, "want", want, "err", err)
		res, err = n.cni.AddNetworkList(ctx, n.list, n.rt(id, path, netip.Addr{}))
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
	if out, err := exec.CommandContext(ctx, "ip", "neigh", "flush", "to", ip.String(), "dev", n.bridge).CombinedOutput(); err != nil {
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
	err := n.cni.DelNetworkList(ctx, n.list, n.rt(id, path, netip.Addr{}))
	if err != nil && isNetNS(path) {
		return fmt.Errorf("sitenet: detach %s: %w", id, err)
	}
	return removeNetNS(path)
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

// Remove deletes the nftables tables and the bridge of the network name,
// whatever is attached; missing ones are fine.
func Remove(name string) error {
	var errs []error
	if err := nft(removal("sandboxd_" + name)); err != nil {
		errs = append(errs, err)
	}
	br := "sbx" + name
	if _, err := os.Stat("/sys/class/net/" + br); err == nil {
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
