package mariadb

import (
	"context"
	"fmt"
	"time"
)

// The undo log every site shares lives in the system tablespace, capped at
// Config.SystemMaxMB so that it cannot fill the node's disk. But a cap
// alone lets one site take it all: a transaction that changes one large
// row over and over grows the undo by the row's size each time while its
// own disk grows by nothing (measured: 256 MiB in 4 s), and a transaction
// left open, even one that only read, keeps every site's committed undo
// from being purged. Past the cap every site's writes fail ("The table …
// is full") for as long as that transaction stays open. So when the undo
// in use passes Config.UndoHighMB, WatchUndo ends the site transactions
// that hold it: the one that changed the most rows, and the oldest (which
// pins what purge may free). Their connections end, their changes roll
// back and the space is theirs no more; the others never notice.

// undoMonitor is InnoDB's counter of the pages its rollback segments hold
// (off by default: a restarted server starts without it, so every check
// turns it on).
const undoMonitor = "trx_rseg_current_size"

// innodbPage is InnoDB's default page size, which the server uses.
const innodbPage = 16 << 10

// UndoBytes is how much of the shared undo log is in use: committed
// changes not yet purged and those of open transactions.
func (s *Server) UndoBytes(ctx context.Context) (int64, error) {
	var pages int64
	var enabled bool
	err := s.db.QueryRowContext(ctx, "SELECT COUNT, ENABLED FROM information_schema.INNODB_METRICS WHERE NAME = ?", undoMonitor).Scan(&pages, &enabled)
	if err != nil {
		return 0, fmt.Errorf("mariadb: undo in use: %w", err)
	}
	if !enabled {
		// Counting starts now: rollback segments already in use count
		// from the next check on.
		if _, err := s.db.ExecContext(ctx, "SET GLOBAL innodb_monitor_enable = '"+undoMonitor+"'"); err != nil {
			return 0, fmt.Errorf("mariadb: count the undo in use: %w", err)
		}
		if err := s.db.QueryRowContext(ctx, "SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = ?", undoMonitor).Scan(&pages); err != nil {
			return 0, fmt.Errorf("mariadb: undo in use: %w", err)
		}
	}
	return pages * innodbPage, nil
}

// Reaped is a site connection the reaper ended.
type Reaped struct {
	User         string
	Connection   int64
	RowsModified int64
	Started      time.Time
	// Why is "most rows changed" or "oldest".
	Why string
}

// siteTrx is an open transaction of a site's user.
type siteTrx struct {
	user     string
	conn     int64
	modified int64
	started  time.Time
}

// heavyRows is how many rows a site's open transactions must have changed
// between them before they are ended as the heaviest: fewer hold little
// undo (a row's undo is at most about a page, 40 connections of a site
// at this many rows under 400 MiB), and a site's ordinary statements,
// which commit one by one, are left alone while purge catches up.
const heavyRows = 1000

// oldAfter is how old a transaction is always old enough to be ended as
// the oldest, however long the undo has been above its mark.
const oldAfter = 30 * time.Second

// reapUndo ends, while the undo in use is above Config.UndoHighMB, what
// holds it: every open writing transaction of the site whose open
// transactions changed the most rows (heavyRows at least), and the oldest transaction of any
// site if it began before the undo went above the mark (since) or
// oldAfter ago, whose read view keeps purge from freeing what every site
// committed since. Transactions begun while the undo is above its mark
// that changed nothing hold nothing and are left alone; so are the
// server's own connections. It returns what it ended and the undo in
// use it saw.
func (s *Server) reapUndo(ctx context.Context, now, since time.Time) ([]Reaped, int64, error) {
	used, err := s.UndoBytes(ctx)
	if err != nil || used <= s.cfg.UndoHighMB<<20 {
		return nil, used, err
	}
	trxs, err := s.siteTransactions(ctx)
	if err != nil || len(trxs) == 0 {
		return nil, used, err
	}
	byUser := map[string]int64{}
	heavy := ""
	var oldest *siteTrx
	for i, t := range trxs {
		byUser[t.user] += t.modified
		if byUser[t.user] > byUser[heavy] {
			heavy = t.user
		}
		// The server's clock counts whole seconds.
		if t.started.Before(since.Truncate(time.Second)) || t.started.Before(now.Add(-oldAfter)) {
			if oldest == nil || t.started.Before(oldest.started) {
				oldest = &trxs[i]
			}
		}
	}
	var out []Reaped
	end := func(t siteTrx, why string) error {
		for _, r := range out {
			if r.Connection == t.conn {
				return nil
			}
		}
		if _, err := s.db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", t.conn)); err != nil && !isUnknownThread(err) {
			return fmt.Errorf("mariadb: end connection %d of %s: %w", t.conn, t.user, err)
		}
		out = append(out, Reaped{User: t.user, Connection: t.conn, RowsModified: t.modified, Started: t.started, Why: why})
		return nil
	}
	if heavy != "" && byUser[heavy] >= heavyRows {
		for _, t := range trxs {
			if t.user == heavy && t.modified > 0 {
				if err := end(t, "most rows changed"); err != nil {
					return out, used, err
				}
			}
		}
	}
	if oldest != nil {
		if err := end(*oldest, "oldest"); err != nil {
			return out, used, err
		}
	}
	return out, used, nil
}

// siteTransactions lists the open transactions of sites' users, but
// those whose connection is already ended (rolling back).
func (s *Server) siteTransactions(ctx context.Context) ([]siteTrx, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT p.USER, p.ID, t.trx_rows_modified, t.trx_started
		FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
		WHERE t.trx_state <> 'ROLLING BACK' AND p.COMMAND <> 'Killed'`)
	if err != nil {
		return nil, fmt.Errorf("mariadb: open transactions: %w", err)
	}
	defer rows.Close()
	var out []siteTrx
	for rows.Next() {
		var t siteTrx
		var started string
		if err := rows.Scan(&t.user, &t.conn, &t.modified, &started); err != nil {
			return nil, err
		}
		// The server's own (the agent's) and system threads are never
		// a site's.
		if t.user == adminUser || !ident.MatchString(t.user) {
			continue
		}
		// The server's clock is UTC in its container.
		t.started, _ = time.Parse(time.DateTime, started)
		out = append(out, t)
	}
	return out, rows.Err()
}

