package mariadb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/secret"
	"github.com/sandboxd/sandboxd/internal/urlrewrite"
)

// quoteIdent quotes a table or column name read from the catalogue: a
// site's own PHP chooses them, so they are never trusted as SQL.
func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// tables lists the base tables of a database (views are not copied).
func (s *Server) tables(ctx context.Context, db string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx,
		"SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME", db)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// CopyDatabase copies every base table of from into to, which must exist
// and be empty: structure first (CREATE TABLE … LIKE), then rows, inside
// MariaDB. It is how a clone gets its template's database in
// milliseconds.
func (s *Server) CopyDatabase(ctx context.Context, from, to string) error {
	if !ident.MatchString(from) || !ident.MatchString(to) {
		return fmt.Errorf("mariadb: invalid database name %q/%q", from, to)
	}
	ts, err := s.tables(ctx, from)
	if err != nil {
		return fmt.Errorf("copy database %s: %w", from, err)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, t := range ts {
		src, dst := quoteIdent(from)+"."+quoteIdent(t), quoteIdent(to)+"."+quoteIdent(t)
		for _, q := range []string{"CREATE TABLE " + dst + " LIKE " + src, "INSERT INTO " + dst + " SELECT * FROM " + src} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("copy table %s: %w", t, err)
			}
		}
	}
	return nil
}

// MaxRewriteValue is the largest value RewriteURLs reads; a bigger one is
// left as it is and counted, so a site cannot make the agent hold an
// unbounded amount.
const MaxRewriteValue = 16 << 20

// RewriteStats says what a URL rewrite changed.
type RewriteStats struct {
	Rows    int // rows updated
	Skipped int // values over MaxRewriteValue, left alone
}

// textTypes are the column types that can hold a URL.
var textTypes = map[string]bool{"char": true, "varchar": true, "tinytext": true, "text": true, "mediumtext": true,
	"longtext": true, "json": true}

// RewriteURLs moves every value of db that holds the old URL to the new
// one (urlrewrite: text, JSON, URL-encoded and PHP-serialized forms), in
// every table with a primary key, one row at a time by its key.
func (s *Server) RewriteURLs(ctx context.Context, db string, r *urlrewrite.Rewriter) (RewriteStats, error) {
	var st RewriteStats
	if !ident.MatchString(db) {
		return st, fmt.Errorf("mariadb: invalid database name %q", db)
	}
	ts, err := s.tables(ctx, db)
	if err != nil {
		return st, err
	}
	for _, t := range ts {
		keys, cols, err := s.columns(ctx, db, t)
		if err != nil {
			return st, err
		}
		if len(keys) == 0 || len(cols) == 0 {
			continue // WordPress's tables all have one; a table without is the site's own business
		}
		for _, c := range cols {
			n, skipped, err := s.rewriteColumn(ctx, db, t, keys, c, r)
			st.Rows += n
			st.Skipped += skipped
			if err != nil {
				return st, fmt.Errorf("rewrite %s.%s: %w", t, c, err)
			}
		}
	}
	return st, nil
}

// columns returns a table's primary key columns and its text columns.
func (s *Server) columns(ctx context.Context, db, table string) (keys, text []string, err error) {
	rows, err := s.db.QueryContext(ctx, "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "+
		"WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", db, table)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, typ, key string
		if err := rows.Scan(&name, &typ, &key); err != nil {
			return nil, nil, err
		}
		if key == "PRI" {
			keys = append(keys, name)
		}
		if textTypes[strings.ToLower(typ)] {
			text = append(text, name)
		}
	}
	return keys, text, rows.Err()
}

// rewritePage is how many matching keys one query of a rewrite reads.
const rewritePage = 500

// rewriteColumn updates the rows of one column whose value may hold the
// old URL (MariaDB filters on the old host first). It reads the matching
// keys a page at a time, then each value and its update one row at a
// time: memory holds a page of keys and one value, never a table, and no
// connection is held while another is needed (concurrent rewrites would
// otherwise take the pool's every connection and wait on each other).
func (s *Server) rewriteColumn(ctx context.Context, db, table string, keys []string, col string, r *urlrewrite.Rewriter) (int, int, error) {
	qt, qc := quoteIdent(db)+"."+quoteIdent(table), quoteIdent(col)
	qkeys := make([]string, len(keys))
	where := make([]string, len(keys))
	marks := make([]string, len(keys))
	for i, k := range keys {
		qkeys[i] = quoteIdent(k)
		where[i] = qkeys[i] + " = ?"
		marks[i] = "?"
	}
	keyList := strings.Join(qkeys, ", ")
	byKey := strings.Join(where, " AND ")
	// The filter is a superset of the matches: the host appears in every
	// form (encodings change only ':' and '/').
	like := "%" + likeEscape(r.OldHost()) + "%"
	read := "SELECT LENGTH(" + qc + ") > ?, IF(LENGTH(" + qc + ") > ?, NULL, " + qc + ") FROM " + qt + " WHERE " + byKey
	update := "UPDATE " + qt + " SET " + qc + " = ? WHERE " + byKey
	changed, skipped := 0, 0
	var after []any
	for {
		q := "SELECT " + keyList + " FROM " + qt + " WHERE " + qc + " LIKE ?"
		args := []any{like}
		if after != nil {
			q += " AND (" + keyList + ") > (" + strings.Join(marks, ", ") + ")"
			args = append(args, after...)
		}
		page, err := s.keyPage(ctx, q+" ORDER BY "+keyList+" LIMIT "+strconv.Itoa(rewritePage), args, len(keys))
		if err != nil {
			return changed, skipped, err
		}
		for _, key := range page {
			var tooBig bool
			var val sql.NullString
			err := s.db.QueryRowContext(ctx, read, append([]any{MaxRewriteValue, MaxRewriteValue}, key...)...).Scan(&tooBig, &val)
			if errors.Is(err, sql.ErrNoRows) {
				continue // gone meanwhile
			}
			if err != nil {
				return changed, skipped, err
			}
			if tooBig {
				skipped++
				continue
			}
			if nv := r.Value(val.String); nv != val.String {
				if _, err := s.db.ExecContext(ctx, update, append([]any{nv}, key...)...); err != nil {
					return changed, skipped, err
				}
				changed++
			}
		}
		if len(page) < rewritePage {
			return changed, skipped, nil
		}
		after = page[len(page)-1]
	}
}

// keyPage reads one page of key tuples.
func (s *Server) keyPage(ctx context.Context, q string, args []any, n int) ([][]any, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		key := make([]any, n)
		dest := make([]any, n)
		for i := range key {
			dest[i] = &key[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, key)
	}
	return out, rows.Err()
}

func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(s)
}

// Identity is who a copied WordPress database belongs to.
type Identity struct {
	Title      string
	AdminUser  string
	AdminEmail string
}

// SetIdentity gives a copied WordPress database (table prefix wp_) its
// own title and first administrator, whose password becomes one that no
// password matches: sign-in is by one-time links, and no two sites
// share a password hash.
func (s *Server) SetIdentity(ctx context.Context, db string, id Identity) error {
	if !ident.MatchString(db) {
		return fmt.Errorf("mariadb: invalid database name %q", db)
	}
	unusable := "$sbx$" + secret.New("") // neither a phpass, bcrypt nor md5 hash
	opts, users := quoteIdent(db)+".`wp_options`", quoteIdent(db)+".`wp_users`"
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"UPDATE " + opts + " SET option_value = ? WHERE option_name = 'blogname'", []any{id.Title}},
		{"UPDATE " + opts + " SET option_value = ? WHERE option_name = 'admin_email'", []any{id.AdminEmail}},
		{"UPDATE " + users + " SET user_login = ?, user_nicename = ?, display_name = ?, user_email = ?, user_pass = ? WHERE ID = 1",
			[]any{id.AdminUser, id.AdminUser, id.AdminUser, id.AdminEmail, unusable}},
	} {
		if _, err := s.db.ExecContext(ctx, q.sql, q.args...); err != nil {
			return fmt.Errorf("set identity of %s: %w", db, err)
		}
	}
	return nil
}
