package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
)

// pruneIdempotency forgets expired Idempotency-Key records every interval
// while this server leads, so the replicated state holds a day of keys,
// not all of them.
func pruneIdempotency(ctx context.Context, raft fsm.Applier, now func() time.Time, interval time.Duration, log *slog.Logger) {
	if now == nil {
		now = time.Now
	}
	every(ctx, interval, func(ctx context.Context) {
		res, err := raft.Apply(ctx, fsm.PruneIdempotency{At: now().UTC()})
		if err != nil {
			log.Warn("pruning idempotency keys failed", "component", "server", "err", err)
			return
		}
		if n, _ := res.(int); n > 0 {
			log.Info("pruned idempotency keys", "component", "server", "count", n)
		}
	})
}
