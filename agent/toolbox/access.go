package toolbox

import (
	"fmt"
	"path/filepath"

	"github.com/sandboxd/sandboxd/agent/sites"
)

// Access is where an SSH or SFTP session of a site works: its container,
// its user, and its WordPress root (on the host, for the SFTP jail, and
// inside the container, for shells).
type Access struct {
	Container string
	UID       int
	// Root is the host path of the WordPress root: a directory in the
	// site's disk, whose own root is the agent's (0700), so the site
	// cannot swap the name for a link.
	Root string
	// Cwd is the WordPress root inside the container.
	Cwd string
}

// Access returns a site's session access; a stopped site or one of an
// older agent (no uid of its own) has none.
func (b *Box) Access(id string) (*Access, error) {
	s := b.sites.Get(id)
	switch {
	case s == nil:
		return nil, sites.ErrNotFound
	case s.UID <= 0:
		return nil, fmt.Errorf("%w: site %s was made by an older agent; delete and recreate it", sites.ErrInvalid, id)
	case s.Stopped:
		return nil, fmt.Errorf("%w: site %s is stopped", sites.ErrInvalid, id)
	}
	return &Access{Container: sites.ContainerID(id), UID: s.UID, Root: filepath.Join(b.sites.Data(id), "wordpress"), Cwd: "/srv/site/wordpress"}, nil
}
