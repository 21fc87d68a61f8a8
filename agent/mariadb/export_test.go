package mariadb

import "database/sql"

// Root is the server's administrative pool, for tests that look behind
// a method.
func (s *Server) Root() *sql.DB { return s.db }

// DataDirForTests is the server's data directory on the host.
func (s *Server) DataDirForTests() string { return s.dataDB() }
