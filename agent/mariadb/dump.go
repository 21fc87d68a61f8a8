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
)

// A dump is a sequence of statements, each written as its length in
// decimal, a colon, the statement and a newline: no statement needs
// escaping to be found, and a reader never scans for a delimiter inside
// tenant data.

// MaxStatement bounds one statement of a dump: a row larger than this
// (a value past MariaDB's own packet limit, in practice) fails the dump.
const MaxStatement = 64 << 20

// insertBatch is how many bytes of rows one INSERT gathers.
const insertBatch = 1 << 20

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
		if err := s.dumpTable(ctx, bw, db, t); err != nil {
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

func (s *Server) dumpTable(ctx context.Context, w io.Writer, db, table string) error {
	var name, create string
	if err := s.db.QueryRowContext(ctx, "SHOW CREATE TABLE "+quoteIdent(db)+"."+quoteIdent(table)).Scan(&name, &create); err != nil {
		return err
	}
	if err := writeStatement(w, create); err != nil {
		return err
	}
	cols, err := s.storedColumns(ctx, db, table)
	if err != nil || len(cols) == 0 {
		return err
	}
	qcols := make([]string, len(cols))
	for i, c := range cols {
		qcols[i] = quoteIdent(c)
	}
	list := strings.Join(qcols, ", ")
	rows, err := s.db.QueryContext(ctx, "SELECT "+list+" FROM "+quoteIdent(db)+"."+quoteIdent(table))
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
		err := writeStatement(w, head+b.String())
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
func (s *Server) storedColumns(ctx context.Context, db, table string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? "+
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
