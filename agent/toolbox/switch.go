package toolbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/agent/sites"
)

// SwitchPHPVersion moves a site to another PHP runtime. The new container
// must bring WordPress up before the switch counts; on any failure the
// site is put back on its previous runtime and keeps serving. A version
// with no image fails before anything is touched.
func (b *Box) SwitchPHPVersion(ctx context.Context, id, version string) (*sites.Site, error) {
	s := b.sites.Get(id)
	if s == nil {
		return nil, sites.ErrNotFound
	}
	if s.PHPVersion == version {
		return s, nil
	}
	img, err := b.sites.Image(ctx, version)
	if err != nil {
		return nil, err
	}
	was := s.PHPVersion
	s, err = b.sites.Recreate(ctx, id, func(s *sites.Site) error {
		was = s.PHPVersion
		s.PHPVersion, s.Image = version, img
		return nil
	})
	if errors.Is(err, sites.ErrRolledBack) {
		return nil, fmt.Errorf("%w: PHP %s did not come up, the site is back on PHP %s: %w", ErrSwitchFailed, version, was, err)
	}
	if err != nil {
		return nil, fmt.Errorf("switch to PHP %s failed: %w", version, err)
	}
	return s, nil
}

// ErrSwitchFailed is a PHP switch that was rolled back.
var ErrSwitchFailed = errors.New("php switch rolled back")
