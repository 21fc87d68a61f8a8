package sites

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/runtime"
)

// An AI agent (or a script) runs its own PHP and SQL in a site: PHP as
// the site's user inside its container, SQL over the site's own database
// account, both bounded in time and in what they hand back. Neither
// reaches more than the site itself can.

// Bounds of RunPHP and RunSQL.
const (
	MaxCodeBytes   = 1 << 20 // a PHP script or an SQL statement
	MaxPHPStdout   = 1 << 20
	MaxPHPStderr   = 64 << 10
	MaxSQLRows     = 1000
	MaxSQLBytes    = 1 << 20 // of the rows' values together
	DefaultCodeRun = 30 * time.Second
	MaxCodeRun     = 120 * time.Second
)

// PHPResult is what a PHP script did.
type PHPResult struct {
	ExitCode  int
	Stdout    []byte
	Stderr    []byte
	Truncated bool
	// TimedOut says it was killed at its time bound.
	TimedOut bool
}

// boundedExec is a runtime that keeps a bounded part of an exec's output.
type boundedExec interface {
	ExecBounded(ctx context.Context, id string, argv, env []string, uid, gid uint32, stdin []byte, maxOut, maxErr int) (*runtime.ExecResult, error)
}

// codeTimeout is the bound a request asks for, within the node's.
func codeTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultCodeRun
	}
	return min(d, MaxCodeRun)
}

// RunPHP runs a PHP script (a file's content, <?php …) with the PHP CLI
// as the site's user inside its container, from its WordPress root (so
// `require 'wp-load.php';` loads WordPress), for at most timeout.
func (m *Manager) RunPHP(ctx context.Context, id, code string, timeout time.Duration) (*PHPResult, error) {
	if len(code) == 0 {
		return nil, fmt.Errorf("%w: code is empty", ErrInvalid)
	}
	if len(code) > MaxCodeBytes {
		return nil, fmt.Errorf("%w: code is over %d bytes", ErrPayloadTooLarge, MaxCodeBytes)
	}
	s := m.get(id)
	switch {
	case s == nil:
		return nil, ErrNotFound
	case s.UID <= 0:
		return nil, fmt.Errorf("%w: site %s was made by an older agent; delete and recreate it", ErrInvalid, id)
	}
	ex, ok := m.cfg.Runtime.(boundedExec)
	if !ok {
		return nil, errors.New("sites: the runtime cannot bound an exec's output")
	}
	release, err := m.Hold(ctx, id, DoorAPI)
	if err != nil {
		return nil, err
	}
	defer release()
	timeout = codeTimeout(timeout)
	secs := strconv.Itoa(int(timeout.Seconds()))
	// PHP's own bound first (max_execution_time counts CPU time only on
	// Linux); the exec's context kills what outlives the wall clock.
	argv := []string{"sh", "-c", `cd /srv/site/wordpress && exec php -d display_errors=stderr -d log_errors=0 -d html_errors=0 ` +
		`-d max_execution_time=` + secs + ` -d memory_limit=256M /dev/stdin`}
	rctx, cancel := context.WithTimeout(ctx, timeout+2*time.Second)
	defer cancel()
	res, err := ex.ExecBounded(rctx, containerID(id), argv, nil, uint32(s.UID), uint32(s.UID), []byte(code), MaxPHPStdout, MaxPHPStderr)
	if err != nil {
		if rctx.Err() != nil && ctx.Err() == nil {
			return &PHPResult{ExitCode: -1, Stderr: []byte("killed: it ran past its " + timeout.String() + " bound"), TimedOut: true}, nil
		}
		return nil, err
	}
	return &PHPResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr, Truncated: res.Truncated}, nil
}

// SQLResult is what a statement did: its columns and rows (each value a
// string, or nil for NULL) when it returns rows, else the rows it
// changed.
type SQLResult struct {
	Columns      []string
	Rows         [][]*string
	AffectedRows int64
	Truncated    bool
}

// ErrSQL is a statement the database refused; its message is MariaDB's.
var ErrSQL = errors.New("the statement failed")

// RunSQL runs one statement over the site's own database account (which
// reaches its database alone), in its database, for at most timeout.
// Rows past MaxSQLRows or MaxSQLBytes are not read: the statement is cut
// off, and Truncated says so.
func (m *Manager) RunSQL(ctx context.Context, id, query string, timeout time.Duration) (*SQLResult, error) {
	if len(query) == 0 {
		return nil, fmt.Errorf("%w: query is empty", ErrInvalid)
	}
	if len(query) > MaxCodeBytes {
		return nil, fmt.Errorf("%w: query is over %d bytes", ErrPayloadTooLarge, MaxCodeBytes)
	}
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	// A bounded few at once per node: each may hold a row of any size
	// the server sends before it is looked at.
	select {
	case m.sqlSlots <- struct{}{}:
		defer func() { <-m.sqlSlots }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	timeout = codeTimeout(timeout)
	ctx, cancel := context.WithTimeout(ctx, timeout+2*time.Second)
	defer cancel()
	conn, done, err := siteConn(ctx, s, m.cfg.DB.Addr(), s.DBName)
	if err != nil {
		return nil, m.dbError(id, err)
	}
	defer done()
	// The server's own bound, so that a statement cut off goes no further.
	if _, err := conn.ExecContext(ctx, "SET SESSION max_statement_time = "+strconv.Itoa(int(timeout.Seconds()))); err != nil {
		return nil, m.dbError(id, err)
	}
	rows, err := conn.QueryContext(ctx, query)
	if err != nil {
		return nil, sqlError(m, id, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, sqlError(m, id, err)
	}
	out := &SQLResult{Columns: cols, Rows: [][]*string{}}
	if len(cols) == 0 {
		// No result set: what it changed comes with the statement's OK.
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, sqlError(m, id, err)
		}
		var n sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT ROW_COUNT()").Scan(&n); err == nil && n.Int64 > 0 {
			out.AffectedRows = n.Int64
		}
		return out, nil
	}
	size := 0
	for rows.Next() {
		if len(out.Rows) == MaxSQLRows || size >= MaxSQLBytes {
			out.Truncated = true
			cancel() // the rest is not read: the connection goes, and the statement with it
			break
		}
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, sqlError(m, id, err)
		}
		row := make([]*string, len(cols))
		for i, v := range vals {
			if !v.Valid {
				continue
			}
			str := v.String
			if size+len(str) > MaxSQLBytes {
				// Only what fits is kept: the row is cut, and the rest
				// of the result with it.
				str = str[:max(MaxSQLBytes-size, 0)]
				out.Truncated = true
			}
			// Binary values come back as text: what is not UTF-8 is
			// replaced (HEX() gives such a value exactly).
			str = strings.ToValidUTF8(str, "\uFFFD")
			row[i] = &str
			size += len(str)
		}
		out.Rows = append(out.Rows, row)
		if out.Truncated {
			cancel()
			break
		}
	}
	if err := rows.Err(); err != nil && !out.Truncated {
		return nil, sqlError(m, id, err)
	}
	return out, nil
}

// sqlError is a failed statement: the disk full, or MariaDB's refusal.
func sqlError(m *Manager, id string, err error) error {
	if derr := m.dbError(id, err); errors.Is(derr, ErrDiskFull) {
		return derr
	}
	return fmt.Errorf("%w: %v", ErrSQL, err)
}
