package mariadb

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-sql-driver/mysql"
)

// limitedPrivileges are what a site's user keeps on its databases while
// its disk is over its plan: it reads, and it can make room (DELETE,
// DROP and TRUNCATE; a dropped table gives its file back at once).
const limitedPrivileges = "SELECT, DELETE, DROP, LOCK TABLES, SHOW VIEW"

// LimitWrites takes from user every privilege on its databases but
// reading and making room; with limited false it gives everything back.
// Limiting ends the user's connections, since the database privileges a
// connection holds last until it changes database (a running statement
// rolls back). Giving writes back ends none: WordPress connects anew for
// every request, so its next request writes, while ending the connection
// of one in progress would fail it mid-way (500 "Database Error", seen
// even when only connections idle between statements were ended). A
// connection open since before the limit reads until it reconnects or
// changes database. Both are idempotent, and the same call again
// changes nothing.
func (s *Server) LimitWrites(ctx context.Context, user string, limited bool) error {
	if !ident.MatchString(user) {
		return fmt.Errorf("mariadb: invalid user name %q", user)
	}
	grants, err := s.databaseGrants(ctx, user)
	if err != nil {
		return fmt.Errorf("limit writes of %s: %w", user, err)
	}
	changed := false
	for _, g := range grants {
		if g.canWrite == !limited {
			continue
		}
		changed = true
		account := "'" + user + "'@'" + g.host + "'"
		qs := grantSite(g.db, account)
		if limited {
			qs = []string{"REVOKE ALL PRIVILEGES ON " + quoteIdent(g.db) + ".* FROM " + account,
				"GRANT " + limitedPrivileges + " ON " + quoteIdent(g.db) + ".* TO " + account}
		}
		for _, q := range qs {
			if _, err := s.db.ExecContext(ctx, q); err != nil && !isNoSuchGrant(err) {
				return fmt.Errorf("limit writes of %s on %s: %w", user, g.db, err)
			}
		}
	}
	if !changed || !limited {
		return nil
	}
	return s.endConnections(ctx, user)
}

// dbGrant is a user's grant on a database, from one host.
type dbGrant struct {
	db, host string
	canWrite bool
}

// databaseGrants lists user's grants on databases, as the grants name
// them.
func (s *Server) databaseGrants(ctx context.Context, user string) ([]dbGrant, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT Db, Host, Insert_priv FROM mysql.db WHERE User = ?", user)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dbGrant
	for rows.Next() {
		var g dbGrant
		var insert string
		if err := rows.Scan(&g.db, &g.host, &insert); err != nil {
			return nil, err
		}
		// g.db is the grant's pattern (grantName's, or an older agent's
		// unescaped one): the statements below name it as it is.
		if ident.MatchString(grantedName(g.db)) && slices.Contains(siteHosts, g.host) {
			g.canWrite = insert == "Y"
			out = append(out, g)
		}
	}
	return out, rows.Err()
}

// endConnections kills every connection of user.
func (s *Server) endConnections(ctx context.Context, user string) error {
	rows, err := s.db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?", user)
	if err != nil {
		return fmt.Errorf("connections of %s: %w", user, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		// One that ended meanwhile is "unknown thread".
		if _, err := s.db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil && !isUnknownThread(err) {
			return fmt.Errorf("end connection %d of %s: %w", id, user, err)
		}
	}
	return nil
}

func mysqlErr(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// ER_NONEXISTING_GRANT: a REVOKE of a grant that is not there.
func isNoSuchGrant(err error) bool { return mysqlErr(err) == 1141 }

// ER_NO_SUCH_THREAD.
func isUnknownThread(err error) bool { return mysqlErr(err) == 1094 }
