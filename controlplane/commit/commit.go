// Package commit applies a service's change under a REST write's answer
// (package writes): one Raft entry holds the change and, under an
// Idempotency-Key, the answer a retry gets.
package commit

import (
	"context"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
)

// Apply applies c, the change that made made, under ans (nil: a change
// nobody answers for, applied as it is). A concurrent twin that used the
// key first is a *writes.Replayed error.
func Apply[M any](ctx context.Context, raft fsm.Applier, ans *writes.Answer[M], c fsm.Command, made M) (any, error) {
	if ans == nil {
		return raft.Apply(ctx, c)
	}
	rec, err := ans.Record(made)
	if err != nil {
		return nil, err
	}
	cmd := c
	if rec != nil {
		cmd = fsm.Idempotent{Command: c, Record: *rec}
	}
	res, err := raft.Apply(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if prior, ok := res.(*state.Idempotency); ok {
		return nil, &writes.Replayed{Record: prior}
	}
	ans.Applied()
	return res, nil
}
