package mariadb_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sandboxd/sandboxd/agent/mariadb"
)

// TestOneSiteCannotHoldTheSharedUndo: the undo log every site shares (in
// the system tablespace, capped at SystemMaxMB) is not one site's to
// fill. A site that updates one 7 KB row over and over in one open
// transaction writes no more than that row on its own disk (so its plan
// and the guard see nothing) but fills the shared undo in seconds; a
// site that keeps a read view open keeps every other site's committed
// undo from being purged. Either way, without the reaper every other
// site's writes fail ("The table … is full") for as long as the
// transaction stays open (measured: still failing 60 s later). With it,
// the transaction is ended, its changes roll back, the undo in use falls
// and another site writes again.
func TestOneSiteCannotHoldTheSharedUndo(t *testing.T) {
	ctx := context.Background()
	srv, _ := startServer(t) // SystemMaxMB 256: the reaper starts at 128
	watchFor(t, srv, nil)

	site := func(name string) *sql.DB {
		if err := srv.CreateSiteDatabase(ctx, "", name, name, "pw-"+name); err != nil {
			t.Fatal(err)
		}
		db := openAs(t, srv, name, "pw-"+name, name)
		// No idle connections kept: the watch ends every connection of a
		// site it stops, and a pooled one it ended would fail the next
		// query as a dead connection.
		db.SetMaxIdleConns(0)
		for _, q := range []string{
			"CREATE TABLE u (id int PRIMARY KEY, v varchar(7000))",
			"INSERT INTO u VALUES (1, REPEAT('a', 7000))",
			// churn changes the row n times; in autocommit each change
			// commits on its own.
			"CREATE PROCEDURE churn(n int) BEGIN DECLARE i int DEFAULT 0; WHILE i < n DO " +
				"UPDATE u SET v = REPEAT(CHAR(65 + i % 26), 7000) WHERE id = 1; SET i = i + 1; END WHILE; END",
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		return db
	}
	writes := func(t *testing.T, db *sql.DB) {
		t.Helper()
		// At the latest once the reaper has ended the transaction and
		// its rollback is done.
		eventually(t, time.Minute, 100*time.Millisecond, func() error {
			if _, err := db.ExecContext(ctx, "UPDATE u SET v = 'other' WHERE id = 1"); err != nil {
				return fmt.Errorf("another site cannot write while one site holds the shared undo: %w", err)
			}
			return nil
		})
	}
	ended := func(t *testing.T, conn *sql.Conn) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, "SELECT 1"); err == nil {
			t.Fatal("the connection that held the undo is still open")
		}
	}
	undoFalls := func(t *testing.T) {
		t.Helper()
		eventually(t, time.Minute, 100*time.Millisecond, func() error {
			used, err := srv.UndoBytes(ctx)
			if err == nil && used >= 128<<20 {
				err = fmt.Errorf("the undo in use stays at %d MiB", used>>20)
			}
			return err
		})
	}
	hog, other := site("wp_hog"), site("wp_other")

	t.Run("one transaction changing a row over and over", func(t *testing.T) {
		conn, err := hog.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
			t.Fatal(err)
		}
		_, churnErr := conn.ExecContext(ctx, "CALL churn(60000)")
		if churnErr == nil {
			t.Fatal("60,000 changes of 7 KB in one transaction went through under a 256 MiB undo log")
		}
		t.Logf("the site's churn: %v", churnErr)
		writes(t, other)
		// Ended by the watch mid-way, as a rule; on a slow machine the
		// undo may reach its cap first, and the server rolls the
		// statement back itself (its transaction then holds nothing).
		var me *mysql.MySQLError
		if !errors.As(churnErr, &me) || me.Number != 1114 {
			ended(t, conn)
		}
		// Its changes rolled back: the row is what it was. Read once the
		// rollback is done: until then the watch ends the site's new
		// connections too.
		eventually(t, time.Minute, 100*time.Millisecond, func() error {
			var v string
			if err := hog.QueryRowContext(ctx, "SELECT LEFT(v, 3) FROM u WHERE id = 1").Scan(&v); err != nil || v != "aaa" {
				return fmt.Errorf("the ended transaction's row: %q %v", v, err)
			}
			return nil
		})
		undoFalls(t)
	})

	t.Run("a read view kept open while another site churns", func(t *testing.T) {
		conn, err := hog.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT"); err != nil {
			t.Fatal(err)
		}
		// A transaction is old once it began before the undo went above
		// the mark, in the server's whole seconds: let its clock tick.
		var began int64
		if err := conn.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP()").Scan(&began); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
			var now int64
			err := srv.Root().QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP()").Scan(&now)
			if err == nil && now <= began {
				err = errors.New("the server's clock has not ticked")
			}
			return err
		})
		// Committed changes, each small, whose undo the open read view
		// keeps from purge: past the reaper's mark the reader is ended
		// (whether the writer found the undo full before depends on how
		// fast the machine is).
		third := site("wp_third")
		_, err = third.ExecContext(ctx, "CALL churn(25000)")
		t.Logf("a site committing its changes one by one: %v", err)
		ended(t, conn)
		writes(t, other)
		undoFalls(t)
	})

	t.Run("prepared XA transactions left without a connection", func(t *testing.T) {
		// prepare runs the statements on a connection of its own, then
		// drops it: the transaction stays prepared, its undo and its
		// locks through restarts.
		prepare := func(xid string, work string) {
			conn, err := hog.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"XA START " + xid, work, "XA END " + xid, "XA PREPARE " + xid} {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			conn.Raw(func(any) error { return driver.ErrBadConn })
			conn.Close()
		}
		if _, err := hog.ExecContext(ctx, "CREATE TABLE xa (id int PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		// A hundred, each locking a row of its own, while the watch runs;
		// then one with a format id of the site's choosing, the largest
		// there is (the rollback names it as it was given).
		for i := range 100 {
			prepare(fmt.Sprintf("'many-%d'", i), fmt.Sprintf("INSERT INTO xa VALUES (%d)", i))
		}
		prepare("'squat','',2147483647", "CALL churn(1000)")
		// Gone from the server's prepared transactions, their row locks
		// released: another transaction locks the rows at once.
		eventually(t, time.Minute, 100*time.Millisecond, func() error {
			if err := noPrepared(srv); err != nil {
				return err
			}
			tx, err := hog.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			var v string
			if err := tx.QueryRowContext(ctx, "SELECT LEFT(v, 3) FROM u WHERE id = 1 FOR UPDATE NOWAIT").Scan(&v); err != nil {
				return fmt.Errorf("the prepared transaction's row stays locked: %w", err)
			}
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM xa FOR UPDATE NOWAIT").Scan(&n); err != nil || n != 0 {
				return fmt.Errorf("the prepared inserts: %d rows, %v", n, err)
			}
			return nil
		})
		var v string
		if err := hog.QueryRowContext(ctx, "SELECT LEFT(v, 3) FROM u WHERE id = 1").Scan(&v); err != nil || v != "aaa" {
			t.Fatalf("the prepared transaction's row: %q %v", v, err)
		}
	})

	// The server's own connections are never ended.
	if err := srv.Root().PingContext(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOneSiteCannotTakeTheLockMemory: row locks live in the buffer pool
// every site shares; a site locking many pages from many connections
// would leave none for the others' writes (and, at the whole pool, make
// the server abort). Past the bound, that site's transactions are ended;
// another site's few locks are not. (The bounds are lowered here: the
// defaults need tables of hundreds of MB.)
func TestOneSiteCannotTakeTheLockMemory(t *testing.T) {
	ctx := context.Background()
	srv, _ := startServer(t)
	const high = 64 << 10 // a site's 200,000 rows locked take about 100 KiB per connection
	t.Cleanup(mariadb.SetLockBoundsForTests(high, high/2))
	watchFor(t, srv, nil)
	open := func(name string) *sql.DB {
		if err := srv.CreateSiteDatabase(ctx, "", name, name, "pw"); err != nil {
			t.Fatal(err)
		}
		return openAs(t, srv, name, "pw", name)
	}
	hog, other := open("wp_locks"), open("wp_few")
	// All along, a third site leaves empty prepared XA transactions from
	// four connections as fast as it can: the lock check is not delayed
	// by them, and once it stops they are all rolled back.
	stopFlood := floodPrepared(t, open("wp_xa"), 4)
	for _, q := range []string{"CREATE TABLE t (id int PRIMARY KEY, v varchar(100))",
		"INSERT INTO t SELECT seq, REPEAT('x', 100) FROM seq_1_to_200000"} {
		if _, err := hog.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)"} {
		if _, err := other.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	few, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer few.Close()
	if _, err := few.ExecContext(ctx, "START TRANSACTION"); err != nil {
		t.Fatal(err)
	}
	if _, err := few.ExecContext(ctx, "SELECT * FROM t LOCK IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	var conns []*sql.Conn
	for range 4 {
		c, err := hog.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		if _, err := c.ExecContext(ctx, "START TRANSACTION"); err != nil {
			t.Fatal(err)
		}
		// Ended meanwhile, the statement fails: what the test wants.
		_, err = c.ExecContext(ctx, "SELECT COUNT(v) FROM t LOCK IN SHARE MODE")
		t.Logf("locking 200,000 rows: %v", err)
	}
	// Past the bound of all sites' locks, the locking site's are ended
	// until all are under it again.
	eventually(t, 30*time.Second, 500*time.Millisecond, func() error {
		for _, c := range conns {
			if _, err := c.ExecContext(ctx, "SELECT 1"); err != nil {
				return nil
			}
		}
		return errors.New("none of the locking site's connections was ended")
	})
	// InnoDB refreshes INNODB_TRX only once no one has read it for 0.1 s:
	// polled no faster than the watch, it shows the present.
	eventually(t, 30*time.Second, 500*time.Millisecond, func() error {
		var locks int64
		err := srv.Root().QueryRowContext(ctx, "SELECT COALESCE(SUM(trx_lock_memory_bytes), 0) FROM information_schema.INNODB_TRX").Scan(&locks)
		if err == nil && locks > high {
			err = fmt.Errorf("the transactions hold %d KiB of locks", locks>>10)
		}
		return err
	})
	if _, err := few.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatalf("another site's transaction with few locks was ended: %v", err)
	}
	left := stopFlood()
	t.Logf("the flooding site left %d prepared transactions", left)
	if left == 0 {
		t.Fatal("the flood left no prepared transaction")
	}
	eventually(t, time.Minute, 250*time.Millisecond, func() error { return noPrepared(srv) })
}

// noPrepared fails while the server lists any prepared XA transaction.
func noPrepared(srv *mariadb.Server) error {
	rows, err := srv.Root().Query("XA RECOVER")
	if err != nil {
		return err
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%d prepared transactions stay", n)
	}
	return nil
}

// floodPrepared has n connections of db prepare empty XA transactions
// and leave them, a new connection each time, until the returned func is
// called; that returns how many were left.
func floodPrepared(t *testing.T, db *sql.DB, n int) func() int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	left := 0
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				conn, err := db.Conn(ctx)
				if err != nil {
					continue
				}
				xid := fmt.Sprintf("'flood-%d-%d'", w, i)
				ok := true
				for _, q := range []string{"XA START " + xid, "XA END " + xid, "XA PREPARE " + xid} {
					if _, err := conn.ExecContext(ctx, q); err != nil {
						ok = false
						break
					}
				}
				conn.Raw(func(any) error { return driver.ErrBadConn })
				conn.Close()
				if ok {
					mu.Lock()
					left++
					mu.Unlock()
				}
			}
		}()
	}
	stopped := false
	stop := func() int {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
		mu.Lock()
		defer mu.Unlock()
		return left
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestWatchRestartsAStoppedServer: when mariadbd dies (a crash, the OOM
// killer), every site's database is gone until someone starts it again;
// Watch does, and what the sites committed is there.
func TestWatchRestartsAStoppedServer(t *testing.T) {
	ctx := context.Background()
	srv, _ := startServer(t)
	rt := runtimeOf(srv)
	if err := srv.CreateSiteDatabase(ctx, "", "wp_crash", "wp_crash", "pw"); err != nil {
		t.Fatal(err)
	}
	site := openAs(t, srv, "wp_crash", "pw", "wp_crash")
	for _, q := range []string{"CREATE TABLE t (v varchar(16))", "INSERT INTO t VALUES ('committed')"} {
		if _, err := site.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	obs := &observer{}
	watchFor(t, srv, obs)

	// mariadbd crashes: SIGSEGV, which it handles by aborting.
	res, err := rt.Exec(ctx, mariadb.ContainerID, []string{"kill", "-SEGV", "1"}, nil, mariadb.UID, mariadb.UID, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("crash mariadbd: %v %+v", err, res)
	}
	eventually(t, 2*time.Minute, 100*time.Millisecond, func() error {
		var v string
		err := site.QueryRowContext(ctx, "SELECT v FROM t").Scan(&v)
		if err != nil || v != "committed" || obs.restarts() == 0 {
			return fmt.Errorf("the site's database after mariadbd crashed: %q %v (restarts %d)", v, err, obs.restarts())
		}
		return nil
	})
	if running, err := rt.Running(ctx, mariadb.ContainerID); err != nil || !running {
		t.Fatalf("running %v %v", running, err)
	}
}

// observer counts what Watch reports.
type observer struct {
	mu       sync.Mutex
	restart  int
	failures int
}

func (o *observer) Undo(int64, int) {}

func (o *observer) MemoryEnded(int) {}

func (o *observer) Prepared(int, int) {}

func (o *observer) Restarted(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		o.failures++
		return
	}
	o.restart++
}

func (o *observer) restarts() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.restart
}

// watchFor runs srv's Watch every 250 ms, logging to the test, until the
// test ends: more often, it would read INNODB_TRX too often for InnoDB to
// refresh it (see openTransactions).
func watchFor(t *testing.T, srv *mariadb.Server, obs mariadb.Observer) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Watch(ctx, runtimeOf(srv), 250*time.Millisecond, slog.New(slog.NewTextHandler(testWriter{t}, nil)), obs)
	}()
	t.Cleanup(func() { stop(); <-done })
}

// eventually calls cond every interval until it returns nil, and fails
// the test with its last error once limit has passed.
func eventually(t *testing.T, limit, every time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(every)
	}
}

// testWriter writes a logger's lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
