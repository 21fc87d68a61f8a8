package domains

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// profile turns what a person types into the ASCII name DNS and TLS use:
// IDN labels to punycode (UTS #46, transitional off, as browsers do),
// upper case folded, and the rules of hostnames enforced.
var profile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.BidiRule(), idna.ValidateLabels(true),
	idna.StrictDomainName(true), idna.VerifyDNSLength(true))

// Normalize checks a customer's hostname and returns it as the service
// keeps it (lower case, punycode, no trailing dot) and whether it is an
// apex name (a registrable domain, such as example.com, which cannot have
// a CNAME). The error says in words what is wrong.
func Normalize(raw string) (host string, apex bool, err error) {
	s := strings.TrimSpace(raw)
	switch {
	case s == "":
		return "", false, fmt.Errorf("hostname is required")
	case len(s) > 253*4:
		return "", false, fmt.Errorf("hostname is too long")
	case strings.Contains(s, "://"):
		return "", false, fmt.Errorf("give the hostname alone, without a scheme (not %q)", s)
	case strings.ContainsAny(s, "/?#"):
		return "", false, fmt.Errorf("give the hostname alone, without a path, query or fragment")
	case strings.Contains(s, "@"):
		return "", false, fmt.Errorf("give the hostname alone, without a user")
	case strings.Contains(s, "*"):
		return "", false, fmt.Errorf("wildcard names cannot be connected; connect each hostname on its own")
	case strings.HasPrefix(s, "["):
		return "", false, fmt.Errorf("an IP address is not a hostname")
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return "", false, fmt.Errorf("an IP address is not a hostname")
	}
	if strings.Contains(s, ":") {
		return "", false, fmt.Errorf("give the hostname alone, without a port")
	}
	s = strings.TrimSuffix(s, ".")
	host, err = profile.ToASCII(s)
	if err != nil {
		return "", false, fmt.Errorf("%q is not a valid hostname", raw)
	}
	host = strings.ToLower(host)
	if _, err := netip.ParseAddr(host); err == nil {
		return "", false, fmt.Errorf("an IP address is not a hostname")
	}
	labels := strings.Split(host, ".")
	if len(labels) < 2 {
		return "", false, fmt.Errorf("%q is not a full domain name (such as shop.example.com)", raw)
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") || strings.Contains(l, "_") {
			return "", false, fmt.Errorf("%q is not a valid hostname", raw)
		}
	}
	// A public suffix (com, co.uk, github.io) is nobody's to connect.
	suffix, icann := publicsuffix.PublicSuffix(host)
	if suffix == host {
		return "", false, fmt.Errorf("%s is a public suffix, not a domain of yours", host)
	}
	if !icann && !strings.Contains(suffix, ".") {
		return "", false, fmt.Errorf("%s is not under a known top-level domain", host)
	}
	switch labels[len(labels)-1] {
	case "localhost", "local", "internal", "invalid", "test", "example", "arpa", "onion":
		return "", false, fmt.Errorf("%s is a reserved name that has no public DNS", host)
	}
	registrable, err := publicsuffix.EffectiveTLDPlusOne(host)
	if err != nil {
		return "", false, fmt.Errorf("%q is not a valid hostname", raw)
	}
	return host, registrable == host, nil
}
