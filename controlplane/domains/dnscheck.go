package domains

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Resolver asks one DNS server (the operator's, or the machine's first
// nameserver) for records, the way a browser's resolver would see them.
// Its answers are the records themselves, so a check can tell a CNAME
// from the addresses it leads to.
type Resolver struct {
	// Server is host:port of a recursive resolver.
	Server string
	// Timeout bounds one query; zero means 3s.
	Timeout time.Duration
}

// NewResolver returns a resolver asking server (host:port); empty means
// the first nameserver in /etc/resolv.conf.
func NewResolver(server string) (*Resolver, error) {
	if server == "" {
		conf, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil || len(conf.Servers) == 0 {
			return nil, fmt.Errorf("dns resolver: no nameserver in /etc/resolv.conf; give one with --dns-resolver")
		}
		server = net.JoinHostPort(conf.Servers[0], conf.Port)
	}
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, "53")
	}
	return &Resolver{Server: server}, nil
}

// errNoName is a name DNS says does not exist.
var errNoName = errors.New("no such name")

// lookup asks for one record type of name and returns the answer
// section's records of that type (a CNAME query returns only the name's
// own CNAME).
func (r *Resolver) lookup(ctx context.Context, name string, qtype uint16) ([]dns.RR, error) {
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.RecursionDesired = true
	m.SetEdns0(4096, false)
	c := &dns.Client{Net: "udp", Timeout: timeout}
	in, _, err := c.ExchangeContext(ctx, m, r.Server)
	if err == nil && in.Truncated {
		c.Net = "tcp"
		in, _, err = c.ExchangeContext(ctx, m, r.Server)
	}
	if err != nil {
		return nil, fmt.Errorf("the DNS lookup of %s did not answer (%v)", name, shortNetErr(err))
	}
	switch in.Rcode {
	case dns.RcodeSuccess:
	case dns.RcodeNameError:
		return nil, errNoName
	default:
		return nil, fmt.Errorf("the DNS lookup of %s failed (%s)", name, dns.RcodeToString[in.Rcode])
	}
	var out []dns.RR
	for _, rr := range in.Answer {
		if rr.Header().Rrtype == qtype && strings.EqualFold(dns.Fqdn(rr.Header().Name), dns.Fqdn(name)) {
			out = append(out, rr)
		}
	}
	return out, nil
}

func shortNetErr(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	return err.Error()
}

// cname returns the target of name's CNAME record ("" without one).
func (r *Resolver) cname(ctx context.Context, name string) (string, error) {
	rrs, err := r.lookup(ctx, name, dns.TypeCNAME)
	if err != nil {
		return "", err
	}
	for _, rr := range rrs {
		if c, ok := rr.(*dns.CNAME); ok {
			return canonical(c.Target), nil
		}
	}
	return "", nil
}

// addrs returns name's A and AAAA addresses.
func (r *Resolver) addrs(ctx context.Context, name string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
		rrs, err := r.lookup(ctx, name, t)
		if err != nil {
			return nil, err
		}
		for _, rr := range rrs {
			switch v := rr.(type) {
			case *dns.A:
				if a, ok := netip.AddrFromSlice(v.A.To4()); ok {
					out = append(out, a)
				}
			case *dns.AAAA:
				if a, ok := netip.AddrFromSlice(v.AAAA); ok {
					out = append(out, a)
				}
			}
		}
	}
	return out, nil
}

// txt returns name's TXT strings (each record's strings joined).
func (r *Resolver) txt(ctx context.Context, name string) ([]string, error) {
	rrs, err := r.lookup(ctx, name, dns.TypeTXT)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rr := range rrs {
		if t, ok := rr.(*dns.TXT); ok {
			out = append(out, strings.Join(t.Txt, ""))
		}
	}
	return out, nil
}

func canonical(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// maxCNAMEHops bounds how far a chain of CNAMEs is followed.
const maxCNAMEHops = 8

// checkCNAME reports whether host leads to target through its CNAME
// chain; the error says, in a customer's words, what DNS shows instead.
func (r *Resolver) checkCNAME(ctx context.Context, host, target string) error {
	name := host
	var chain []string
	for range maxCNAMEHops {
		next, err := r.cname(ctx, name)
		switch {
		case errors.Is(err, errNoName) && name == host:
			return fmt.Errorf("%s does not exist in DNS yet: add a CNAME record for it with the value %s", host, target)
		case errors.Is(err, errNoName):
			return fmt.Errorf("%s has a CNAME record to %s, which does not exist: point it at %s instead", host, strings.Join(chain, " → "), target)
		case err != nil:
			return err
		}
		if next == "" {
			break
		}
		if next == target {
			return nil
		}
		chain, name = append(chain, next), next
	}
	if len(chain) > 0 {
		return fmt.Errorf("%s has a CNAME record to %s, not to %s: change its value to %s", host, strings.Join(chain, " → "), target, target)
	}
	addrs, err := r.addrs(ctx, host)
	if err != nil && !errors.Is(err, errNoName) {
		return err
	}
	if len(addrs) > 0 {
		return fmt.Errorf("%s has address records (%s) but no CNAME record: replace them with a CNAME record with the value %s", host, joinAddrs(addrs), target)
	}
	return fmt.Errorf("%s has no CNAME record yet: add one with the value %s (DNS changes can take a few minutes to be seen)", host, target)
}

// checkApex reports whether an apex host's addresses are all edge
// addresses and its TXT record proves the connection.
func (r *Resolver) checkApex(ctx context.Context, host string, edges []netip.Addr, txtName, txtValue string) error {
	addrs, err := r.addrs(ctx, host)
	switch {
	case errors.Is(err, errNoName):
		return fmt.Errorf("%s does not exist in DNS yet: add A records with the values %s", host, joinAddrs(edges))
	case err != nil:
		return err
	case len(addrs) == 0:
		return fmt.Errorf("%s has no A or AAAA record yet: add A records with the values %s", host, joinAddrs(edges))
	}
	var other []netip.Addr
	for _, a := range addrs {
		if !slices.Contains(edges, a.Unmap()) {
			other = append(other, a)
		}
	}
	if len(other) > 0 {
		return fmt.Errorf("%s points at %s, which is not this service: its A/AAAA records must be exactly %s", host, joinAddrs(other), joinAddrs(edges))
	}
	return r.checkTXT(ctx, txtName, txtValue)
}

// checkTXT reports whether name has a TXT record of value; the error
// says what is missing.
func (r *Resolver) checkTXT(ctx context.Context, name, value string) error {
	txts, err := r.txt(ctx, name)
	if err != nil && !errors.Is(err, errNoName) {
		return err
	}
	if !slices.Contains(txts, value) {
		return fmt.Errorf("the TXT record %s with the value %s is missing: it proves the domain is yours", name, value)
	}
	return nil
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
