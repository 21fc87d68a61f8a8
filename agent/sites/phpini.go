package sites

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// iniValue is what a php.ini override may hold: plain tokens only, so a
// value can never start a new line or section.
var iniValue = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)

// SetPHPConfig replaces a site's php.ini overrides and restarts its web
// server. The control plane validates the directives; the agent refuses
// anything that is not a plain directive = token pair.
func (m *Manager) SetPHPConfig(ctx context.Context, id string, settings map[string]string) (map[string]string, error) {
	defer m.lock(id)()
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	keys := make([]string, 0, len(settings))
	for k, v := range settings {
		if !iniValue.MatchString(k) || !iniValue.MatchString(v) {
			return nil, fmt.Errorf("%w: php.ini %q = %q", ErrInvalid, k, v)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("; Set through the API (php-config); written by the sandbox agent.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	if err := writeOwned(filepath.Join(m.FS(id), "conf", "php", "95-user.ini"), []byte(b.String()), 0o644, 0, 0); err != nil {
		return nil, err
	}
	s.PHPConfig = settings
	if err := m.save(s); err != nil {
		return nil, err
	}
	// mod_php reads php.ini once, when Apache starts (a graceful reload
	// keeps the old values), so the site's container is restarted: files,
	// database and port stay, it is away for well under a second.
	if err := m.cfg.Runtime.Stop(ctx, containerID(id), 10*time.Second); err != nil {
		return nil, err
	}
	netns, err := m.attach(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := m.cfg.Runtime.Run(ctx, m.spec(s, netns)); err != nil {
		return nil, err
	}
	if err := m.waitReady(ctx, s); err != nil {
		return nil, err
	}
	return settings, nil
}
