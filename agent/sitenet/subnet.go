package sitenet

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// pool is where default subnets come from: 64 blocks of /22 (1,022 sites
// each).
var pool = netip.MustParsePrefix("10.200.0.0/16")

const blockBits = 22

func block(i int) netip.Prefix {
	a := pool.Addr().As4()
	v := binary.BigEndian.Uint32(a[:]) + uint32(i)<<(32-blockBits)
	binary.BigEndian.PutUint32(a[:], v)
	return netip.PrefixFrom(netip.AddrFrom4(a), blockBits)
}

func blocks() int { return 1 << (blockBits - pool.Bits()) }

// chooseSubnets returns the configured subnet, the ones chosen before
// (one per bridge, in order), or a free block of the pool for the first
// bridge: not on a route of the host (other than this network's own
// bridges) and not held by another agent.
func (n *Network) chooseSubnets() ([]netip.Prefix, error) {
	if n.cfg.Subnet.IsValid() {
		return []netip.Prefix{n.cfg.Subnet.Masked()}, nil
	}
	if n.cfg.Claims == nil {
		return nil, errors.New("sitenet: no subnet and no claim registry to choose one")
	}
	file := n.subnetFile()
	if b, err := os.ReadFile(file); err == nil {
		var out []netip.Prefix
		for _, line := range strings.Fields(string(b)) {
			p, err := netip.ParsePrefix(line)
			if err != nil {
				return nil, fmt.Errorf("sitenet: %s: %w", file, err)
			}
			if i := indexOf(p); i >= 0 {
				if err := n.cfg.Claims.ClaimNumber(i, file); err != nil {
					return nil, fmt.Errorf("sitenet: subnet %s of this agent: %w", p, err)
				}
			}
			out = append(out, p)
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	p, err := n.claimSubnet(0)
	if err != nil {
		return nil, err
	}
	return []netip.Prefix{p}, nil
}

func (n *Network) subnetFile() string { return filepath.Join(n.cfg.Dir, "subnet") }

// claimSubnet claims a free block of the pool for the network's bridge
// i and records it after the ones before. An operator's subnet is the
// only one: when it is full, it is full.
func (n *Network) claimSubnet(i int) (netip.Prefix, error) {
	if n.cfg.Subnet.IsValid() {
		return netip.Prefix{}, fmt.Errorf("sitenet: the site subnet %s is full; give the node a larger one, or none (bridges are then added by the thousand)", n.cfg.Subnet)
	}
	routes, err := hostRoutes(n.cfg.Name)
	if err != nil {
		return netip.Prefix{}, err
	}
	file := n.subnetFile()
	taken := map[int]bool{}
	for _, k := range n.cfg.Claims.Others(file) {
		taken[k] = true
	}
	mine := map[netip.Prefix]bool{}
	if b, err := os.ReadFile(file); err == nil {
		for _, line := range strings.Fields(string(b)) {
			if p, err := netip.ParsePrefix(line); err == nil {
				mine[p] = true
			}
		}
	}
	for k := 0; k < blocks(); k++ {
		p := block(k)
		if taken[k] || mine[p] || overlapsAny(p, routes) {
			continue
		}
		if err := n.cfg.Claims.ClaimNumber(k, file); err != nil {
			continue // another agent won the race for it
		}
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err == nil {
			_, err = fmt.Fprintln(f, p)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("sitenet: %w", err)
		}
		return p, nil
	}
	return netip.Prefix{}, fmt.Errorf("sitenet: no free /%d left in %s for bridge %d; set a subnet", blockBits, pool, i)
}

func indexOf(p netip.Prefix) int {
	for i := 0; i < blocks(); i++ {
		if block(i) == p {
			return i
		}
	}
	return -1
}

func overlapsAny(p netip.Prefix, routes []netip.Prefix) bool {
	for _, r := range routes {
		if r.Bits() > 0 && r.Overlaps(p) {
			return true
		}
	}
	return false
}

// hostRoutes reads the host's IPv4 routes from /proc/net/route, leaving
// out those on the bridges of the network name (its own).
func hostRoutes(name string) ([]netip.Prefix, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, fmt.Errorf("sitenet: %w", err)
	}
	defer f.Close()
	var out []netip.Prefix
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 || fs[0] == bridgeName(name, 0) || strings.HasPrefix(fs[0], bridgeName(name, 0)+"-") {
			continue
		}
		dst, err1 := leHex(fs[1])
		mask, err2 := leHex(fs[7])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, netip.PrefixFrom(netip.AddrFrom4(dst), maskBits(mask)).Masked())
	}
	return out, sc.Err()
}

// leHex decodes /proc/net/route's little-endian hex IPv4 fields.
func leHex(s string) ([4]byte, error) {
	var a [4]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return a, fmt.Errorf("bad route field %q", s)
	}
	a[0], a[1], a[2], a[3] = b[3], b[2], b[1], b[0]
	return a, nil
}

// maskBits counts the leading ones of a mask given in network order.
func maskBits(a [4]byte) int {
	v, n := binary.BigEndian.Uint32(a[:]), 0
	for v&0x80000000 != 0 {
		n++
		v <<= 1
	}
	return n
}
