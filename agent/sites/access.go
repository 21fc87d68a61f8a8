package sites

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
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
func (m *Manager) Access(id string) (*Access, error) {
	s := m.get(id)
	switch {
	case s == nil:
		return nil, ErrNotFound
	case s.UID <= 0:
		return nil, fmt.Errorf("%w: site %s was made by an older agent; delete and recreate it", ErrInvalid, id)
	case s.Stopped:
		return nil, fmt.Errorf("%w: site %s is stopped", ErrInvalid, id)
	}
	return &Access{Container: containerID(id), UID: s.UID, Root: filepath.Join(m.Data(id), "wordpress"), Cwd: "/srv/site/wordpress"}, nil
}

// Backend is host:port of a running site's web server on this node, for
// the node's ingress; false for a site not here (or stopped, or pooled
// and not yet claimed — the control plane routes only claimed sites).
func (m *Manager) Backend(id string) (string, bool) {
	s := m.get(id)
	if s == nil || s.Stopped || s.IP == "" || s.Port == 0 {
		return "", false
	}
	return net.JoinHostPort(s.IP, strconv.Itoa(s.Port)), true
}
