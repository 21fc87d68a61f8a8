package mariadb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// A checkpoint or a fork of a site copies its database's files, not its
// rows: the site's disk, which holds its database's volume, is cloned by
// reference (agent/diskstore) while its tables are quiesced for export,
// and the copy's tables are taken back in by InnoDB's transportable
// tablespaces (DISCARD, then IMPORT of the copied file). That costs the
// same for a site of ten thousand posts as for a fresh one, where a copy
// by INSERT … SELECT costs a pass over every row.

// Table is one table of a database as an exported copy holds it: its
// name, its definition and its file's name (MariaDB's encoding of the
// name on disk).
type Table struct {
	Name string `json:"name"`
	File string `json:"file"`
	DDL  string `json:"ddl"`
}

// fileNameRE is what MariaDB's encoding of a table's name on disk is
// made of: anything else in a file name read from the catalogue is
// refused rather than used as a path.
var fileNameRE = regexp.MustCompile(`^[A-Za-z0-9_@$]{1,200}$`)

// exportLockWait bounds how long an export waits for the statements
// under way on its tables: a site that keeps a write open longer gets
// its checkpoint refused (ErrBusy), not the node's connections held.
const exportLockWait = 5 * time.Second

// ErrBusy is an export that found its tables held by a statement or a
// transaction of the site's past exportLockWait.
var ErrBusy = errors.New("the site's tables are held by a transaction under way; try again")

// Export quiesces every table of db for a copy of its files: their
// changes are written out and InnoDB writes each one's .cfg (what an
// import checks the copy against) next to its .ibd. Writes to db wait
// until unlock, which must be called (it removes the .cfg files). It
// returns the tables, in the order they can be made again.
func (s *Server) Export(ctx context.Context, db string) (_ []Table, unlock func() error, err error) {
	if !ident.MatchString(db) {
		return nil, nil, fmt.Errorf("mariadb: invalid database name %q", db)
	}
	conn, err := s.copies.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	tables, err := describeTables(ctx, conn, db)
	if err != nil {
		return nil, nil, err
	}
	release := func() error { return conn.Close() }
	if len(tables) == 0 {
		return nil, release, nil
	}
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = quoteIdent(db) + "." + quoteIdent(t.Name)
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", int(exportLockWait.Seconds()))); err != nil {
		return nil, nil, err
	}
	if _, err := conn.ExecContext(ctx, "FLUSH TABLES "+strings.Join(names, ", ")+" FOR EXPORT"); err != nil {
		if isLockWait(err) {
			return nil, nil, fmt.Errorf("export %s: %w", db, ErrBusy)
		}
		return nil, nil, fmt.Errorf("export %s: %w", db, Classify(err))
	}
	return tables, func() error {
		_, err := conn.ExecContext(context.WithoutCancel(ctx), "UNLOCK TABLES")
		return errors.Join(err, conn.Close())
	}, nil
}

// describeTables lists db's base tables with their definitions and file
// names; a table an export cannot carry (not InnoDB, partitioned) is an
// error that names it.
func describeTables(ctx context.Context, conn *sql.Conn, db string) ([]Table, error) {
	// Sequences and system-versioned tables are not carried: a database
	// that has one is refused rather than restored without it.
	var other string
	err := conn.QueryRowContext(ctx, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE IN "+
		"('SEQUENCE', 'SYSTEM VERSIONED') LIMIT 1", db).Scan(&other)
	if err == nil {
		return nil, fmt.Errorf("%q is a sequence or a system-versioned table: it cannot be checkpointed", other)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	rows, err := conn.QueryContext(ctx, "SELECT TABLE_NAME, COALESCE(ENGINE, ''), COALESCE(CREATE_OPTIONS, '') "+
		"FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME", db)
	if err != nil {
		return nil, err
	}
	var out []Table
	for rows.Next() {
		var name, engine, options string
		if err := rows.Scan(&name, &engine, &options); err != nil {
			rows.Close()
			return nil, err
		}
		switch {
		case !strings.EqualFold(engine, "InnoDB"):
			rows.Close()
			return nil, fmt.Errorf("table %q is %s, not InnoDB: it cannot be checkpointed", name, engine)
		case strings.Contains(options, "partitioned"):
			rows.Close()
			return nil, fmt.Errorf("table %q is partitioned: it cannot be checkpointed", name)
		}
		out = append(out, Table{Name: name, File: name})
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	for i := range out {
		file, err := tableFile(ctx, conn, db, out[i].Name)
		if err != nil {
			return nil, err
		}
		out[i].File = file
		var n, ddl string
		if err := conn.QueryRowContext(ctx, "SHOW CREATE TABLE "+quoteIdent(db)+"."+quoteIdent(out[i].Name)).Scan(&n, &ddl); err != nil {
			return nil, fmt.Errorf("definition of %q: %w", out[i].Name, err)
		}
		out[i].DDL = ddl
	}
	return out, nil
}

// tableFile is the name of a table's files on disk, as InnoDB's catalogue
// holds it ("db/file"): MariaDB encodes any character of the table's
// name that is not a letter, digit or underscore (its "filename"
// character set).
func tableFile(ctx context.Context, conn *sql.Conn, db, table string) (string, error) {
	var name string
	err := conn.QueryRowContext(ctx, "SELECT NAME FROM information_schema.INNODB_SYS_TABLES WHERE NAME = CONCAT(?, '/', CONVERT(CONVERT(? USING filename) USING binary))",
		db, table).Scan(&name)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("table %q has no file of its own", table)
	}
	if err != nil {
		return "", fmt.Errorf("file of table %q: %w", table, err)
	}
	file := strings.TrimPrefix(name, db+"/")
	if !fileNameRE.MatchString(file) {
		return "", fmt.Errorf("table %q: unexpected file name %q", table, file)
	}
	return file, nil
}

// Import takes the tables of an exported copy back into database db,
// which must exist and have none of them: their files (each .ibd with
// its .cfg) lie in db's directory in volume, where the copy put them.
// Each table is made again from its definition, its new empty file
// discarded, and the copy's imported in its place; views and triggers
// are not carried. What was made of a
// table that fails is dropped, and the error names it.
func (s *Server) Import(ctx context.Context, volume, db string, tables []Table) error {
	if !ident.MatchString(db) || !ident.MatchString(volume) {
		return fmt.Errorf("mariadb: invalid database or volume name %q/%q", db, volume)
	}
	for _, t := range tables {
		if !fileNameRE.MatchString(t.File) {
			return fmt.Errorf("mariadb: table %q: invalid file name %q", t.Name, t.File)
		}
	}
	root, err := os.OpenRoot(s.volumesDir() + "/" + volume)
	if err != nil {
		return fmt.Errorf("mariadb: volume %s: %w", volume, err)
	}
	defer root.Close()
	// The copy's files go aside while each table is made again (which
	// would find them in its way), then back one by one.
	aside := ".import-" + db
	if err := root.RemoveAll(aside); err != nil {
		return err
	}
	if err := root.Mkdir(aside, 0o700); err != nil {
		return fmt.Errorf("mariadb: %w", err)
	}
	defer root.RemoveAll(aside)
	for _, t := range tables {
		for _, ext := range []string{".ibd", ".cfg"} {
			if err := root.Rename(path.Join(db, t.File+ext), path.Join(aside, t.File+ext)); err != nil {
				return fmt.Errorf("mariadb: table %q of the copy: %w", t.Name, err)
			}
		}
		if err := root.Remove(path.Join(db, t.File+".frm")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("mariadb: table %q of the copy: %w", t.Name, err)
		}
	}
	// What else the copy's directory holds (views, triggers) is not
	// carried over: a view names its database, and a fork's would read
	// its source's.
	left, err := fs.ReadDir(root.FS(), db)
	if err != nil {
		return fmt.Errorf("mariadb: %w", err)
	}
	for _, e := range left {
		if e.Name() != "db.opt" {
			if err := root.RemoveAll(path.Join(db, e.Name())); err != nil {
				return fmt.Errorf("mariadb: %w", err)
			}
		}
	}
	// The tables go in side by side, on up to maxCopies connections: an
	// IMPORT reads its whole file, and the next table need not wait.
	work := make(chan Table)
	errs := make(chan error, len(tables)+maxCopies)
	var wg sync.WaitGroup
	for range min(len(tables), maxCopies) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := s.copies.Conn(ctx)
			if err == nil {
				defer conn.Close()
				for _, q := range []string{"USE " + quoteIdent(db), "SET SESSION foreign_key_checks = 0", "SET SESSION sql_mode = ''"} {
					if _, err = conn.ExecContext(ctx, q); err != nil {
						break
					}
				}
			}
			if err != nil {
				errs <- fmt.Errorf("import into %s: %w", db, err)
			}
			for t := range work {
				if err != nil {
					continue // drained, not done: the error is reported
				}
				if ierr := importTable(ctx, conn, root, db, aside, t); ierr != nil {
					_, _ = conn.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+quoteIdent(t.Name))
					errs <- fmt.Errorf("import table %q: %w", t.Name, Classify(ierr))
				}
			}
		}()
	}
	for _, t := range tables {
		work <- t
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs // nil when none was sent
}

func importTable(ctx context.Context, conn *sql.Conn, root *os.Root, db, aside string, t Table) error {
	if !strings.HasPrefix(t.DDL, "CREATE TABLE "+quoteIdent(t.Name)+" ") {
		return errors.New("the copy's definition is not the table's")
	}
	if _, err := conn.ExecContext(ctx, t.DDL); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "ALTER TABLE "+quoteIdent(t.Name)+" DISCARD TABLESPACE"); err != nil {
		return err
	}
	for _, ext := range []string{".ibd", ".cfg"} {
		to := path.Join(db, t.File+ext)
		if err := root.Rename(path.Join(aside, t.File+ext), to); err != nil {
			return err
		}
		if err := root.Lchown(to, uid, uid); err != nil {
			return err
		}
	}
	if _, err := conn.ExecContext(ctx, "ALTER TABLE "+quoteIdent(t.Name)+" IMPORT TABLESPACE"); err != nil {
		return err
	}
	if err := root.Remove(path.Join(db, t.File+".cfg")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// isLockWait reports a statement that gave up waiting for a lock (1205)
// or a metadata lock (lock_wait_timeout, also 1205).
func isLockWait(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1205
}
