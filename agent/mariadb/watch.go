package mariadb

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Observer hears what Watch does (the agent's metrics).
type Observer interface {
	Undo(usedBytes int64, ended int)
	MemoryEnded(ended int)
	Restarted(err error)
	Prepared(listed, rolledBack int)
}

// Revive starts the server's container again when its task is not
// running, and waits until it answers; it reports whether it had to.
// The sites' connections fail meanwhile and work again after (their
// socket is in the same place); InnoDB recovers what was committed.
func (s *Server) Revive(ctx context.Context, rt Runner) (bool, error) {
	running, err := rt.Running(ctx, ContainerID)
	if err != nil || running {
		return false, err
	}
	if err := rt.Run(ctx, s.spec()); err != nil {
		return true, fmt.Errorf("start mariadb again: %w", err)
	}
	return true, waitReady(ctx, s.db, s.dir)
}

// Watch keeps the server up and no site holding its undo or its memory,
// checking every interval until ctx ends: a server that stopped (mariadbd
// crashed, or the kernel's OOM killer ended it) is started again
// (Revive); a site connection holding more memory than
// Config.SessionMemMB is ended (reapMemory); while the undo in use is
// above Config.UndoHighMB, or the locks above their bound, what holds them
// is ended (reapUndo); last, prepared XA transactions left without a
// connection are rolled back (rollbackPrepared). It logs what it does, one
// line per site and reason; observe (if not nil) hears of it.
func (s *Server) Watch(ctx context.Context, rt Runner, every time.Duration, log *slog.Logger, observe Observer) {
	t := time.NewTicker(every)
	defer t.Stop()
	down, undoFailing, memFailing, xaFailing, xaPiling := false, false, false, false, false
	var since time.Time // when the undo went above its mark; zero while under
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A server or containerd that hangs must not stop the watch.
		cctx, cancel := context.WithTimeout(ctx, reviveTimeout)
		revived, err := s.Revive(cctx, rt)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if revived && observe != nil {
			observe.Restarted(err)
		}
		switch {
		case err != nil && !down:
			log.Error("mariadb is down and does not start again; every site's database is unavailable", "err", err)
		case err == nil && revived:
			log.Warn("mariadb had stopped (see its log): it runs again")
		}
		if down = err != nil; down {
			continue
		}
		// Memory first: it runs out fastest.
		cctx, cancel = context.WithTimeout(ctx, checkTimeout)
		hogs, err := s.reapMemory(cctx)
		cancel()
		if err != nil && ctx.Err() == nil && !memFailing {
			log.Warn("checking the connections' memory failed", "err", err)
		}
		memFailing = err != nil
		ended := 0
		for _, r := range hogs {
			ended += r.Connections
			log.Warn("ended a site's connections: they held more of MariaDB's memory than a connection or a site may",
				"db_user", r.User, "connections", r.Connections, "memory_mb", r.MemoryBytes>>20, "session_mem_mb", s.cfg.SessionMemMB)
		}
		if observe != nil {
			observe.MemoryEnded(ended)
		}
		now := time.Now()
		overFor := int64(0)
		if !since.IsZero() {
			overFor = int64(now.Sub(since) / time.Second)
		}
		cctx, cancel = context.WithTimeout(ctx, checkTimeout)
		reaped, used, err := s.reapUndo(cctx, overFor)
		cancel()
		if err != nil && ctx.Err() == nil && !undoFailing {
			log.Warn("checking the shared undo log failed", "err", err)
		}
		undoFailing = err != nil
		switch {
		case err == nil && used <= s.cfg.UndoHighMB<<20:
			since = time.Time{}
		case err == nil && since.IsZero():
			since = now
		}
		ended = 0
		for _, r := range reaped {
			ended += r.Connections
			log.Warn("ended a site's transactions: they held the undo log or the lock memory every site shares",
				"db_user", r.User, "why", r.Why, "connections", r.Connections, "rows_modified", r.RowsModified,
				"oldest_seconds", r.OldestSeconds, "undo_mb", used>>20, "undo_high_mb", s.cfg.UndoHighMB)
		}
		if observe != nil && (err == nil || ended > 0) {
			observe.Undo(used, ended)
		}
		cctx, cancel = context.WithTimeout(ctx, xaTimeout)
		listed, rolledBack, err := s.rollbackPrepared(cctx)
		cancel()
		if err != nil && ctx.Err() == nil && !xaFailing {
			log.Warn("checking the prepared XA transactions failed", "err", err)
		}
		xaFailing = err != nil
		// One line while they pile up faster than they are rolled back,
		// not one a second.
		if piling := listed-rolledBack >= 1000; piling != xaPiling {
			xaPiling = piling
			if piling {
				log.Warn("prepared XA transactions pile up faster than the agent rolls them back: a site leaves them on purpose",
					"listed", listed, "rolled_back", rolledBack)
			}
		}
		if observe != nil && err == nil {
			observe.Prepared(listed, rolledBack)
		}
	}
}

// Bounds of each of Watch's checks: a restart waits for the server to
// answer (waitReady's minute).
const (
	checkTimeout  = 10 * time.Second
	reviveTimeout = 90 * time.Second
)
