package mariadb

import "database/sql"

// Root is the server's administrative pool, for tests that look behind
// a method.
func (s *Server) Root() *sql.DB { return s.db }

// DataDirForTests is the server's data directory on the host.
func (s *Server) DataDirForTests() string { return s.dataDB() }

// SetLockBoundsForTests sets the lock memory bounds (all sites', one
// site's) and returns a func that puts the defaults back.
func SetLockBoundsForTests(high, site int64) func() {
	h, st := lockHighBytes, siteLockBytes
	lockHighBytes, siteLockBytes = high, site
	return func() { lockHighBytes, siteLockBytes = h, st }
}
