package sites

import (
	"context"
	"errors"
	"fmt"
)

// SwitchPHPVersion moves a site to another PHP runtime. The new container
// must bring WordPress up before the switch counts; on any failure the
// site is put back on its previous runtime and keeps serving. A version
// with no image fails before anything is touched.
func (m *Manager) SwitchPHPVersion(ctx context.Context, id, version string) (*Site, error) {
	defer m.lock(id)()
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	if s.PHPVersion == version {
		return s, nil
	}
	img, err := m.cfg.Images.PHP(ctx, m.cfg.Runtime, version)
	if err != nil {
		return nil, err
	}
	old := *s
	s.PHPVersion, s.Image = version, img
	if err := m.recreate(ctx, s); err != nil {
		if rerr := m.recreate(context.WithoutCancel(ctx), &old); rerr != nil {
			return nil, fmt.Errorf("switch to PHP %s failed (%w) and so did going back to PHP %s: %w", version, err, old.PHPVersion, rerr)
		}
		return nil, fmt.Errorf("%w: PHP %s did not come up, the site is back on PHP %s: %w", ErrSwitchFailed, version, old.PHPVersion, err)
	}
	return m.get(id), nil
}

// ErrSwitchFailed is a PHP switch that was rolled back.
var ErrSwitchFailed = errors.New("php switch rolled back")

// recreate replaces the site's container with one for s (runtime and web
// server config), keeping its files, database and port, and waits until
// it answers. It saves s only once the site answers.
func (m *Manager) recreate(ctx context.Context, s *Site) error {
	if err := m.cfg.Runtime.Remove(ctx, containerID(s.ID)); err != nil {
		return err
	}
	if err := m.writeFiles(s); err != nil {
		return err
	}
	netns, err := m.attach(ctx, s)
	if err != nil {
		return err
	}
	if err := m.cfg.Runtime.Run(ctx, m.spec(s, netns)); err != nil {
		return err
	}
	if err := m.waitReady(ctx, s); err != nil {
		return err
	}
	return m.save(s)
}
