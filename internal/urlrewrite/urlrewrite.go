// Package urlrewrite moves a WordPress site's content from one URL to
// another without breaking it: the origin is replaced in its plain,
// JSON-escaped, URL-encoded and protocol-relative forms, and inside PHP
// serialize() data the string lengths are rewritten to match, however
// deeply nested (arrays, objects, serialized strings within strings).
// Nothing that is not a match of the old origin is touched: a longer host
// (old.example.com.evil.test), another port or a lookalike path is left
// alone.
package urlrewrite

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Rewriter replaces one site URL with another in values of any shape.
type Rewriter struct {
	pairs   []pair
	hasPort bool
	oldHost string
	// needles are what a value must contain for a rewrite to be possible
	// (the old host in each encoding), for a cheap first test.
	needles []string
	// leadN is how far into any form of the old URL its host lies.
	leadN int
}

// pair is one form of the old URL and what replaces it.
type pair struct {
	old, new string
	// colon is how ':' looks in this form, for the boundary check.
	colon string
}

// New returns a Rewriter from oldURL to newURL: absolute http(s) URLs
// without query or fragment, such as http://a.example:8081 or
// https://example.com/blog.
func New(oldURL, newURL string) (*Rewriter, error) {
	o, err := parse(oldURL)
	if err != nil {
		return nil, fmt.Errorf("old URL: %w", err)
	}
	n, err := parse(newURL)
	if err != nil {
		return nil, fmt.Errorf("new URL: %w", err)
	}
	r := &Rewriter{hasPort: o.Port() != "", oldHost: o.Hostname()}
	oldRest, newRest := o.Host+o.Path, n.Host+n.Path
	newFull := n.Scheme + "://" + newRest
	plain := func(s string) string { return s }
	json := func(s string) string { return strings.ReplaceAll(s, "/", `\/`) }
	encoded := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, ":", "%3A"), "/", "%2F") }
	for _, f := range []struct {
		enc   func(string) string
		colon string
	}{{plain, ":"}, {json, ":"}, {encoded, "%3A"}} {
		// Whole URLs of either scheme become the new URL (scheme included),
		// then what is left, protocol-relative //host, keeps its lack of
		// scheme.
		for _, scheme := range []string{"https://", "http://"} {
			r.pairs = append(r.pairs, pair{old: f.enc(scheme + oldRest), new: f.enc(newFull), colon: f.colon})
		}
		r.pairs = append(r.pairs, pair{old: f.enc("//" + oldRest), new: f.enc("//" + newRest), colon: f.colon})
		r.needles = append(r.needles, strings.ToLower(f.enc(o.Host)))
	}
	r.leadN = r.lead()
	return r, nil
}

func parse(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("must be an http or https URL")
	case u.Host == "" || u.User != nil:
		return nil, errors.New("must name a host and no user")
	case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(raw, "?#"):
		return nil, errors.New("must have no query or fragment")
	}
	u.Host = strings.ToLower(u.Host)
	u.Path = strings.TrimRight(u.Path, "/")
	return u, nil
}

// OldHost is the old URL's host name (no port): every value that can
// hold the old URL contains it, whatever its encoding, so it is the
// filter a database query can apply first.
func (r *Rewriter) OldHost() string { return r.oldHost }

// Contains reports whether s may hold the old URL in some form: false
// means Value would return s unchanged.
func (r *Rewriter) Contains(s string) bool {
	ls := strings.ToLower(s)
	for _, n := range r.needles {
		if strings.Contains(ls, n) {
			return true
		}
	}
	return false
}

// Value rewrites one stored value: PHP-serialized data structurally (its
// lengths fixed), anything else as text.
func (r *Rewriter) Value(s string) string {
	if !r.Contains(s) {
		return s
	}
	if v, ok := r.serialized(s); ok {
		return v
	}
	return r.Text(s)
}

// Text replaces every form of the old URL in s, checking that each match
// ends where a URL's origin (or path) ends.
func (r *Rewriter) Text(s string) string {
	var b strings.Builder
	// Every form of the old URL holds the host (encodings change only
	// ':' and '/'), at most lead bytes in: only the positions up to lead
	// before an occurrence of the host can start a match.
	low := asciiLower(s)
	host := strings.ToLower(r.oldHost)
	lead := r.leadN
	i, last := 0, 0
	for i < len(s) {
		j := strings.Index(low[i:], host)
		if j < 0 {
			break
		}
		j += i
		var p pair
		ok := false
		k := max(i, j-lead)
		for ; k <= j; k++ {
			if p, ok = r.matchAt(s, k); ok {
				break
			}
		}
		if !ok {
			i = j + 1
			continue
		}
		i = k
		if b.Len() == 0 {
			b.Grow(len(s) + 64)
		}
		b.WriteString(s[last:i])
		if p.colon == "%3A" && strings.Contains(s[i:i+len(p.old)], "%2f") {
			b.WriteString(strings.ToLower(p.new)) // keep lower-case escapes
		} else {
			b.WriteString(p.new)
		}
		i += len(p.old)
		last = i
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func (r *Rewriter) matchAt(s string, i int) (pair, bool) {
	for _, p := range r.pairs {
		if !hasPrefixFold(s[i:], p.old) {
			continue
		}
		if r.boundary(s[i+len(p.old):], p.colon) {
			return p, true
		}
	}
	return pair{}, false
}

// hasPrefixFold matches the scheme, host and escapes case-insensitively
// (hosts and percent-escapes are; paths are not, but WordPress paths in
// URLs are lower case almost always, and the new path is what is written).
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// boundary reports whether what follows a match ends the origin: not
// more host (letters, digits, '-', '.', '_'), and no port when the old
// URL has none (another port is another site).
func (r *Rewriter) boundary(rest, colon string) bool {
	if rest == "" {
		return true
	}
	c := rest[0]
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' {
		return false
	}
	if !r.hasPort && hasPrefixFold(rest, colon) {
		after := rest[len(colon):]
		if after != "" && after[0] >= '0' && after[0] <= '9' {
			return false
		}
	}
	return true
}

// lead is the furthest the host lies into any form of the old URL.
func (r *Rewriter) lead() int {
	host := strings.ToLower(r.oldHost)
	n := 0
	for _, p := range r.pairs {
		if k := strings.Index(strings.ToLower(p.old), host); k > n {
			n = k
		}
	}
	return n
}

// asciiLower lowers ASCII letters only, so offsets stay those of s.
func asciiLower(s string) string {
	i := 0
	for i < len(s) && !(s[i] >= 'A' && s[i] <= 'Z') {
		i++
	}
	if i == len(s) {
		return s
	}
	b := []byte(s)
	for ; i < len(b); i++ {
		if c := b[i]; c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}
