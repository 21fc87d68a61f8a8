package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/sealing"
	"github.com/sandboxd/sandboxd/controlplane/sealingspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// sealingService is the server's side of its sealing keys: the check
// that they open the cluster's values, what it tells operators and
// peers, and the rotation it runs when it leads.
type sealingService struct {
	s       *Server
	keys    *sealing.Keyring
	rotator *sealing.Rotator
	log     *slog.Logger
	// checked is the last check of the cluster CA's key (nil: none yet).
	checked atomic.Pointer[sealingspec.Status]
	// interval is how often the check looks for a changed CA key.
	interval time.Duration
}

var _ api.Sealing = (*sealingService)(nil)

func newSealingService(s *Server, keys *sealing.Keyring) *sealingService {
	log := s.log.With("component", "sealing")
	return &sealingService{s: s, keys: keys, log: log, interval: 500 * time.Millisecond,
		rotator: &sealing.Rotator{Store: s.node.Store(), Raft: s.node, Keys: keys, Log: log}}
}

// Local is this server's keyring and whether it opens the CA key.
func (v *sealingService) Local() sealingspec.Status {
	st := v.keys.Check(v.s.node.Store())
	st.Server = v.s.cfg.NodeID
	return st
}

// Keyrings asks every server of the cluster for its keyring; a server
// that cannot be asked has Error set.
func (v *sealingService) Keyrings(ctx context.Context) []sealingspec.Status {
	servers, err := v.s.node.Store().Servers()
	if err != nil {
		return []sealingspec.Status{v.Local()}
	}
	slices.SortFunc(servers, func(a, b *state.Server) int { return strings.Compare(a.ID, b.ID) })
	out := make([]sealingspec.Status, 0, len(servers))
	for _, sv := range servers {
		if sv.ID == v.s.cfg.NodeID {
			out = append(out, v.Local())
			continue
		}
		st, err := v.ask(ctx, sv.ClusterAddr)
		if err == nil && st.Server != sv.ID {
			// A server without the keyring route passes the request on to
			// the leader, which answers for itself.
			err = fmt.Errorf("answered for %q (is it running this version?)", st.Server)
		}
		if err != nil {
			st = sealingspec.Status{KeyIDs: []string{}, Error: err.Error()}
		}
		st.Server = sv.ID
		out = append(out, st)
	}
	return out
}

func (v *sealingService) ask(ctx context.Context, clusterURL string) (sealingspec.Status, error) {
	if clusterURL == "" {
		return sealingspec.Status{}, fmt.Errorf("no cluster address recorded")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(clusterURL, "/")+api.KeyringPath, nil)
	if err != nil {
		return sealingspec.Status{}, err
	}
	resp, err := v.s.peers.Do(req)
	if err != nil {
		return sealingspec.Status{}, fmt.Errorf("did not answer: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return sealingspec.Status{}, fmt.Errorf("read its keyring: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return sealingspec.Status{}, fmt.Errorf("answered %d (is it running this version?)", resp.StatusCode)
	}
	var kr api.KeyringResponse
	if err := json.Unmarshal(body, &kr); err != nil {
		return sealingspec.Status{}, fmt.Errorf("decode its keyring: %w", err)
	}
	return kr.Keyring, nil
}

// Rotate runs the rotation once every server seals with this one's
// current key: otherwise a server that leads later would seal with
// another key again, or open nothing.
func (v *sealingService) Rotate(ctx context.Context, dryRun bool) (*sealingspec.Rotation, error) {
	if len(v.keys.IDs()) > 1 {
		if err := v.preflight(ctx); err != nil {
			return nil, err
		}
	}
	return v.rotator.Rotate(ctx, dryRun)
}

func (v *sealingService) preflight(ctx context.Context) error {
	current := v.keys.CurrentID()
	var problems []string
	for _, st := range v.Keyrings(ctx) {
		switch {
		case st.Error != "":
			problems = append(problems, fmt.Sprintf("%s could not be asked for its keys (%s): bring it back, or remove it "+
				"(`sandboxd admin remove-server`)", st.Server, st.Error))
		case len(st.KeyIDs) == 0 || st.KeyIDs[0] != current:
			has := "none"
			if len(st.KeyIDs) > 0 {
				has = st.KeyIDs[0]
			}
			problems = append(problems, fmt.Sprintf("%s seals with key %s, not %s: put %s first in its sealing key setting and restart it",
				st.Server, has, current, current))
		}
	}
	if len(problems) > 0 {
		return apierr.New(http.StatusConflict, apierr.CodeConflict, "every server must seal with the new key before a rotation: %s",
			strings.Join(problems, "; "))
	}
	return nil
}

// health is the check's word for /healthz: ok, mismatch, or unchecked
// (no CA in the state yet, or the log not applied yet).
func (v *sealingService) health() string {
	switch st := v.checked.Load(); {
	case st == nil || st.ClusterCA == sealingspec.CAAbsent:
		return "unchecked"
	case st.ClusterCA == sealingspec.CAUnreadable:
		return "mismatch"
	}
	return "ok"
}

// watch checks, whenever the cluster CA's sealed key changes (bootstrap,
// a rotation), that this server's keys open it, and says clearly when
// they do not. It starts once the log this server held at start is
// applied, so an entry from before a rotation is not taken for the
// cluster's present.
func (v *sealingService) watch(ctx context.Context) {
	target, _ := strconv.ParseUint(v.s.node.Stats()["last_log_index"], 10, 64)
	waitUntil := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(v.interval)
	defer tick.Stop()
	var last []byte
	for {
		if v.s.node.AppliedIndex() >= target || time.Now().After(waitUntil) {
			if ca, _ := v.s.node.Store().ClusterCA(); ca != nil && !bytes.Equal(ca.KeySealed, last) {
				last = ca.KeySealed
				st := v.Local()
				prev := v.checked.Swap(&st)
				switch {
				case st.ClusterCA == sealingspec.CAUnreadable:
					v.log.Error(st.Mismatch(), "key_ids", strings.Join(st.KeyIDs, ","), "cluster_ca_key_id", st.ClusterCAKeyID)
				case prev != nil && prev.ClusterCA == sealingspec.CAUnreadable:
					v.log.Info("this server's sealing keys open the cluster CA's key again", "key_ids", strings.Join(st.KeyIDs, ","))
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
