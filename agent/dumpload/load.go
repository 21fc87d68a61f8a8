package dumpload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-sql-driver/mysql"
)

// DefaultMaxStatement bounds one statement unless Options says otherwise.
const DefaultMaxStatement = 64 << 20

// Execer runs one statement (a *sql.Conn does).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Options tune Load.
type Options struct {
	// MaxStatement bounds one statement; zero means DefaultMaxStatement.
	MaxStatement int
	// Progress, when set, is told the bytes read so far (about every MiB).
	Progress func(bytesRead int64)
	// Rewrite, when set, rewrites every string literal of INSERT and
	// REPLACE statements that contains RewriteNeedle (lower case) before
	// it is sent: URLs move as the dump streams in, not in a pass over
	// the database afterwards.
	Rewrite       func(string) string
	RewriteNeedle string
}

// Stats is what a load did.
type Stats struct {
	Statements int
	Skipped    int
	// SkipReasons are the first few reasons statements were skipped.
	SkipReasons []string
	Bytes       int64
	// Rewritten counts the literals Rewrite changed.
	Rewritten int
}

// Load runs a dump on x, statement by statement; the first refusal or
// error stops it and names the line.
func Load(ctx context.Context, x Execer, r io.Reader, opt Options) (Stats, error) {
	if opt.MaxStatement == 0 {
		opt.MaxStatement = DefaultMaxStatement
	}
	sc := NewScanner(r, opt.MaxStatement)
	var st Stats
	var reported int64
	for {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		stmt, err := sc.Next()
		st.Bytes = sc.BytesRead()
		if opt.Progress != nil && st.Bytes-reported >= 1<<20 {
			reported = st.Bytes
			opt.Progress(st.Bytes)
		}
		if errors.Is(err, io.EOF) {
			return st, nil
		}
		if err != nil {
			return st, err
		}
		act, text, err := Check(stmt.Text, stmt.Line)
		if err != nil {
			return st, err
		}
		if act == Skip {
			st.Skipped++
			if len(st.SkipReasons) < 5 {
				st.SkipReasons = append(st.SkipReasons, fmt.Sprintf("line %d: %s", stmt.Line, text))
			}
			continue
		}
		if opt.Rewrite != nil && opt.RewriteNeedle != "" {
			if w := words(text[:min(len(text), 64)]); len(w) > 0 && (w[0] == "INSERT" || w[0] == "REPLACE") {
				var n int
				text, n = rewriteLiterals(text, opt.RewriteNeedle, opt.Rewrite)
				st.Rewritten += n
			}
		}
		if _, err := x.ExecContext(ctx, text); err != nil {
			return st, fmt.Errorf("line %d: %w (in %s)", stmt.Line, err, clip(text, 120))
		}
		st.Statements++
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// DSN is a connection to db as a site's user over TCP: one statement per
// query, no LOCAL INFILE, utf8mb4.
func DSN(user, password, addr, db string) string {
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = user, password, "tcp", addr, db
	c.MultiStatements = false
	c.AllowAllFiles = false
	c.Params = map[string]string{"charset": "utf8mb4"}
	c.Timeout = 10 * time.Second
	c.MaxAllowedPacket = 0
	return c.FormatDSN()
}
