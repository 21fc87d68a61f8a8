package edge

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/caddyserver/certmagic"

	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/rpclimit"
	edgev1 "github.com/sandboxd/sandboxd/protocol/edge/v1"
	"github.com/sandboxd/sandboxd/protocol/edge/v1/edgev1connect"
)

// CertStorage is certmagic's Storage kept by the control plane
// (CertStorageService), shared by every edge: a certificate one edge
// obtained is the one every edge serves, challenge answers are visible
// to all (so any edge answers the CA), and a lease keeps a second edge
// from ordering a name the first is ordering. Safe for concurrent use.
type CertStorage struct {
	client edgev1connect.CertStorageServiceClient
	// owner names this process's leases.
	owner string
	// Lease is how long a lock is held without renewal; PollInterval how
	// often a waiting Lock asks again.
	Lease        time.Duration
	PollInterval time.Duration
}

var (
	_ OrderGate                  = (*CertStorage)(nil)
	_ certmagic.Storage          = (*CertStorage)(nil)
	_ certmagic.TryLocker        = (*CertStorage)(nil)
	_ certmagic.LockLeaseRenewer = (*CertStorage)(nil)
)

// NewCertStorage returns the storage of the control plane at base URL,
// reached through hc (the edge's mutual-TLS client).
func NewCertStorage(hc *http.Client, controlPlane, edgeID string) *CertStorage {
	return &CertStorage{
		client: edgev1connect.NewCertStorageServiceClient(hc, controlPlane, rpclimit.CertClient()...),
		owner:  edgeID + "-" + ids.Random(6), Lease: 2 * time.Minute, PollInterval: 500 * time.Millisecond,
	}
}

// Store puts value at key.
func (c *CertStorage) Store(ctx context.Context, key string, value []byte) error {
	if _, err := c.client.PutCert(ctx, connect.NewRequest(&edgev1.PutCertRequest{Key: key, Value: value})); err != nil {
		return fmt.Errorf("certificate storage: store %s: %w", key, err)
	}
	return nil
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist.
func (c *CertStorage) Load(ctx context.Context, key string) ([]byte, error) {
	res, err := c.client.GetCert(ctx, connect.NewRequest(&edgev1.CertKeyRequest{Key: key}))
	if err != nil {
		return nil, fmt.Errorf("certificate storage: load %s: %w", key, err)
	}
	if !res.Msg.Exists {
		return nil, fmt.Errorf("certificate storage: %s: %w", key, fs.ErrNotExist)
	}
	return res.Msg.Value, nil
}

// Delete removes key and every key under it; a missing key is no error.
func (c *CertStorage) Delete(ctx context.Context, key string) error {
	if _, err := c.client.DeleteCert(ctx, connect.NewRequest(&edgev1.CertKeyRequest{Key: key})); err != nil {
		return fmt.Errorf("certificate storage: delete %s: %w", key, err)
	}
	return nil
}

// Exists reports whether key is a value or a prefix of values.
func (c *CertStorage) Exists(ctx context.Context, key string) bool {
	res, err := c.client.StatCert(ctx, connect.NewRequest(&edgev1.CertKeyRequest{Key: key}))
	return err == nil && res.Msg.Exists
}

// List returns the keys under path (all of them when recursive).
func (c *CertStorage) List(ctx context.Context, path string, recursive bool) ([]string, error) {
	res, err := c.client.ListCerts(ctx, connect.NewRequest(&edgev1.ListCertsRequest{Prefix: path, Recursive: recursive}))
	if err != nil {
		return nil, fmt.Errorf("certificate storage: list %s: %w", path, err)
	}
	if len(res.Msg.Keys) == 0 {
		return nil, fmt.Errorf("certificate storage: %s: %w", path, fs.ErrNotExist)
	}
	return res.Msg.Keys, nil
}

// Stat describes key.
func (c *CertStorage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	res, err := c.client.StatCert(ctx, connect.NewRequest(&edgev1.CertKeyRequest{Key: key}))
	if err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("certificate storage: stat %s: %w", key, err)
	}
	if !res.Msg.Exists {
		return certmagic.KeyInfo{}, fmt.Errorf("certificate storage: %s: %w", key, fs.ErrNotExist)
	}
	return certmagic.KeyInfo{Key: key, Modified: time.UnixMilli(res.Msg.ModifiedUnixMs), Size: res.Msg.Size,
		IsTerminal: res.Msg.Terminal}, nil
}

// TryLock takes the lease on name if nobody else holds it.
func (c *CertStorage) TryLock(ctx context.Context, name string) (bool, error) {
	return c.lock(ctx, name, c.Lease)
}

func (c *CertStorage) lock(ctx context.Context, name string, lease time.Duration) (bool, error) {
	res, err := c.client.LockCert(ctx, connect.NewRequest(&edgev1.LockCertRequest{Name: name, Owner: c.owner, LeaseMs: lease.Milliseconds()}))
	if err != nil {
		return false, fmt.Errorf("certificate storage: lock %s: %w", name, err)
	}
	return res.Msg.Acquired, nil
}

// Lock waits until it holds the lease on name, or ctx ends. A lease whose
// holder died runs out after Lease.
func (c *CertStorage) Lock(ctx context.Context, name string) error {
	for {
		ok, err := c.TryLock(ctx, name)
		if ok {
			return nil
		}
		var ce *connect.Error
		if err != nil && !(errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.PollInterval):
		}
	}
}

// RenewLockLease extends this process's lease on name.
func (c *CertStorage) RenewLockLease(ctx context.Context, name string, lease time.Duration) error {
	ok, err := c.lock(ctx, name, lease)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("certificate storage: the lease on %s is held by another edge", name)
	}
	return nil
}

// Unlock releases the lease on name.
func (c *CertStorage) Unlock(ctx context.Context, name string) error {
	if _, err := c.client.UnlockCert(ctx, connect.NewRequest(&edgev1.UnlockCertRequest{Name: name, Owner: c.owner})); err != nil {
		return fmt.Errorf("certificate storage: unlock %s: %w", name, err)
	}
	return nil
}

// OrderCert asks the control plane whether an order for name may be
// placed now: it counts the order against the budgets every edge shares.
// A refusal is an *OrderRefused.
func (c *CertStorage) OrderCert(ctx context.Context, name string, renewal bool) error {
	res, err := c.client.OrderCert(ctx, connect.NewRequest(&edgev1.OrderCertRequest{Name: name, Renewal: renewal}))
	if err != nil {
		return fmt.Errorf("certificate order budget: ask for %s: %w", name, err)
	}
	if res.Msg.Allowed {
		return nil
	}
	refused := &OrderRefused{Name: name, Budget: res.Msg.Budget, Reason: res.Msg.Reason}
	if ms := res.Msg.RetryAfterUnixMs; ms > 0 {
		refused.RetryAt = time.UnixMilli(ms)
	}
	return refused
}
