package mariadb

import (
	"context"
	"database/sql/driver"
	"fmt"
	"time"
)

// A prepared XA transaction outlives its connection: its undo and its
// locks stay through KILL and restarts until someone commits or rolls it
// back by its xid. The agent uses none and WordPress has no transaction
// manager, so Watch rolls back every one it finds. A site can leave them
// about as fast as it can connect, and even empty ones (no undo, no
// locks) are kept in the server's memory; so the step has bounds of its
// own and runs after the undo and lock checks, which nothing it meets
// can delay.
const (
	// maxPrepared is how many of the listed transactions one check reads;
	// past it, the listing's connection is dropped, not drained.
	maxPrepared = 10000
	// rollbackBudget is how long one check spends rolling back; the rest
	// waits for the next check.
	rollbackBudget = 500 * time.Millisecond
	// xaTimeout bounds the whole step.
	xaTimeout = 5 * time.Second
)

// rollbackPrepared rolls back the prepared XA transactions the server
// lists (XA RECOVER: the server's own list, never a snapshot), for up to
// rollbackBudget. It returns how many were listed (maxPrepared meaning
// that many or more) and how many it rolled back. One whose connection
// still lives cannot be rolled back from here and is left to that
// connection.
func (s *Server) rollbackPrepared(ctx context.Context) (listed, rolledBack int, err error) {
	xids, err := s.listPrepared(ctx)
	if err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(rollbackBudget)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for _, x := range xids {
		if rctx.Err() != nil {
			break // the rest at the next check
		}
		// Errors are those attached to a live connection, or the budget
		// ending mid-rollback (the server finishes it).
		if _, err := s.db.ExecContext(rctx, "XA ROLLBACK "+x); err == nil {
			rolledBack++
		}
	}
	return len(xids), rolledBack, nil
}

// listPrepared reads up to maxPrepared xids from XA RECOVER, each as the
// literals XA ROLLBACK takes.
func (s *Server) listPrepared(ctx context.Context) ([]string, error) {
	// On a connection of its own, under a context of its own: past the
	// cap, cancelling closes the connection rather than reading the rest.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := s.db.Conn(lctx)
	if err != nil {
		return nil, fmt.Errorf("mariadb: prepared transactions: %w", err)
	}
	defer conn.Close()
	rows, err := conn.QueryContext(lctx, "XA RECOVER")
	if err != nil {
		return nil, fmt.Errorf("mariadb: prepared transactions: %w", err)
	}
	var xids []string
	capped := false
	for rows.Next() {
		if capped = len(xids) == maxPrepared; capped {
			cancel()
			break
		}
		var format, gtridLen, bqualLen int64
		var data []byte
		if err := rows.Scan(&format, &gtridLen, &bqualLen, &data); err != nil {
			rows.Close()
			return nil, fmt.Errorf("mariadb: prepared transactions: %w", err)
		}
		if gtridLen < 0 || bqualLen < 0 || gtridLen+bqualLen != int64(len(data)) {
			continue
		}
		// The xid as hexadecimal literals: the site chose its bytes. The
		// format id is unsigned in XA's grammar, shown signed.
		xids = append(xids, fmt.Sprintf("X'%x',X'%x',%d", data[:gtridLen], data[gtridLen:], uint64(format)))
	}
	rows.Close()
	if capped {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return xids, nil
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mariadb: prepared transactions: %w", err)
	}
	return xids, nil
}
