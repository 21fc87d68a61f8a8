package promtest

import "regexp"

// addressPatterns find what must never reach an unauthenticated caller:
// URLs, IPv4 and bracketed IPv6 addresses (with or without a port) and
// host:port pairs.
var addressPatterns = []*regexp.Regexp{
	regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>]+`),
	regexp.MustCompile(`\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b`),
	regexp.MustCompile(`\[[0-9a-fA-F:.]*:[0-9a-fA-F:.]*\](?::\d+)?`),
	regexp.MustCompile(`\b(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+):\d{1,5}\b`),
}

// Addresses lists the URLs and network addresses found in text, each
// once.
func Addresses(text string) []string {
	var out []string
	seen := map[string]bool{}
	for _, re := range addressPatterns {
		for _, a := range re.FindAllString(text, -1) {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}
