package sealing

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/sealingspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/seal"
)

// Batches of resealed values stay small Raft entries.
const (
	maxBatchValues = 100
	maxBatchBytes  = 256 << 10
)

// maxPasses bounds a rotation's walks of the state: each pass reseals
// what the one before found changed meanwhile.
const maxPasses = 5

// Rotator walks the state on the leader and seals every value again with
// the keyring's current key. The crypto is done here; the FSM only swaps
// ciphertexts (fsm.ResealValues), so it stays deterministic.
type Rotator struct {
	Store *state.Store
	Raft  fsm.Applier
	Keys  *Keyring
	Log   *slog.Logger

	mu sync.Mutex
}

// Rotate reseals every value of the state not sealed with the current
// key, in batches that each replace a value only if it is still what was
// read; it walks again until a walk finds nothing left (values written
// meanwhile), so a second run reseals nothing and a run that was cut
// short is finished by the next. dryRun counts without writing.
func (r *Rotator) Rotate(ctx context.Context, dryRun bool) (*sealingspec.Rotation, error) {
	if len(r.Keys.ids) < 2 {
		return nil, apierr.New(http.StatusConflict, apierr.CodeConflict,
			"nothing to rotate: this server has one sealing key (%s). Put a new key (`sandboxd admin sealing-key new`) first "+
				"and the current one after it in every server's sealing key setting, restart them one at a time, then rotate", r.Keys.ids[0])
	}
	if !r.mu.TryLock() {
		return nil, apierr.New(http.StatusConflict, apierr.CodeConflict, "a sealing key rotation is already running on this server")
	}
	defer r.mu.Unlock()
	out := &sealingspec.Rotation{KeyID: r.Keys.CurrentID(), Unreadable: []sealingspec.Unreadable{}, DryRun: dryRun}
	log := r.log()
	for pass := 1; ; pass++ {
		vals, err := r.Store.SealedValues()
		if err != nil {
			return nil, err
		}
		var todo []state.Reseal
		unreadable := map[sealingspec.Unreadable]int{}
		for _, v := range vals {
			k, ok := kinds[v.Kind]
			if !ok {
				return nil, fmt.Errorf("sealing: no purpose for sealed values of kind %s", v.Kind)
			}
			sealer := r.Keys.Sealer(k.purpose)
			if sealer.Current(v.Sealed) {
				if pass == 1 {
					out.AlreadyCurrent++
				}
				continue
			}
			again, err := sealer.Reseal(v.Sealed, k.aad(v.ID))
			if err != nil {
				unreadable[sealingspec.Unreadable{Kind: v.Kind, KeyID: seal.SealedWith(v.Sealed)}]++
				continue
			}
			todo = append(todo, state.Reseal{Kind: v.Kind, ID: v.ID, Old: v.Sealed, New: again})
		}
		out.Unreadable = out.Unreadable[:0]
		for u, n := range unreadable {
			u.Count = n
			out.Unreadable = append(out.Unreadable, u)
		}
		sort.Slice(out.Unreadable, func(i, j int) bool {
			a, b := out.Unreadable[i], out.Unreadable[j]
			return a.Kind < b.Kind || a.Kind == b.Kind && a.KeyID < b.KeyID
		})
		if dryRun {
			out.Resealed = len(todo)
			return out, nil
		}
		if len(todo) == 0 {
			break
		}
		if pass > maxPasses {
			return nil, apierr.Unavailable("%d sealed values kept changing while they were resealed; run the rotation again", len(todo))
		}
		n, err := r.apply(ctx, todo)
		out.Resealed += n
		if err != nil {
			log.Warn("sealing key rotation stopped; run it again to finish", "key_id", out.KeyID, "resealed", out.Resealed, "err", err)
			return nil, err
		}
	}
	attrs := []any{"key_id", out.KeyID, "resealed", out.Resealed, "already_current", out.AlreadyCurrent}
	if len(out.Unreadable) > 0 {
		var what []string
		for _, u := range out.Unreadable {
			what = append(what, fmt.Sprintf("%d %s sealed with %s", u.Count, u.Kind, sealingspec.OrUnversioned(u.KeyID)))
		}
		log.Warn("sealing key rotation left values no key of this server opens", append(attrs, "unreadable", strings.Join(what, "; "))...)
	} else {
		log.Info("sealing key rotated", attrs...)
	}
	return out, nil
}

// apply commits todo in batches; it returns how many values were
// replaced (the others changed meanwhile).
func (r *Rotator) apply(ctx context.Context, todo []state.Reseal) (int, error) {
	total := 0
	for len(todo) > 0 {
		n, size := 0, 0
		for n < len(todo) && n < maxBatchValues && (n == 0 || size+len(todo[n].Old)+len(todo[n].New) <= maxBatchBytes) {
			size += len(todo[n].Old) + len(todo[n].New)
			n++
		}
		res, err := r.Raft.Apply(ctx, fsm.ResealValues{Values: todo[:n]})
		if err != nil {
			return total, fmt.Errorf("reseal %d values: %w", n, err)
		}
		replaced, _ := res.(int)
		total += replaced
		todo = todo[n:]
	}
	return total, nil
}

func (r *Rotator) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// Check says whether the keyring opens the cluster CA's key in store.
func (r *Keyring) Check(store *state.Store) sealingspec.Status {
	st := sealingspec.Status{KeyIDs: r.IDs(), ClusterCA: sealingspec.CAAbsent}
	ca, err := store.ClusterCA()
	if err != nil || ca == nil {
		return st
	}
	st.ClusterCAKeyID = seal.SealedWith(ca.KeySealed)
	st.ClusterCA = sealingspec.CAOK
	if _, err := r.Sealer(PurposeClusterCA).Open(ca.KeySealed, ClusterCAAAD); err != nil {
		st.ClusterCA = sealingspec.CAUnreadable
	}
	return st
}
