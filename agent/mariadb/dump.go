package mariadb

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// A dump (Dump's, which a template's artifact carries) is a sequence of
// statements, each written as its length in decimal, a colon, the
// statement and a newline: no statement needs escaping to be found, and a
// reader never scans for a delimiter inside tenant data. DumpSQL writes
// the same statements as SQL text instead, for what an import takes back
// (a site's snapshot).

// MaxStatement bounds one statement of a dump: a row larger than this
// (a value past MariaDB's own packet limit, in practice) fails the dump.
const MaxStatement = 64 << 20

// insertBatch is how many bytes of rows one INSERT gathers.
const insertBatch = 1 << 20

// queryer is what a dump reads through: the admin pool, or one
// connection held in a transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// statementWriter writes one statement of a dump in its format.
type statementWriter func(w io.Writer, stmt string) error

// Dump writes the base tables of db (structure and rows) to w. Like
// CopyDatabase it leaves views, triggers and routines out.
func (s *Server) Dump(ctx context.Context, db string, w io.Writer) error {
	if !ident.MatchString(db) {
		return fmt.Errorf("mariadb: invalid database name %q", db)
	}
	ts, err := s.tables(ctx, db)
	if err != nil {
		return fmt.Errorf("dump %s: %w", db, err)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	for _, t := range ts {
		if err := dumpTable(ctx, s.db, bw, db, t, writeStatement); err != nil {
			return fmt.Errorf("dump %s.%s: %w", db, t, err)
		}
	}
	return bw.Flush()
}

func writeStatement(w io.Writer, stmt string) error {
	if len(stmt) > MaxStatement {
		return fmt.Errorf("a statement of %d bytes is over the %d-byte bound", len(stmt), MaxStatement)
	}
	_, err := io.WriteString(w, strconv.Itoa(len(stmt))+":"+stmt+"\n")
	return err
}

// writeSQL writes a statement as SQL text: the statement, ";" and a
// newline.
func writeSQL(w io.Writer, stmt string) error {
	if len(stmt) > MaxStatement {
		return fmt.Errorf("a statement of %d bytes is over the %d-byte bound", len(stmt), MaxStatement)
	}
	_, err := io.WriteString(w, stmt+";\n")
	return err
}

// sqlHeader starts an SQL dump: the session a load needs to take the
// values back as they were (UTC timestamps, zero ids and dates as they
// are, no checks that the order of tables would trip).
const sqlHeader = `SET NAMES utf8mb4;
SET SESSION time_zone = '+00:00';
SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO';
SET SESSION foreign_key_checks = 0;
SET SESSION unique_checks = 0;
`

// DumpSQL dumps the database conn uses as SQL text, which agent/dumpload
// (an import's loader) and the mysql client load: statements ending in
// ";" and a newline, every value a _binary literal, so each byte comes
// back as it was whatever the column's character set. It reads the
// database at one moment while its site goes on writing: it starts a
// consistent read (every InnoDB table as of then), calls during (for what
// must be at least as new as the database: the site's files, so that
// every upload the database names is there), then writes the tables from
// that read, and returns the moment. Each table's metadata lock is let go
// once it is written, so the site's own schema changes wait on one table
// at most. Like Dump it leaves views, triggers and routines out.
func DumpSQL(ctx context.Context, conn *sql.Conn, during func() error, w io.Writer) (time.Time, error) {
	var db sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&db); err != nil {
		return time.Time{}, fmt.Errorf("dump: which database: %w", err)
	}
	if !db.Valid || db.String == "" {
		return time.Time{}, errors.New("dump: the connection has no database")
	}
	// Results come as the columns hold them (no conversion to the
	// connection's character set), in UTC.
	for _, q := range []string{"SET SESSION character_set_results = binary", "SET SESSION time_zone = '+00:00'",
		"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return time.Time{}, fmt.Errorf("dump %s: %s: %w", db.String, q, err)
		}
	}
	taken := time.Now()
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") }()
	if during != nil {
		if err := during(); err != nil {
			return taken, err
		}
	}
	ts, err := listTables(ctx, conn, db.String)
	if err != nil {
		return taken, fmt.Errorf("dump %s: %w", db.String, err)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := io.WriteString(bw, "-- sandboxd: database "+db.String+" as of "+taken.UTC().Format(time.RFC3339Nano)+"\n"+sqlHeader); err != nil {
		return taken, err
	}
	for _, t := range ts {
		if _, err := conn.ExecContext(ctx, "SAVEPOINT sandboxd_table"); err != nil {
			return taken, fmt.Errorf("dump %s: %w", db.String, err)
		}
		// Dropped first, as mysqldump does: the dump loads over a
		// database that has the table too.
		if err := writeSQL(bw, "DROP TABLE IF EXISTS "+quoteIdent(t)); err != nil {
			return taken, err
		}
		if err := dumpTable(ctx, conn, bw, db.String, t, writeSQL); err != nil {
			return taken, fmt.Errorf("dump %s.%s: %w", db.String, t, err)
		}
		if _, err := conn.ExecContext(ctx, "ROLLBACK TO SAVEPOINT sandboxd_table"); err != nil {
			return taken, fmt.Errorf("dump %s: %w", db.String, err)
		}
	}
	return taken, bw.Flush()
}

// dumpTable writes a table's structure and rows as statements.
func dumpTable(ctx context.Context, q queryer, w io.Writer, db, table string, write statementWriter) error {
	var name, create string
	if err := q.QueryRowContext(ctx, "SHOW CREATE TABLE "+quoteIdent(db)+"."+quoteIdent(table)).Scan(&name, &create); err != nil {
		return err
	}
	if err := write(w, create); err != nil {
		return err
	}
	cols, err := storedColumns(ctx, q, db, table)
	if err != nil || len(cols) == 0 {
		return err
	}
	qcols := make([]string, len(cols))
	for i, c := range cols {
		qcols[i] = quoteIdent(c)
	}
	list := strings.Join(qcols, ", ")
	rows, err := q.QueryContext(ctx, "SELECT "+list+" FROM "+quoteIdent(db)+"."+quoteIdent(table))
	if err != nil {
		return err
	}
	defer rows.Close()
	head := "INSERT INTO " + quoteIdent(table) + " (" + list + ") VALUES "
	var b strings.Builder
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		err := write(w, head+b.String())
		b.Reset()
		return err
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for i, v := range vals {
			if i > 0 {
				b.WriteByte(',')
			}
			if v == nil {
				b.WriteString("NULL")
				continue
			}
			b.WriteString("_binary'")
			escapeInto(&b, v)
			b.WriteByte('\'')
		}
		b.WriteByte(')')
		if b.Len() >= insertBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return flush()
}

// storedColumns lists a table's columns that hold data (generated ones
// are computed again by MariaDB).
func storedColumns(ctx context.Context, q queryer, db, table string) ([]string, error) {
	rows, err := q.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? "+
		"AND EXTRA NOT LIKE '%GENERATED%' ORDER BY ORDINAL_POSITION", db, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// escapeInto writes v as the inside of a quoted string literal.
func escapeInto(b *strings.Builder, v []byte) {
	for _, c := range v {
		switch c {
		case 0:
			b.WriteString(`\0`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case 0x1a:
			b.WriteString(`\Z`)
		case '\\':
			b.WriteString(`\\`)
		case '\'':
			b.WriteString(`\'`)
		default:
			b.WriteByte(c)
		}
	}
}

// Load runs a dump (Dump's format) into db, which must exist and be
// empty. Only CREATE TABLE and INSERT statements are run, one at a time,
// on a session that takes values as they were (no mode rewrites zero
// ids or dates) and does not follow a table's files elsewhere.
func (s *Server) Load(ctx context.Context, db string, r io.Reader) error {
	if !ident.MatchString(db) {
		return fmt.Errorf("mariadb: invalid database name %q", db)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, q := range []string{"USE " + quoteIdent(db), "SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO'",
		"SET SESSION foreign_key_checks = 0", "SET SESSION unique_checks = 0"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("load %s: %w", db, err)
		}
	}
	br := bufio.NewReaderSize(r, 1<<20)
	for n := 1; ; n++ {
		stmt, err := readStatement(br)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("load %s: statement %d: %w", db, n, err)
		}
		if err := allowed(stmt); err != nil {
			return fmt.Errorf("load %s: statement %d: %w", db, n, err)
		}
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("load %s: statement %d: %w", db, n, err)
		}
	}
}

// allowed refuses what a dump never holds: anything but a table's
// creation or its rows, and a table stored outside the server's data
// directory.
func allowed(stmt string) error {
	switch {
	case strings.HasPrefix(stmt, "INSERT INTO `"):
		return nil
	case strings.HasPrefix(stmt, "CREATE TABLE `"):
		if strings.Contains(strings.ToUpper(stmt), "DIRECTORY") {
			return errors.New("a table stored in a directory of its own is not loaded")
		}
		return nil
	}
	return errors.New("not a statement a dump holds")
}

func readStatement(br *bufio.Reader) (string, error) {
	var head []byte
	for {
		c, err := br.ReadByte()
		if errors.Is(err, io.EOF) && len(head) == 0 {
			return "", io.EOF
		}
		if err != nil {
			return "", fmt.Errorf("truncated dump: %w", err)
		}
		if c == ':' {
			break
		}
		if c < '0' || c > '9' || len(head) == 9 {
			return "", errors.New("bad statement length")
		}
		head = append(head, c)
	}
	n, err := strconv.Atoi(string(head))
	if err != nil || n > MaxStatement {
		return "", fmt.Errorf("bad statement length %q", head)
	}
	buf := make([]byte, n+1)
	if _, err := io.ReadFull(br, buf); err != nil {
		return "", fmt.Errorf("truncated dump: %w", err)
	}
	if buf[n] != '\n' {
		return "", errors.New("statement not followed by a newline")
	}
	return string(buf[:n]), nil
}
