// Package mirror maps the remote URLs a Blueprint names (wordpress.org
// downloads, code hosts, any host) to an operator's mirror: clusters
// behind an egress proxy or without internet fetch resources from it. A
// rule maps a host, and optionally a path under it, to a base URL; the
// rest of the path and the query are kept.
package mirror

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// Mirror maps URLs by its rules; Direct says whether an unmapped URL may
// be fetched as it is.
type Mirror struct {
	rules  []rule
	Direct bool
}

type rule struct {
	host, path string
	to         *url.URL
}

// ErrNotMirrored refuses an unmapped URL when direct fetches are off.
var ErrNotMirrored = errors.New("not mirrored, and this cluster fetches resources only through its mirror")

// Parse reads rules "host[/path]=base-URL", comma-separated, e.g.
// "downloads.wordpress.org=http://10.0.0.5/wporg,raw.githubusercontent.com=http://10.0.0.5/gh".
// direct allows unmapped URLs.
func Parse(spec string, direct bool) (*Mirror, error) {
	m := &Mirror{Direct: direct}
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		from, to, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("mirror rule %q is not host=URL", f)
		}
		host, p, _ := strings.Cut(strings.TrimSpace(from), "/")
		host = strings.ToLower(host)
		if host == "" || strings.ContainsAny(host, ":@ ") {
			return nil, fmt.Errorf("mirror rule %q: %q is not a host name", f, host)
		}
		u, err := url.Parse(strings.TrimSpace(to))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("mirror rule %q: %q is not an http(s) base URL", f, to)
		}
		u.Path = strings.TrimRight(u.Path, "/")
		m.rules = append(m.rules, rule{host: host, path: strings.Trim(p, "/"), to: u})
	}
	// The longest path wins.
	sort.SliceStable(m.rules, func(i, j int) bool { return len(m.rules[i].path) > len(m.rules[j].path) })
	return m, nil
}

// Map returns the URL to fetch for raw, and whether a rule mapped it.
func (m *Mirror) Map(raw string) (string, bool) {
	if m == nil {
		return raw, false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw, false
	}
	host := strings.ToLower(u.Hostname())
	p := strings.TrimPrefix(u.EscapedPath(), "/")
	for _, r := range m.rules {
		if r.host != host {
			continue
		}
		rest := p
		if r.path != "" {
			if rest != r.path && !strings.HasPrefix(rest, r.path+"/") {
				continue
			}
			rest = strings.TrimPrefix(strings.TrimPrefix(rest, r.path), "/")
		}
		out := *r.to
		joined := out.EscapedPath() + "/" + rest
		if pu, err := url.Parse(joined); err == nil {
			out.Path, out.RawPath = pu.Path, pu.RawPath
		}
		out.RawQuery = u.RawQuery
		return out.String(), true
	}
	return raw, false
}

// ErrDotSegment refuses a URL whose path climbs with . or .. segments,
// which a mirror would resolve outside the mapped directory.
var ErrDotSegment = errors.New("the URL's path has . or .. segments")

// Resolve is the URL to fetch for raw and whether the mirror maps it, or
// ErrNotMirrored, or ErrDotSegment.
func (m *Mirror) Resolve(raw string) (string, bool, error) {
	if u, err := url.Parse(raw); err == nil {
		for _, seg := range strings.Split(u.Path, "/") {
			if seg == "." || seg == ".." {
				return "", false, ErrDotSegment
			}
		}
	}
	to, ok := m.Map(raw)
	if !ok && m != nil && !m.Direct {
		return "", false, ErrNotMirrored
	}
	return to, ok, nil
}

// Targets are the hosts (host or host:port) the rules map to.
func (m *Mirror) Targets() []string {
	if m == nil {
		return nil
	}
	var out []string
	for _, r := range m.rules {
		out = append(out, r.to.Hostname())
	}
	return out
}
