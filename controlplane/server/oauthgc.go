package server

import (
	"context"
	"log/slog"
	"time"
)

// clientCollector removes unused OAuth clients.
type clientCollector interface {
	Collect(ctx context.Context) (int, error)
}

// collectOAuthClients removes the OAuth clients nobody uses every
// interval (zero: an hour) while this server leads, so anonymous
// registrations do not stay in the replicated state for ever. It returns
// when ctx ends (leadership lost, or the server closing).
func collectOAuthClients(ctx context.Context, c clientCollector, interval time.Duration, log *slog.Logger) {
	if interval <= 0 {
		interval = time.Hour
	}
	every(ctx, interval, func(ctx context.Context) {
		n, err := c.Collect(ctx)
		if err != nil {
			log.Warn("collecting unused OAuth clients failed", "component", "server", "err", err)
			return
		}
		if n > 0 {
			log.Info("removed unused OAuth clients", "component", "server", "count", n)
		}
	})
}
