package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/writes"
)

// freeKey is the request's Idempotency-Key once idempotent found it free.
type freeKey struct{}

func keyFrom(ctx context.Context) writes.Key {
	k, _ := ctx.Value(freeKey{}).(writes.Key)
	return k
}

// answer is the answer of a write request, for the service that makes
// its change: status, and render for what the service made. Under a free
// Idempotency-Key the service's Raft entry carries it, so a retry finds
// the change and its answer or neither.
func answer[M any](a *base, req *http.Request, status int, render func(M) any) *writes.Answer[M] {
	return &writes.Answer[M]{Key: keyFrom(req.Context()), Status: status, Render: render, Seal: a.sealer.Seal, Now: a.now}
}

// respond writes what a service's change under ans came to: its answer,
// the answer of a concurrent twin that used the key first, or the error.
func respond[M any](a *base, w http.ResponseWriter, req *http.Request, ans *writes.Answer[M], err error) error {
	var twin *writes.Replayed
	switch {
	case errors.As(err, &twin):
		return a.replay(w, twin.Record)
	case err != nil:
		return writeError(req.Header.Get(IdempotencyHeader), err)
	}
	body := ans.Body()
	if body == nil {
		return errors.New("the change answered without applying its command")
	}
	return rest.RawJSON(w, ans.Status, body)
}
