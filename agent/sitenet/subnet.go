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

// chooseSubnet returns the configured subnet, the one chosen before, or a
// free block of the pool: not on a route of the host (other than this
// network's own bridge) and not held by another agent.
func (n *Network) chooseSubnet() (netip.Prefix, error) {
	if n.cfg.Subnet.IsValid() {
		return n.cfg.Subnet.Masked(), nil
	}
	if n.cfg.Claims == nil {
		return netip.Prefix{}, errors.New("sitenet: no subnet and no claim registry to choose one")
	}
	file := filepath.Join(n.cfg.Dir, "subnet")
	if b, err := os.ReadFile(file); err == nil {
		p, err := netip.ParsePrefix(strings.TrimSpace(string(b)))
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("sitenet: %s: %w", file, err)
		}
		if i := indexOf(p); i >= 0 {
			if err := n.cfg.Claims.ClaimNumber(i, file); err != nil {
				return netip.Prefix{}, fmt.Errorf("sitenet: subnet %s of this agent: %w", p, err)
			}
		}
		return p, nil
	}
	routes, err := hostRoutes(n.bridge)
	if err != nil {
		return netip.Prefix{}, err
	}
	taken := map[int]bool{}
	for _, i := range n.cfg.Claims.Others(file) {
		taken[i] = true
	}
	for i := 0; i < blocks(); i++ {
		p := block(i)
		if taken[i] || overlapsAny(p, routes) {
			continue
		}
		if err := os.WriteFile(file, []byte(p.String()+"\n"), 0o600); err != nil {
			return netip.Prefix{}, fmt.Errorf("sitenet: %w", err)
		}
		if err := n.cfg.Claims.ClaimNumber(i, file); err != nil {
			os.Remove(file) // another agent won the race for it
			continue
		}
		return p, nil
	}
	return netip.Prefix{}, fmt.Errorf("sitenet: no free /%d left in %s; set a subnet", blockBits, pool)
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
// out those on skip (this network's own bridge).
func hostRoutes(skip string) ([]netip.Prefix, error) {
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
		if len(fs) < 8 || fs[0] == skip {
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
