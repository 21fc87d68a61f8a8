package sites

import (
	"net"
	"strconv"
)

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
