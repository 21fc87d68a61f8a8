package toolbox

import (
	"context"
	"fmt"
	"regexp"

	"github.com/sandboxd/sandboxd/agent/sites"
)

// iniValue is what a php.ini override may hold: plain tokens only, so a
// value can never start a new line or section.
var iniValue = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)

// SetPHPConfig replaces a site's php.ini overrides and restarts its web
// server. The control plane validates the directives; the agent refuses
// anything that is not a plain directive = token pair.
//
// mod_php reads php.ini once, when Apache starts (a graceful reload
// keeps the old values), so the site's container is made again: files,
// database and port stay, it is away for well under a second, and
// settings it does not come up with are rolled back.
func (b *Box) SetPHPConfig(ctx context.Context, id string, settings map[string]string) (map[string]string, error) {
	for k, v := range settings {
		if !iniValue.MatchString(k) || !iniValue.MatchString(v) {
			return nil, fmt.Errorf("%w: php.ini %q = %q", sites.ErrInvalid, k, v)
		}
	}
	if _, err := b.sites.Recreate(ctx, id, func(s *sites.Site) error {
		s.PHPConfig = settings
		return nil
	}); err != nil {
		return nil, err
	}
	return settings, nil
}
