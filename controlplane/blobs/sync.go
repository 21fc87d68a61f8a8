package blobs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// MaxBlob bounds one blob pushed to a peer in one request (Library ZIPs).
const MaxBlob = 512 << 20

// MaxFetch bounds one blob fetched from a peer: it streams to disk, so
// template artifacts of a large site fit.
const MaxFetch = 16 << 30

// Replica is what a Syncer needs of a blob store: whether it holds a
// blob, a way to store one streamed from a peer, and the collector's
// sweep. Store and S3Store are both one.
type Replica interface {
	Has(ctx context.Context, sha string) bool
	PutStream(ctx context.Context, r io.Reader, max int64) (string, int64, error)
	Sweep(ctx context.Context, keep func(sha string) bool, before time.Time) (int, error)
}

// Syncer copies the blobs the replicated state names onto this server
// from its peers, so a ZIP stays available when the server that took the
// upload is gone, and collects the blobs nothing names any more.
type Syncer struct {
	Store Replica
	// Shared is set when every server uses the same store (a bucket):
	// there is nothing to fetch from peers or push to them, only to
	// collect.
	Shared bool
	// Wanted lists the blobs every server should hold.
	Wanted func() ([]string, error)
	// Peers lists the other servers' API base URLs.
	Peers    func() []string
	Client   *http.Client
	Interval time.Duration
	Log      *slog.Logger
}

// Run syncs until ctx ends; with a shared store it has nothing to do.
func (y *Syncer) Run(ctx context.Context) {
	if y.Shared {
		return
	}
	t := time.NewTicker(y.Interval)
	defer t.Stop()
	for {
		y.Once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once fetches every wanted blob this server lacks; it returns how many
// are still missing (none with a shared store, which it never asks).
func (y *Syncer) Once(ctx context.Context) int {
	if y.Shared {
		return 0
	}
	wanted, err := y.Wanted()
	if err != nil {
		return 0
	}
	missing := 0
	for _, sha := range wanted {
		if y.Store.Has(ctx, sha) {
			continue
		}
		if err := y.fetch(ctx, sha); err != nil {
			missing++
			y.Log.Debug("blob not replicated yet", "sha256", sha, "err", err)
		}
	}
	return missing
}

func (y *Syncer) fetch(ctx context.Context, sha string) error {
	var last error = fmt.Errorf("no peer holds %s", sha)
	for _, peer := range y.Peers() {
		got, err := y.get(ctx, peer+"/internal/blobs/"+sha)
		if err != nil {
			last = err
			continue
		}
		if got != sha {
			// Stored under its own name, it is nothing anyone wants: the
			// collector takes it.
			last = fmt.Errorf("%s sent a blob that does not match %s", peer, sha)
			continue
		}
		return nil
	}
	return last
}

// get streams a peer's blob into the store and returns the hash of what
// it stored.
func (y *Syncer) get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := y.Client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	sha, _, err := y.Store.PutStream(ctx, resp.Body, MaxFetch)
	return sha, err
}

// Collect deletes, every interval, the blobs on this server (or in the
// shared bucket) that nothing wants any more and that are older than
// grace: a ZIP a crashed deploy left behind, the copy a peer pushed for
// an upload that was then refused, a deleted Library entry's ZIP. It is
// a leader hook: only a leader's replica is known to hold every committed
// record (it ran a Barrier), so only then is "not wanted" true; a
// follower catching up after a restart would see wanted blobs as
// orphans. It runs until ctx ends.
func (y *Syncer) Collect(ctx context.Context, interval, grace time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := y.CollectOnce(ctx, grace)
		if err != nil {
			y.Log.Warn("blob collection", "err", err)
		}
		if n > 0 {
			y.Log.Info("collected unused blobs", "count", n)
		}
	}
}

// CollectOnce is one round of Collect (tests run it at once); it returns
// how many blobs went.
func (y *Syncer) CollectOnce(ctx context.Context, grace time.Duration) (int, error) {
	wanted, err := y.Wanted()
	if err != nil {
		return 0, fmt.Errorf("blobs: collect: %w", err) // never delete on a partial view
	}
	keep := make(map[string]bool, len(wanted))
	for _, sha := range wanted {
		keep[sha] = true
	}
	return y.Store.Sweep(ctx, func(sha string) bool { return keep[sha] }, time.Now().Add(-grace))
}

// Push copies a blob to the peers before the caller commits a record that
// names it, so the blob outlives this server. It succeeds once one peer
// holds it (with this server, two copies: a majority of three), or at
// once when there are no peers or the store is shared (it holds the blob
// for every server already).
func (y *Syncer) Push(ctx context.Context, sha string, data []byte) error {
	if y.Shared {
		return nil
	}
	peers := y.Peers()
	if len(peers) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	errs := make(chan error, len(peers))
	for _, peer := range peers {
		go func() { errs <- y.put(ctx, peer+"/internal/blobs/"+sha, data) }()
	}
	var last error
	for range peers {
		err := <-errs
		if err == nil {
			return nil
		}
		last = err
	}
	return fmt.Errorf("no peer took the blob: %w", last)
}

func (y *Syncer) put(ctx context.Context, url string, data []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := y.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
