package mariadb

import "database/sql"

// Root is the server's administrative pool, for tests that look behind
// a method.
func (s *Server) Root() *sql.DB { return s.db }
