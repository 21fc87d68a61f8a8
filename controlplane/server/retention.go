package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// pruneState applies a PruneState stamped with the time every interval
// while this server leads, so finished work, spent credentials and
// surplus history leave the replicated state (state.Retention says
// what goes when).
func pruneState(ctx context.Context, raft fsm.Applier, now func() time.Time, interval time.Duration, r state.Retention, log *slog.Logger) {
	if now == nil {
		now = time.Now
	}
	every(ctx, interval, func(ctx context.Context) {
		res, err := raft.Apply(ctx, fsm.PruneState{At: now().UTC(), Retention: r})
		if err != nil {
			log.Warn("pruning the state failed", "component", "server", "err", err)
			return
		}
		if p, _ := res.(state.Pruned); p.Total() > 0 {
			log.Info("pruned the state", "component", "server", "rows", p.Total(), "by_table", map[string]int(p))
		}
	})
}
