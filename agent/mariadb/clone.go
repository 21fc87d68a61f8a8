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
	return listTables(ctx, s.db, db)
}

// listTables lists the base tables of db through q.
func listTables(ctx context.Context, q queryer, db string) ([]string, error) {
	rows, err := q.QueryContext(ctx,
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

// DatabaseBytes is what a database's tables and indexes take (what a
// copy of it needs, roughly): the size of their files as InnoDB holds
// them, or its statistics' count if more. The statistics alone lag:
// right after a table is filled (a template frozen by a copy) they said
// a few KiB for any size.
func (s *Server) DatabaseBytes(ctx context.Context, db string) (int64, error) {
	if !ident.MatchString(db) {
		return 0, fmt.Errorf("mariadb: invalid database name %q", db)
	}
	var stats, files sql.NullInt64
	err := s.db.QueryRowContext(ctx, "SELECT SUM(DATA_LENGTH + INDEX_LENGTH) FROM information_schema.TABLES "+
		"WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE'", db).Scan(&stats)
	if err == nil {
		err = s.db.QueryRowContext(ctx, "SELECT SUM(FILE_SIZE) FROM information_schema.INNODB_SYS_TABLESPACES WHERE NAME LIKE ?",
			likeEscape(db)+"/%").Scan(&files)
	}
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", db, err)
	}
	return max(stats.Int64, files.Int64), nil
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
	tables, err := s.tableColumns(ctx, db)
	if err != nil {
		return st, err
	}
	for _, t := range tables {
		if len(t.keys) == 0 || len(t.text) == 0 {
			continue // WordPress's tables all have one; a table without is the site's own business
		}
		n, skipped, err := s.rewriteTable(ctx, db, t, r)
		st.Rows += n
		st.Skipped += skipped
		if err != nil {
			return st, fmt.Errorf("rewrite %s: %w", t.name, err)
		}
	}
	return st, nil
}

// tableInfo is a base table's primary key columns and text columns.
type tableInfo struct {
	name       string
	keys, text []string
}

// tableColumns reads the keys and text columns of every base table of db
// in one query of the catalogue.
func (s *Server) tableColumns(ctx context.Context, db string) ([]tableInfo, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT c.TABLE_NAME, c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_KEY FROM information_schema.COLUMNS c "+
		"JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME "+
		"WHERE c.TABLE_SCHEMA = ? AND t.TABLE_TYPE = 'BASE TABLE' ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION", db)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []tableInfo
	for rows.Next() {
		var table, name, typ, key string
		if err := rows.Scan(&table, &name, &typ, &key); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].name != table {
			out = append(out, tableInfo{name: table})
		}
		t := &out[len(out)-1]
		if key == "PRI" {
			t.keys = append(t.keys, name)
		}
		if textTypes[strings.ToLower(typ)] {
			t.text = append(t.text, name)
		}
	}
	return out, rows.Err()
}

// rewritePage is how many matching keys one query of a rewrite reads.
const rewritePage = 500

// rewriteTable updates the rows of one table whose text may hold the old
// URL (MariaDB filters on the old host first). It reads the matching
// keys a page at a time; for each row, which columns match, then each
// such value and its update: memory holds a page of keys and one value,
// never a table, and no connection is held while another is needed
// (concurrent rewrites would otherwise take the pool's every connection
// and wait on each other).
func (s *Server) rewriteTable(ctx context.Context, db string, t tableInfo, r *urlrewrite.Rewriter) (int, int, error) {
	qt := quoteIdent(db) + "." + quoteIdent(t.name)
	qkeys := make([]string, len(t.keys))
	where := make([]string, len(t.keys))
	marks := make([]string, len(t.keys))
	for i, k := range t.keys {
		qkeys[i] = quoteIdent(k)
		where[i] = qkeys[i] + " = ?"
		marks[i] = "?"
	}
	keyList := strings.Join(qkeys, ", ")
	byKey := strings.Join(where, " AND ")
	// The filter is a superset of the matches: the host appears in every
	// form (encodings change only ':' and '/').
	like := "%" + likeEscape(r.OldHost()) + "%"
	qcols := make([]string, len(t.text))
	likes := make([]string, len(t.text))
	likeArgs := make([]any, len(t.text))
	for i, c := range t.text {
		qcols[i] = quoteIdent(c)
		likes[i] = qcols[i] + " LIKE ?"
		likeArgs[i] = like
	}
	anyLike := "(" + strings.Join(likes, " OR ") + ")"
	which := "SELECT " + strings.Join(likes, ", ") + " FROM " + qt + " WHERE " + byKey
	changed, skipped := 0, 0
	var after []any
	for {
		q := "SELECT " + keyList + " FROM " + qt + " WHERE " + anyLike
		args := append([]any(nil), likeArgs...)
		if after != nil {
			q += " AND (" + keyList + ") > (" + strings.Join(marks, ", ") + ")"
			args = append(args, after...)
		}
		page, err := s.keyPage(ctx, q+" ORDER BY "+keyList+" LIMIT "+strconv.Itoa(rewritePage), args, len(t.keys))
		if err != nil {
			return changed, skipped, err
		}
		for _, key := range page {
			hits := make([]sql.NullBool, len(t.text))
			dest := make([]any, len(hits))
			for i := range hits {
				dest[i] = &hits[i]
			}
			err := s.db.QueryRowContext(ctx, which, append(append([]any(nil), likeArgs...), key...)...).Scan(dest...)
			if errors.Is(err, sql.ErrNoRows) {
				continue // gone meanwhile
			}
			if err != nil {
				return changed, skipped, err
			}
			rowChanged := false
			for i, hit := range hits {
				if !hit.Bool {
					continue
				}
				did, big, err := s.rewriteValue(ctx, qt, qcols[i], byKey, key, r)
				if err != nil {
					return changed, skipped, err
				}
				rowChanged = rowChanged || did
				if big {
					skipped++
				}
			}
			if rowChanged {
				changed++
			}
		}
		if len(page) < rewritePage {
			return changed, skipped, nil
		}
		after = page[len(page)-1]
	}
}

// rewriteValue rewrites one value of one row; a value over
// MaxRewriteValue is left alone and reported.
func (s *Server) rewriteValue(ctx context.Context, qt, qc, byKey string, key []any, r *urlrewrite.Rewriter) (changed, tooBig bool, err error) {
	var val sql.NullString
	err = s.db.QueryRowContext(ctx, "SELECT LENGTH("+qc+") > ?, IF(LENGTH("+qc+") > ?, NULL, "+qc+") FROM "+qt+" WHERE "+byKey,
		append([]any{MaxRewriteValue, MaxRewriteValue}, key...)...).Scan(&tooBig, &val)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, nil
	}
	if err != nil || tooBig {
		return false, tooBig, err
	}
	nv := r.Value(val.String)
	if nv == val.String {
		return false, false, nil
	}
	_, err = s.db.ExecContext(ctx, "UPDATE "+qt+" SET "+qc+" = ? WHERE "+byKey, append([]any{nv}, key...)...)
	return err == nil, false, err
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
