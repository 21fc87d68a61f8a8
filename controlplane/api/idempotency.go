package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// IdempotencyHeader carries the client's key that makes a create safe to
// retry: the same key and body within 24 hours get the first answer
// again, however many times and on whichever server.
const IdempotencyHeader = "Idempotency-Key"

// ReplayedHeader marks an answer replayed for a repeated Idempotency-Key.
const ReplayedHeader = "Idempotent-Replayed"

// maxIdempotencyKey bounds a key's length (the addendum's 255 characters).
const maxIdempotencyKey = 255

// idempotent runs a create handler under the request's Idempotency-Key,
// if it has one: a key already answered replays that answer (or refuses a
// different request with 409 idempotency_key_reused); a free key goes
// with the request to the service that makes the change (answer). scope is whose keys these are (an account,
// or the operator) and workspace the workspace the request acts in.
func (a *base) idempotent(w http.ResponseWriter, req *http.Request, scope, workspace string, next rest.HandlerFunc) error {
	key := req.Header.Get(IdempotencyHeader)
	if key == "" {
		return next(w, req)
	}
	if err := validIdempotencyKey(key); err != nil {
		return err
	}
	body, err := rest.ReadBody(req)
	if err != nil {
		return err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n%d\n", req.Method, req.URL.Path, req.URL.RawQuery, workspace, len(body))
	h.Write(body)
	fp := hex.EncodeToString(h.Sum(nil))
	prior, err := a.store.Idempotency(scope, key, a.now())
	if err != nil {
		return err
	}
	if prior != nil {
		if prior.Fingerprint != fp {
			return keyReused(key)
		}
		return a.replay(w, prior)
	}
	ctx := context.WithValue(req.Context(), freeKey{}, writes.Key{Scope: scope, Key: key, Fingerprint: fp})
	return next(w, req.WithContext(ctx))
}

func validIdempotencyKey(key string) error {
	if len(key) > maxIdempotencyKey {
		return apierr.Invalid(IdempotencyHeader, "%s is longer than %d characters", IdempotencyHeader, maxIdempotencyKey)
	}
	for _, r := range key {
		if r < 0x20 || r > 0x7e {
			return apierr.Invalid(IdempotencyHeader, "%s must be printable ASCII", IdempotencyHeader)
		}
	}
	return nil
}

func keyReused(key string) *apierr.Error {
	return apierr.New(http.StatusConflict, apierr.CodeIdempotencyKeyReused,
		"the %s %q was first used for another request (method, path, workspace or body differ); use a new key", IdempotencyHeader, key)
}

// replay writes a key's first answer again.
func (a *base) replay(w http.ResponseWriter, rec *state.Idempotency) error {
	body, err := a.sealer.Open(rec.Body, state.IdempotencyID(rec.Scope, rec.Key))
	if err != nil {
		return fmt.Errorf("open the stored answer of an idempotency key: %w", err)
	}
	w.Header().Set(ReplayedHeader, "true")
	return rest.RawJSON(w, rec.Status, []byte(body))
}
