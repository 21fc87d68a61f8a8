package sites

import (
	"encoding/json"
	"net"
	"strconv"
	"time"
)

// DBAccess is a site's own database and the credentials that reach only it.
type DBAccess struct {
	Host     string
	Port     int
	Name     string
	User     string
	Password string
}

func (m *Manager) dbHostPort() (string, int) {
	host, port, err := net.SplitHostPort(m.cfg.DB.Addr())
	if err != nil {
		return m.cfg.DB.Addr(), 0
	}
	p, _ := strconv.Atoi(port)
	return host, p
}

// Database returns a site's database credentials.
func (m *Manager) Database(id string) (DBAccess, error) {
	s := m.get(id)
	if s == nil {
		return DBAccess{}, ErrNotFound
	}
	host, port := m.dbHostPort()
	return DBAccess{Host: host, Port: port, Name: s.DBName, User: s.DBUser, Password: s.DBPassword}, nil
}

// AddAdminerToken stores a one-time token (by its SHA-256) that signs the
// site's database UI in once before expires.
func (m *Manager) AddAdminerToken(id, tokenHash string, expires time.Time) error {
	s := m.get(id)
	if s == nil {
		return ErrNotFound
	}
	if !hashRE.MatchString(tokenHash) {
		return ErrInvalid
	}
	b, _ := json.Marshal(map[string]any{"expires": expires.Unix(), "minted": time.Now().UnixNano()})
	return m.writeToken(s, "adminer-"+tokenHash+".json", b)
}
