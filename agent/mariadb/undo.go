package mariadb

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
)

// The undo log every site shares lives in the system tablespace, capped at
// Config.SystemMaxMB so that it cannot fill the node's disk. But a cap
// alone lets one site take it all: a transaction that changes one large
// row over and over grows the undo by the row's size each time while its
// own disk grows by nothing (measured: 256 MiB in 4 s), and a transaction
// left open, even one that only read, keeps every site's committed undo
// from being purged; so does an XA transaction prepared and left without a
// connection, through restarts. Past the cap every site's writes fail
// ("The table … is full") for as long as that transaction stays. So
// prepared XA transactions without a connection are rolled back (see
// rollbackPrepared), and while the undo in use
// is above Config.UndoHighMB, Watch ends the site transactions that hold
// it: those of every site whose open transactions changed many rows, and
// every one begun before the undo went above the mark or a few seconds
// ago, whose read view pins what purge may free. Their connections end,
// their changes roll back and the space is theirs no more.

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

// Reaped is what the reaper ended of one site's database user.
type Reaped struct {
	User string
	// Connections ended, and the rows their transactions had changed.
	Connections  int
	RowsModified int64
	// OldestSeconds is the age of the oldest transaction ended.
	OldestSeconds int64
	// MemoryBytes is the memory the connections held (reapMemory).
	MemoryBytes int64
	// Why is "most rows changed", "old", "locks" or "memory".
	Why string
}

// siteTrx is an open transaction of a site's user.
type siteTrx struct {
	user     string
	conn     int64
	modified int64
	lockMem  int64 // bytes of the buffer pool its locks take
	age      int64 // seconds, by the server's clock
}

// heavyRows is how many rows a site's open transactions must have changed
// between them before they are ended as heavy: fewer hold little undo (a
// row's undo is at most about a page: 40 connections of a site at this
// many rows under 400 MiB), and a site's ordinary statements, which commit
// one by one, are left alone while purge catches up.
const heavyRows = 1000

// oldAfter is the age from which a transaction is ended while the undo is
// above its mark, however long it has been there: its read view pins
// every change committed since it began.
const oldAfter = 5

// Row locks live in InnoDB's buffer pool, which every site shares (128
// MiB): a site locking many pages (SELECT … LOCK IN SHARE MODE over a
// large table, from its forty connections) would make every site's
// writes fail ("The total number of locks exceeds the lock table size")
// and, near the whole pool, make the server abort. Once the locks of all
// transactions pass lockHighBytes, the transactions of each site whose
// locks pass siteLockBytes are ended.
var (
	lockHighBytes int64 = 32 << 20
	siteLockBytes int64 = 16 << 20
)

// reapUndo ends the transactions of sites holding too many locks (see
// lockHighBytes) and, while the undo in use is above Config.UndoHighMB,
// ends what holds it: every open writing transaction of each site whose open
// transactions changed heavyRows or more, and every site transaction
// begun before the undo went above the mark (overFor seconds ago) or
// oldAfter seconds ago or more. The server's own connections are never
// ended. It returns what it ended, by site, and the undo in use it saw.
func (s *Server) reapUndo(ctx context.Context, overFor int64) ([]Reaped, int64, error) {
	trxs, err := s.openTransactions(ctx)
	if err != nil {
		return nil, 0, err
	}
	used, err := s.UndoBytes(ctx)
	if err != nil {
		return nil, 0, err
	}
	over := used > s.cfg.UndoHighMB<<20
	var locks int64
	for _, t := range trxs {
		locks += t.lockMem
	}
	if !over && locks <= lockHighBytes || len(trxs) == 0 {
		return nil, used, nil
	}
	if trxs, err = s.ofSites(ctx, trxs); err != nil {
		return nil, used, err
	}
	byUser, lockByUser := map[string]int64{}, map[string]int64{}
	for _, t := range trxs {
		byUser[t.user] += t.modified
		lockByUser[t.user] += t.lockMem
	}
	out := map[string]*Reaped{}
	var order []string
	for _, t := range trxs {
		why := ""
		switch {
		case lockByUser[t.user] > siteLockBytes && t.lockMem > 0:
			why = "locks"
		case !over:
			continue
		case byUser[t.user] >= heavyRows && t.modified > 0:
			why = "most rows changed"
		case t.age >= oldAfter || t.age > overFor:
			why = "old"
		default:
			continue
		}
		if _, err := s.db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", t.conn)); err != nil && !isUnknownThread(err) {
			return collect(out, order), used, fmt.Errorf("mariadb: end connection %d of %s: %w", t.conn, t.user, err)
		}
		r := out[t.user+" "+why]
		if r == nil {
			r = &Reaped{User: t.user, Why: why}
			out[t.user+" "+why] = r
			order = append(order, t.user+" "+why)
		}
		r.Connections++
		r.RowsModified += t.modified
		r.OldestSeconds = max(r.OldestSeconds, t.age)
	}
	return collect(out, order), used, nil
}

func collect(m map[string]*Reaped, order []string) []Reaped {
	out := make([]Reaped, 0, len(order))
	for _, k := range order {
		out = append(out, *m[k])
	}
	return out
}

// openTransactions lists the open transactions that have a connection,
// but those rolling back. InnoDB answers from a snapshot it refreshes
// only once no one has read it for 0.1 s (CACHE_MIN_IDLE_TIME_US): an
// operator's tool reading it faster than that would keep the watch
// seeing the past, so nothing here should poll it that often.
func (s *Server) openTransactions(ctx context.Context) ([]siteTrx, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT trx_mysql_thread_id, trx_rows_modified, trx_lock_memory_bytes,
		TIMESTAMPDIFF(SECOND, trx_started, NOW()) FROM information_schema.INNODB_TRX WHERE trx_state <> 'ROLLING BACK'`)
	if err != nil {
		return nil, fmt.Errorf("mariadb: open transactions: %w", err)
	}
	defer rows.Close()
	var trxs []siteTrx
	for rows.Next() {
		var t siteTrx
		if err := rows.Scan(&t.conn, &t.modified, &t.lockMem, &t.age); err != nil {
			return nil, err
		}
		if t.conn != 0 { // prepared XA transactions have none
			trxs = append(trxs, t)
		}
	}
	return trxs, rows.Err()
}

// ofSites keeps the transactions of sites' users, each with its user:
// not the server's own (the agent's), system threads' or those of ended
// connections. InnoDB's list and the process list are read apart and
// joined here: a join in SQL would make a temporary table of the process
// list, on the temporary disk sites share.
func (s *Server) ofSites(ctx context.Context, trxs []siteTrx) ([]siteTrx, error) {
	users, err := s.processes(ctx)
	if err != nil {
		return nil, err
	}
	var out []siteTrx
	for _, t := range trxs {
		t.user = users[t.conn]
		if t.user == "" || t.user == adminUser || !ident.MatchString(t.user) {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// processes maps the server's live connections to their users (SHOW
// PROCESSLIST, which needs no temporary table); ended ones are left out.
func (s *Server) processes(ctx context.Context) (map[int64]string, error) {
	rows, err := s.db.QueryContext(ctx, "SHOW PROCESSLIST")
	if err != nil {
		return nil, fmt.Errorf("mariadb: process list: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	vals := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	idx := map[string]int{}
	for i, c := range cols {
		idx[c] = i
	}
	id, user, command := idx["Id"], idx["User"], idx["Command"]
	out := map[int64]string{}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		if string(vals[command]) == "Killed" {
			continue
		}
		n, err := strconv.ParseInt(string(vals[id]), 10, 64)
		if err != nil {
			continue
		}
		out[n] = string(vals[user])
	}
	return out, rows.Err()
}

// reapMemory ends the site connections that hold more of the server's
// memory than Config.SessionMemMB, and every connection (holding any) of
// a site whose connections together hold more than an eighth of
// Config.MemoryMB. The server refuses a statement past
// that bound only at its next check, and a SET of many user variables has
// none: one such statement kept 1 GB in a connection (measured), which
// then held it, idle.
func (s *Server) reapMemory(ctx context.Context) ([]Reaped, error) {
	// A site's connections together may hold an eighth of the server's
	// memory: one site cannot make the kernel end it for everyone.
	perSite := s.cfg.MemoryMB << 20 / 8
	rows, err := s.db.QueryContext(ctx, `SELECT USER, ID, MEMORY_USED FROM information_schema.PROCESSLIST
		WHERE MEMORY_USED > ? AND COMMAND <> 'Killed'`, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("mariadb: connections' memory: %w", err)
	}
	type conn struct {
		user      string
		id, bytes int64
	}
	var conns []conn
	byUser := map[string]int64{}
	for rows.Next() {
		var c conn
		if err := rows.Scan(&c.user, &c.id, &c.bytes); err != nil {
			rows.Close()
			return nil, err
		}
		if c.user != adminUser && ident.MatchString(c.user) {
			conns = append(conns, c)
			byUser[c.user] += c.bytes
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := map[string]*Reaped{}
	var order []string
	for _, c := range conns {
		if c.bytes <= s.cfg.SessionMemMB<<20 && byUser[c.user] <= perSite {
			continue
		}
		if _, err := s.db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", c.id)); err != nil && !isUnknownThread(err) {
			return collect(out, order), fmt.Errorf("mariadb: end connection %d of %s: %w", c.id, c.user, err)
		}
		r := out[c.user]
		if r == nil {
			r = &Reaped{User: c.user, Why: "memory"}
			out[c.user] = r
			order = append(order, c.user)
		}
		r.Connections++
		r.MemoryBytes += c.bytes
	}
	return collect(out, order), nil
}
