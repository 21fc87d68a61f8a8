package fsm

import (
	"context"
	"log/slog"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// Local applies commands to a store in this process, through the same
// encoding and FSM as a Raft node but without a log or peers: the
// Applier the services' unit tests run on.
type Local struct {
	mu    sync.Mutex
	fsm   *FSM
	index uint64
}

var _ Applier = (*Local)(nil)

// NewLocal returns a Local writing to store.
func NewLocal(store *state.Store) *Local {
	return &Local{fsm: New(store, slog.New(slog.DiscardHandler))}
}

// Apply encodes c as a node would, applies it and returns its result or
// its refusal.
func (l *Local) Apply(ctx context.Context, c Command) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, err := Encode(c)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.index++
	res := l.fsm.Apply(&raft.Log{Type: raft.LogCommand, Index: l.index, Data: data})
	l.mu.Unlock()
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}
