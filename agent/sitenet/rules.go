package sitenet

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"text/template"
)

// blockedV4 is every range a site must not reach even with public egress:
// this-network, private, CGNAT, loopback, link-local (cloud metadata),
// IETF protocol assignments, documentation, 6to4 relay, benchmarking,
// multicast and reserved (broadcast included).
var blockedV4 = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
	"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
}

// Allow is one destination sites may reach despite the policy: a prefix
// and, if Port is not 0, only that TCP port.
type Allow struct {
	Prefix netip.Prefix
	Port   uint16
}

// ParseAllow reads ADDR[/BITS][:PORT] (IPv4).
func ParseAllow(s string) (Allow, error) {
	var a Allow
	host, port := s, ""
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i+1:]
	}
	if !strings.Contains(host, "/") {
		host += "/32"
	}
	p, err := netip.ParsePrefix(host)
	if err != nil || !p.Addr().Is4() {
		return a, fmt.Errorf("allow %q: want an IPv4 ADDR[/BITS][:PORT]", s)
	}
	a.Prefix = p.Masked()
	if port != "" {
		var n int
		if _, err := fmt.Sscanf(port, "%d", &n); err != nil || n < 1 || n > 65535 {
			return a, fmt.Errorf("allow %q: bad port", s)
		}
		a.Port = uint16(n)
	}
	return a, nil
}

func (a Allow) String() string {
	if a.Port == 0 {
		return a.Prefix.String()
	}
	return fmt.Sprintf("%s:%d", a.Prefix, a.Port)
}

// match is the nft expression of the destination.
func (a Allow) match() string {
	if a.Port == 0 {
		return "ip daddr " + a.Prefix.String()
	}
	return fmt.Sprintf("ip daddr %s tcp dport %d", a.Prefix, a.Port)
}

// The policy, for traffic of the sites' bridge only (everything else on
// the node is untouched): a site opens no connection to the node itself
// (whatever the address: API, agent, edge, Raft, metrics, DNS); nothing
// from outside opens one into a site (the node's own edge and agent do,
// through the output path); sites do not reach each other (the bridge
// drops IPv4 frames between two addresses of the subnet; the kernel may
// lack bridge-name matching, and sites have IPv6 turned off, so this is
// all that can pass between two ports); egress is none, or public minus every
// blocked range; allow-listed destinations pass first.
var rulesTmpl = template.Must(template.New("nft").Parse(`table inet {{.Table}} {}
delete table inet {{.Table}}
table inet {{.Table}} {
	set blocked {
		type ipv4_addr
		flags interval
		elements = { {{.Blocked}} }
	}
	chain input {
		type filter hook input priority filter - 10; policy accept;
		iifname {{.Bridge}} ct state established,related accept
{{- range .Allow}}
		iifname {{$.Bridge}} {{.}} accept
{{- end}}
		iifname {{.Bridge}} counter drop comment "site to node"
	}
	chain forward {
		type filter hook forward priority filter - 10; policy accept;
		oifname {{.Bridge}} ct state established,related accept
		oifname {{.Bridge}} counter drop comment "into a site from elsewhere"
		iifname {{.Bridge}} ct state established,related accept
{{- range .Allow}}
		iifname {{$.Bridge}} {{.}} accept
{{- end}}
{{- if .Public}}
		iifname {{.Bridge}} meta nfproto ipv6 counter drop
		iifname {{.Bridge}} ip daddr @blocked counter drop comment "site to a private or reserved range"
		iifname {{.Bridge}} accept
{{- else}}
		iifname {{.Bridge}} counter drop comment "egress off"
{{- end}}
	}
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr {{.Subnet}} oifname != {{.Bridge}} masquerade
	}
}
table bridge {{.Table}} {}
delete table bridge {{.Table}}
table bridge {{.Table}} {
	chain forward {
		type filter hook forward priority filter; policy accept;
		ether type ip ip saddr {{.Subnet}} ip daddr {{.Subnet}} counter drop comment "site to site"
	}
}
`))

// ruleset renders the nft script that replaces this network's tables
// atomically (nft -f applies a script as one transaction).
func ruleset(table string, bridges []string, subnets []netip.Prefix, public bool, allow []Allow) (string, error) {
	var matches []string
	for _, a := range allow {
		matches = append(matches, a.match())
	}
	quoted := make([]string, len(bridges))
	for i, br := range bridges {
		quoted[i] = `"` + br + `"`
	}
	nets := make([]string, len(subnets))
	for i, p := range subnets {
		nets[i] = p.String()
	}
	var b bytes.Buffer
	err := rulesTmpl.Execute(&b, map[string]any{"Table": table, "Bridge": "{ " + strings.Join(quoted, ", ") + " }",
		"Subnet": "{ " + strings.Join(nets, ", ") + " }", "Public": public, "Allow": matches, "Blocked": strings.Join(blockedV4, ", ")})
	return b.String(), err
}

// removal is the nft script that deletes this network's tables, present
// or not.
func removal(table string) string {
	return fmt.Sprintf("table inet %[1]s {}\ndelete table inet %[1]s\ntable bridge %[1]s {}\ndelete table bridge %[1]s\n", table)
}

func nft(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
