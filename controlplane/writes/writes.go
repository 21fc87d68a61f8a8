// Package writes carries a REST write's answer to the service that makes
// the change, as an explicit argument: the Raft entry that applies the
// change records, under the request's Idempotency-Key, the answer a retry
// gets, so a retry finds both or neither. It holds no Raft command, so
// the API that fills an Answer never builds one (package commit applies).
package writes

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// Key is a request's Idempotency-Key as the API found it free: whose
// keys (Scope), the key, and what makes a retry the same request.
type Key struct {
	Scope, Key, Fingerprint string
}

// Answer is what a write request answers, rendered from M, what the
// service made (the site and its job, say), before the change is
// applied. A service applies its change once under an Answer.
type Answer[M any] struct {
	// Key is the request's free Idempotency-Key; zero without one.
	Key Key
	// Status is the answer's HTTP status.
	Status int
	// Render is the answer's body for what the service made.
	Render func(M) any
	// Seal seals a stored answer (it can carry a new token's secret).
	Seal func(plain, id string) []byte
	// Now stamps the stored answer.
	Now func() time.Time

	mu      sync.Mutex
	body    []byte
	applied bool
}

// Record renders the answer for made and, under a key, the record that
// goes in the same Raft entry as the change (nil without a key). A
// second change under the same Answer is refused.
func (a *Answer[M]) Record(made M) (*state.Idempotency, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.applied {
		return nil, fmt.Errorf("writes: a request makes one change under its answer")
	}
	data, err := json.Marshal(a.Render(made))
	if err != nil {
		return nil, fmt.Errorf("encode answer: %w", err)
	}
	a.body = append(data, '\n')
	if a.Key.Key == "" {
		return nil, nil
	}
	id := state.IdempotencyID(a.Key.Scope, a.Key.Key)
	return &state.Idempotency{Scope: a.Key.Scope, Key: a.Key.Key, Fingerprint: a.Key.Fingerprint, Status: a.Status,
		Body: a.Seal(string(a.body), id), CreatedAt: a.Now()}, nil
}

// Applied marks the change applied: Body is the answer to write.
func (a *Answer[M]) Applied() {
	a.mu.Lock()
	a.applied = true
	a.mu.Unlock()
}

// Body is the answer once the change is applied, else nil.
func (a *Answer[M]) Body() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.applied {
		return nil
	}
	return a.body
}

// Errors of a write through Raft that callers answer without knowing of
// Raft: ErrNotLeader means nothing was written (retry on the leader);
// ErrOutcomeUnknown that the write went out and its fate is unknown.
var (
	ErrNotLeader      = errors.New("not the raft leader")
	ErrOutcomeUnknown = errors.New("leadership lost while applying; outcome unknown")
)

// Replayed is the error of a write whose key a concurrent twin with the
// same request used first: Record's answer is the one to give.
type Replayed struct{ Record *state.Idempotency }

func (e *Replayed) Error() string {
	return "an earlier request with the same Idempotency-Key was applied"
}
