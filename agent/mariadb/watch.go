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
	Restarted(err error)
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

// Watch keeps the server up and no site holding its undo, checking every
// interval until ctx ends: a server that stopped (mariadbd crashed, or
// the kernel's OOM killer ended it) is started again (Revive); while the
// undo in use is above Config.UndoHighMB, what holds it is ended (see
// reapUndo). It logs what it does; observe (if not nil) hears of each
// check of the undo that worked and of each restart.
func (s *Server) Watch(ctx context.Context, rt Runner, every time.Duration, log *slog.Logger, observe Observer) {
	t := time.NewTicker(every)
	defer t.Stop()
	down, failing := false, false
	var since time.Time // when the undo went above its mark; zero while under
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		revived, err := s.Revive(ctx, rt)
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
		now := time.Now().UTC()
		if since.IsZero() {
			since = now
		}
		reaped, used, err := s.reapUndo(ctx, now, since)
		if err != nil && ctx.Err() == nil && !failing {
			log.Warn("checking the shared undo log failed", "err", err)
		}
		failing = err != nil
		if err == nil && used <= s.cfg.UndoHighMB<<20 {
			since = time.Time{}
		}
		if err == nil && observe != nil {
			observe.Undo(used, len(reaped))
		}
		for _, r := range reaped {
			log.Warn("ended a site's transaction: the undo log every site shares is almost full",
				"db_user", r.User, "connection", r.Connection, "rows_modified", r.RowsModified,
				"started", r.Started, "why", r.Why, "undo_mb", used>>20, "undo_high_mb", s.cfg.UndoHighMB)
		}
	}
}
