package server

import (
	"context"
	"time"
)

// every calls tick every interval until ctx ends: the leader's periodic
// loops, which end when leadership is lost or the server closes.
func every(ctx context.Context, interval time.Duration, tick func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			tick(ctx)
		}
	}
}
