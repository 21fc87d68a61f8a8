// Package certstore serves the storage every edge shares for its TLS
// certificates (CertStorageService): certmagic's keys and values kept in
// the replicated state, sealed, with leases that let one edge at a time
// order a name, and the budgets every order is counted against first.
// Values never enter the Raft log in the clear.
package certstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/seal"
	edgev1 "github.com/sandboxd/sandboxd/protocol/edge/v1"
	"github.com/sandboxd/sandboxd/protocol/edge/v1/edgev1connect"
)

// Limits of what an edge may store.
const (
	// MaxKey bounds a key's length.
	MaxKey = 512
	// MaxValue bounds one value (a certificate chain is a few KiB).
	MaxValue = 256 << 10
	// MaxLease bounds a lock's lease; an edge renews a longer operation.
	MaxLease = 10 * time.Minute
)

// Config wires the service.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	// Sealer seals every value at rest.
	Sealer *seal.Sealer
	// Budget bounds the certificate orders edges may place (OrderCert).
	Budget state.CertBudget
	// Logger, or nil for none.
	Logger *slog.Logger
	Now    func() time.Time
}

// Service implements CertStorageService over the state store.
type Service struct {
	store   *state.Store
	raft    fsm.Applier
	sealer  *seal.Sealer
	budget  state.CertBudget
	log     *slog.Logger
	now     func() time.Time
	metrics *orderMetrics
}

var _ edgev1connect.CertStorageServiceHandler = (*Service)(nil)

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{store: cfg.Store, raft: cfg.Raft, sealer: cfg.Sealer, budget: cfg.Budget, now: cfg.Now,
		log: cfg.Logger.With("component", "certstore"), metrics: newOrderMetrics()}
}

// checkKey refuses keys that are empty, too long, or not the plain
// slash-separated names certmagic makes.
func checkKey(key string) error {
	if key == "" || len(key) > MaxKey || strings.HasPrefix(key, "/") || strings.Contains(key, "//") {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("certificate storage key %q is not usable", key))
	}
	for _, part := range strings.Split(key, "/") {
		if part == "." || part == ".." {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("certificate storage key %q is not usable", key))
		}
	}
	for _, r := range key {
		if r > unicode.MaxASCII || !unicode.IsPrint(r) {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("certificate storage key %q is not usable", key))
		}
	}
	return nil
}

func (s *Service) apply(ctx context.Context, c fsm.Command) error {
	if _, err := s.raft.Apply(ctx, c); err != nil {
		if errors.Is(err, state.ErrInvalid) {
			return connect.NewError(connect.CodeResourceExhausted, err)
		}
		return connect.NewError(connect.CodeUnavailable, err)
	}
	return nil
}

// GetCert reads and opens one value.
func (s *Service) GetCert(_ context.Context, req *connect.Request[edgev1.CertKeyRequest]) (*connect.Response[edgev1.CertValue], error) {
	if err := checkKey(req.Msg.Key); err != nil {
		return nil, err
	}
	d, err := s.store.CertData(req.Msg.Key)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if d == nil {
		return connect.NewResponse(&edgev1.CertValue{}), nil
	}
	plain, err := s.sealer.Open(d.Value, d.Key)
	if err != nil {
		return nil, connect.NewError(connect.CodeDataLoss, fmt.Errorf("certificate storage %s: %w", d.Key, err))
	}
	return connect.NewResponse(&edgev1.CertValue{Exists: true, Value: []byte(plain), ModifiedUnixMs: d.Modified.UnixMilli()}), nil
}

// PutCert seals and stores one value.
func (s *Service) PutCert(ctx context.Context, req *connect.Request[edgev1.PutCertRequest]) (*connect.Response[edgev1.CertEmpty], error) {
	m := req.Msg
	if err := checkKey(m.Key); err != nil {
		return nil, err
	}
	if len(m.Value) > MaxValue {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("certificate storage value of %d bytes is over %d", len(m.Value), MaxValue))
	}
	d := state.CertData{Key: m.Key, Value: s.sealer.Seal(string(m.Value), m.Key), Size: int64(len(m.Value)),
		Modified: s.now().UTC().Truncate(time.Millisecond)}
	if err := s.apply(ctx, fsm.PutCertData{Data: d}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&edgev1.CertEmpty{}), nil
}

// DeleteCert removes a key and everything under it.
func (s *Service) DeleteCert(ctx context.Context, req *connect.Request[edgev1.CertKeyRequest]) (*connect.Response[edgev1.CertEmpty], error) {
	if err := checkKey(req.Msg.Key); err != nil {
		return nil, err
	}
	if err := s.apply(ctx, fsm.DeleteCertData{Key: req.Msg.Key}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&edgev1.CertEmpty{}), nil
}

// ListCerts lists the keys under a prefix: all of them when recursive,
// else its direct children (files and "directories").
func (s *Service) ListCerts(_ context.Context, req *connect.Request[edgev1.ListCertsRequest]) (*connect.Response[edgev1.ListCertsResponse], error) {
	prefix := strings.TrimSuffix(req.Msg.Prefix, "/")
	if prefix != "" {
		if err := checkKey(prefix); err != nil {
			return nil, err
		}
		prefix += "/"
	}
	rows, err := s.store.CertDataPrefix(prefix)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	var keys []string
	for _, d := range rows {
		if req.Msg.Recursive {
			keys = append(keys, d.Key)
			continue
		}
		child, _, _ := strings.Cut(strings.TrimPrefix(d.Key, prefix), "/")
		if k := prefix + child; len(keys) == 0 || keys[len(keys)-1] != k {
			keys = append(keys, k)
		}
	}
	return connect.NewResponse(&edgev1.ListCertsResponse{Keys: slices.Compact(keys)}), nil
}

// StatCert describes a key: a value, or a prefix of others.
func (s *Service) StatCert(_ context.Context, req *connect.Request[edgev1.CertKeyRequest]) (*connect.Response[edgev1.CertInfo], error) {
	key := req.Msg.Key
	if err := checkKey(key); err != nil {
		return nil, err
	}
	d, err := s.store.CertData(key)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if d != nil {
		return connect.NewResponse(&edgev1.CertInfo{Exists: true, Key: key, ModifiedUnixMs: d.Modified.UnixMilli(), Size: d.Size, Terminal: true}), nil
	}
	under, err := s.store.CertDataPrefix(strings.TrimSuffix(key, "/") + "/")
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if len(under) == 0 {
		return connect.NewResponse(&edgev1.CertInfo{Key: key}), nil
	}
	return connect.NewResponse(&edgev1.CertInfo{Exists: true, Key: key}), nil
}

// LockCert takes or renews a lease.
func (s *Service) LockCert(ctx context.Context, req *connect.Request[edgev1.LockCertRequest]) (*connect.Response[edgev1.LockCertResponse], error) {
	m := req.Msg
	if err := checkKey(m.Name); err != nil {
		return nil, err
	}
	if m.Owner == "" || len(m.Owner) > 128 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a lock needs an owner of at most 128 bytes"))
	}
	lease := min(max(time.Duration(m.LeaseMs)*time.Millisecond, time.Second), MaxLease)
	now := s.now().UTC().Truncate(time.Millisecond)
	_, err := s.raft.Apply(ctx, fsm.LockCert{Lock: state.CertLock{Name: m.Name, Owner: m.Owner, Expires: now.Add(lease)}, At: now})
	switch {
	case errors.Is(err, state.ErrConflict):
		return connect.NewResponse(&edgev1.LockCertResponse{}), nil
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewResponse(&edgev1.LockCertResponse{Acquired: true}), nil
}

// UnlockCert releases a lease of its owner.
func (s *Service) UnlockCert(ctx context.Context, req *connect.Request[edgev1.UnlockCertRequest]) (*connect.Response[edgev1.CertEmpty], error) {
	if err := checkKey(req.Msg.Name); err != nil {
		return nil, err
	}
	if err := s.apply(ctx, fsm.UnlockCert{Name: req.Msg.Name, Owner: req.Msg.Owner}); err != nil {
		return nil, err
	}
	return connect.NewResponse(&edgev1.CertEmpty{}), nil
}
