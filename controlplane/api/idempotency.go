package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
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

// claim is what a write request carries to the applier (Claims): which
// command type makes its answer, how to render that answer from the
// command, and, with a free Idempotency-Key, the key's record. The first
// command of that type applied under the claim carries the record in the
// same Raft entry, so a retry finds both the change and its answer or
// neither; the rendered answer is what the request then writes, so a
// replay is byte for byte the first answer.
type claim struct {
	scope, key, fingerprint string // key empty: no Idempotency-Key
	sealer                  interface {
		Seal(plain, context string) []byte
	}
	now func() time.Time

	mu      sync.Mutex
	render  func(fsm.Command) (any, bool) // the answer, when c is the request's command
	status  int
	answer  []byte // set once the command is applied
	applied bool
}

type claimKey struct{}

func claimFrom(ctx context.Context) *claim {
	c, _ := ctx.Value(claimKey{}).(*claim)
	return c
}

// replayedError reports that a concurrent twin with the same key was
// applied first: its answer is the one to give.
type replayedError struct{ rec *state.Idempotency }

func (e *replayedError) Error() string {
	return "an earlier request with the same Idempotency-Key was applied"
}

// claimsApplier is the Applier every writer of this server goes through
// (Claims).
type claimsApplier struct{ next fsm.Applier }

// Claims wraps the Raft applier so that a write the REST API started
// (through a service or not) answers with the command it applied, under
// its Idempotency-Key when it has one. Services take the wrapped applier
// and need know nothing of keys or answers.
func Claims(next fsm.Applier) fsm.Applier {
	if _, ok := next.(claimsApplier); ok {
		return next
	}
	return claimsApplier{next: next}
}

// Apply applies c; when c is the command a request's claim waits for, it
// renders the answer first and, under a free key, wraps c with the key's
// record.
func (ca claimsApplier) Apply(ctx context.Context, c fsm.Command) (any, error) {
	cl := claimFrom(ctx)
	if cl == nil {
		return ca.next.Apply(ctx, c)
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.applied || cl.render == nil {
		return ca.next.Apply(ctx, c)
	}
	view, ok := cl.render(c)
	if !ok {
		return ca.next.Apply(ctx, c)
	}
	data, err := json.Marshal(view)
	if err != nil {
		return nil, fmt.Errorf("encode answer: %w", err)
	}
	data = append(data, '\n')
	cmd := c
	if cl.key != "" {
		id := state.IdempotencyID(cl.scope, cl.key)
		cmd = fsm.Idempotent{Command: c, Record: state.Idempotency{Scope: cl.scope, Key: cl.key,
			Fingerprint: cl.fingerprint, Status: cl.status, Body: cl.sealer.Seal(string(data), id), CreatedAt: cl.now()}}
	}
	res, err := ca.next.Apply(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if prior, ok := res.(*state.Idempotency); ok {
		return nil, &replayedError{rec: prior}
	}
	cl.answer, cl.applied = data, true
	return res, nil
}

// idempotent runs a create handler under the request's Idempotency-Key,
// if it has one: a key already answered replays that answer (or refuses a
// different request with 409 idempotency_key_reused); a free key goes
// with the request to commit. scope is whose keys these are (an account,
// or the operator) and workspace the workspace the request acts in.
func (a *API) idempotent(w http.ResponseWriter, req *http.Request, scope, workspace string, next rest.HandlerFunc) error {
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
	ctx := context.WithValue(req.Context(), claimKey{}, a.newClaim(scope, key, fp))
	ctx = context.WithValue(ctx, freeKey{}, writes.Key{Scope: scope, Key: key, Fingerprint: fp})
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
func (a *API) replay(w http.ResponseWriter, rec *state.Idempotency) error {
	body, err := a.cfg.ReplaySealer.Open(rec.Body, state.IdempotencyID(rec.Scope, rec.Key))
	if err != nil {
		return fmt.Errorf("open the stored answer of an idempotency key: %w", err)
	}
	w.Header().Set(ReplayedHeader, "true")
	return rest.RawJSON(w, rec.Status, []byte(body))
}

func (a *API) newClaim(scope, key, fingerprint string) *claim {
	return &claim{scope: scope, key: key, fingerprint: fingerprint, sealer: a.cfg.ReplaySealer, now: a.now}
}

// changed runs call, which applies (itself or through a service) one
// command of type C, and answers status with view of that command. Under
// a free Idempotency-Key the answer travels in the same Raft entry as the
// change, so a retry finds either both or neither; a concurrent twin that
// got there first has its answer replayed instead. applied says whether
// this request's change was applied (false for a replayed twin or an
// error), for side effects that must happen once, such as an email.
func changed[C fsm.Command](a *API, w http.ResponseWriter, req *http.Request, status int, view func(C) any,
	call func(ctx context.Context) error) (applied bool, err error) {
	ctx := req.Context()
	cl := claimFrom(ctx)
	if cl == nil {
		cl = a.newClaim("", "", "")
		ctx = context.WithValue(ctx, claimKey{}, cl)
	}
	cl.mu.Lock()
	if cl.render != nil {
		cl.mu.Unlock()
		return false, errors.New("a request runs one change under its claim")
	}
	cl.status = status
	cl.render = func(c fsm.Command) (any, bool) {
		t, ok := c.(C)
		if !ok {
			return nil, false
		}
		return view(t), true
	}
	cl.mu.Unlock()
	if err := call(ctx); err != nil {
		var twin *replayedError
		if errors.As(err, &twin) {
			return false, a.replay(w, twin.rec)
		}
		return false, err
	}
	cl.mu.Lock()
	answer, ok := cl.answer, cl.applied
	cl.mu.Unlock()
	if !ok {
		return false, fmt.Errorf("the change answered without applying a %T", *new(C))
	}
	return true, rest.RawJSON(w, status, answer)
}

// commit applies c and answers status with body, through changed.
func (a *API) commit(w http.ResponseWriter, req *http.Request, c fsm.Command, notFound *apierr.Error, status int, body any) error {
	_, err := a.commitOnce(w, req, c, notFound, status, body)
	return err
}

// commitOnce is commit that also says whether this request's change was
// applied.
func (a *API) commitOnce(w http.ResponseWriter, req *http.Request, c fsm.Command, notFound *apierr.Error, status int, body any) (bool, error) {
	return changed(a, w, req, status, func(fsm.Command) any { return body }, func(ctx context.Context) error {
		_, err := a.apply(ctx, c, notFound)
		return err
	})
}
