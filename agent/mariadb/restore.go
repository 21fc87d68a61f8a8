package mariadb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// SitePrefix is the table prefix every site's wp-config.php names.
const SitePrefix = "wp_"

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_]{1,32}$`)

// StageDatabase makes an empty staging database in volume (the site's:
// see AttachVolume; "" for the data directory) that a site's user may
// fill (an import loads its dump there, over the site's own account,
// before it takes the site's place). An old one of the name goes first.
func (s *Server) StageDatabase(ctx context.Context, volume, staging, user string) error {
	if !ident.MatchString(staging) || !ident.MatchString(user) {
		return fmt.Errorf("mariadb: invalid database or user name %q/%q", staging, user)
	}
	if err := s.dropDatabase(ctx, staging); err != nil {
		return fmt.Errorf("stage database %s: %w", staging, err)
	}
	if volume != "" {
		if err := s.place(staging, volume); err != nil {
			return fmt.Errorf("stage database %s: %w", staging, err)
		}
	}
	qs := []string{"CREATE DATABASE IF NOT EXISTS " + quoteIdent(staging) + " CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"}
	for _, host := range siteHosts {
		qs = append(qs, grantSite(grantName(staging), "'"+user+"'@'"+host+"'")...)
	}
	for _, q := range qs {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("stage database %s: %w", staging, err)
		}
	}
	return nil
}

// DropStaging removes a staging database and the user's grant on it;
// missing ones are fine.
func (s *Server) DropStaging(ctx context.Context, staging, user string) error {
	if !ident.MatchString(staging) || !ident.MatchString(user) {
		return fmt.Errorf("mariadb: invalid database or user name %q/%q", staging, user)
	}
	for _, host := range siteHosts {
		// A grant that is not there is an error; it is gone either way
		// (an older agent's is unescaped: see grantName).
		for _, name := range []string{grantName(staging), staging} {
			_, _ = s.db.ExecContext(ctx, "REVOKE ALL PRIVILEGES ON "+quoteIdent(name)+".* FROM '"+user+"'@'"+host+"'")
		}
	}
	if err := s.dropDatabase(ctx, staging); err != nil {
		return fmt.Errorf("drop staging %s: %w", staging, err)
	}
	return nil
}

// objects lists a database's base tables and views.
func (s *Server) objects(ctx context.Context, db string) (tables, views []string, err error) {
	rows, err := s.db.QueryContext(ctx, "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", db)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, nil, err
		}
		if typ == "VIEW" {
			views = append(views, name)
		} else {
			tables = append(tables, name)
		}
	}
	sort.Strings(tables)
	return tables, views, rows.Err()
}

// DetectPrefix finds the WordPress table prefix of a loaded dump: the
// prefix P with both P+"options" and P+"posts" tables ("wp_" if it is
// one of several).
func (s *Server) DetectPrefix(ctx context.Context, db string) (string, error) {
	tables, _, err := s.objects(ctx, db)
	if err != nil {
		return "", err
	}
	have := map[string]bool{}
	for _, t := range tables {
		have[t] = true
	}
	var found []string
	for _, t := range tables {
		if p, ok := strings.CutSuffix(t, "options"); ok && p != "" && have[p+"posts"] && prefixRE.MatchString(p) {
			found = append(found, p)
		}
	}
	switch {
	case len(found) == 0:
		return "", errors.New("the dump holds no WordPress tables (no options and posts tables of one prefix)")
	case len(found) == 1:
		return found[0], nil
	}
	for _, p := range found {
		if p == SitePrefix {
			return p, nil
		}
	}
	return "", fmt.Errorf("the dump holds several WordPress installs (prefixes %s); include the site's wp-config.php to name one",
		strings.Join(found, ", "))
}

// TakeOver moves a staging database's WordPress tables (those of prefix)
// into the site's database in place of all it held, renamed to the
// site's prefix, with the prefix-bearing keys WordPress keeps (user
// roles, capabilities) renamed too; the staging database is dropped.
// Tables of other prefixes are left out. It returns the tables moved.
func (s *Server) TakeOver(ctx context.Context, staging, site, prefix string) (int, error) {
	if !ident.MatchString(staging) || !ident.MatchString(site) || !prefixRE.MatchString(prefix) {
		return 0, fmt.Errorf("mariadb: invalid names %q/%q/%q", staging, site, prefix)
	}
	tables, views, err := s.objects(ctx, staging)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", staging, err)
	}
	if len(views) > 0 {
		return 0, fmt.Errorf("the dump makes views (%s); a site's database holds tables only", strings.Join(views, ", "))
	}
	var renames []string
	for _, t := range tables {
		rest, ok := strings.CutPrefix(t, prefix)
		if !ok || rest == "" {
			continue
		}
		renames = append(renames, quoteIdent(staging)+"."+quoteIdent(t)+" TO "+quoteIdent(site)+"."+quoteIdent(SitePrefix+rest))
	}
	if len(renames) == 0 {
		return 0, fmt.Errorf("the dump holds no tables of prefix %s", prefix)
	}
	// The tables move by renaming their files, which stays within one
	// filesystem: a site's database that does not lie in its staging's
	// volume (an older agent's, in the data directory) is made again
	// there first. Its tables are replaced anyway.
	if vol := s.volumeOf(staging); vol != s.volumeOf(site) {
		if err := s.dropDatabase(ctx, site); err != nil {
			return 0, fmt.Errorf("take over %s: %w", site, err)
		}
		if vol != "" {
			if err := s.place(site, vol); err != nil {
				return 0, fmt.Errorf("take over %s: %w", site, err)
			}
		}
		if _, err := s.db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+quoteIdent(site)+
			" CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
			return 0, fmt.Errorf("take over %s: %w", site, err)
		}
	}
	oldTables, oldViews, err := s.objects(ctx, site)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", site, err)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION foreign_key_checks = 0"); err != nil {
		return 0, err
	}
	for _, v := range oldViews {
		if _, err := conn.ExecContext(ctx, "DROP VIEW IF EXISTS "+quoteIdent(site)+"."+quoteIdent(v)); err != nil {
			return 0, fmt.Errorf("take over %s: %w", site, err)
		}
	}
	if len(oldTables) > 0 {
		drop := make([]string, 0, len(oldTables))
		for _, t := range oldTables {
			drop = append(drop, quoteIdent(site)+"."+quoteIdent(t))
		}
		if _, err := conn.ExecContext(ctx, "DROP TABLE IF EXISTS "+strings.Join(drop, ", ")); err != nil {
			return 0, fmt.Errorf("take over %s: %w", site, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "RENAME TABLE "+strings.Join(renames, ", ")); err != nil {
		return 0, fmt.Errorf("take over %s: %w", site, err)
	}
	if prefix != SitePrefix {
		if err := renamePrefixKeys(ctx, conn, site, prefix); err != nil {
			return 0, err
		}
	}
	if err := s.dropDatabase(ctx, staging); err != nil {
		return 0, fmt.Errorf("drop %s: %w", staging, err)
	}
	return len(renames), nil
}

// renamePrefixKeys renames the option and user meta keys WordPress
// names after the table prefix (wpx_user_roles, wpx_capabilities, …).
func renamePrefixKeys(ctx context.Context, conn *sql.Conn, db, prefix string) error {
	like := likeEscape(prefix) + "%"
	qs := []struct {
		q    string
		args []any
	}{
		{"UPDATE " + quoteIdent(db) + ".`wp_options` SET option_name = ? WHERE option_name = ?",
			[]any{SitePrefix + "user_roles", prefix + "user_roles"}},
		{"UPDATE " + quoteIdent(db) + ".`wp_usermeta` SET meta_key = CONCAT(?, SUBSTRING(meta_key, ?)) WHERE meta_key LIKE ?",
			[]any{SitePrefix, len(prefix) + 1, like}},
	}
	for _, q := range qs {
		if _, err := conn.ExecContext(ctx, q.q, q.args...); err != nil {
			return fmt.Errorf("rename %s keys in %s: %w", prefix, db, err)
		}
	}
	return nil
}

// FirstAdmin is the login of a WordPress database's first administrator
// (table prefix wp_), or "" if it has none.
func (s *Server) FirstAdmin(ctx context.Context, db string) (string, error) {
	if !ident.MatchString(db) {
		return "", fmt.Errorf("mariadb: invalid database name %q", db)
	}
	var login string
	err := s.db.QueryRowContext(ctx, "SELECT u.user_login FROM "+quoteIdent(db)+".`wp_users` u JOIN "+quoteIdent(db)+
		".`wp_usermeta` m ON m.user_id = u.ID AND m.meta_key = 'wp_capabilities' AND m.meta_value LIKE '%\"administrator\"%' "+
		"ORDER BY u.ID LIMIT 1").Scan(&login)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("first administrator of %s: %w", db, err)
	}
	return login, nil
}
