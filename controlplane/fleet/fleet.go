// Package fleet is what operators change in the fleet through the API: a
// node's drain, a site's snapshot now, a dead server out of the Raft
// cluster. Every change is one Raft entry (or a membership change).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Config wires the service.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	// Leave removes a server from the Raft configuration (leader only;
	// nil: this server cannot).
	Leave func(ctx context.Context, id string) error
	Now   func() time.Time
}

// Service changes the fleet.
type Service struct{ cfg Config }

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// Drain starts (on) or stops a node's drain: a draining node takes no
// new sites, and its sites move one at a time.
func (s *Service) Drain(ctx context.Context, nodeID string, on bool) error {
	_, err := s.cfg.Raft.Apply(ctx, fsm.SetNodeDrain{ID: nodeID, Drain: on, At: s.now()})
	if errors.Is(err, state.ErrNotFound) {
		return apierr.NotFound(apierr.CodeNotFound, "node")
	}
	return err
}

// Snapshot queues a snapshot of a running site now (files and database
// to the blob store).
func (s *Service) Snapshot(ctx context.Context, ans *writes.Answer[sitespec.Made], siteID string) (string, error) {
	site, err := s.cfg.Store.Site(siteID)
	if err != nil {
		return "", err
	}
	if site == nil || site.Pool != "" {
		return "", apierr.NotFound(apierr.CodeSiteNotFound, "site")
	}
	if site.Status != state.SiteReady {
		return "", apierr.Invalid("", "the site is %s; only a running site is snapshotted", site.Status).With("status", site.Status)
	}
	j, err := jobs.New(jobspec.SnapshotSite, site.WorkspaceID, site.ID, jobspec.SnapshotPayload{Reason: "operator"}, s.now())
	if err != nil {
		return "", err
	}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.CreateJob{Job: j}, sitespec.Made{Site: *site, JobID: j.ID}); err != nil {
		return "", err
	}
	return j.ID, nil
}

// RemoveServer takes a server (a dead one, say) out of the Raft cluster.
func (s *Service) RemoveServer(ctx context.Context, id string) error {
	if sv, err := s.cfg.Store.Server(id); err != nil {
		return err
	} else if sv == nil {
		return apierr.NotFound(apierr.CodeNotFound, "server")
	}
	if s.cfg.Leave == nil {
		return apierr.Unavailable("this server cannot remove members")
	}
	if err := s.cfg.Leave(ctx, id); err != nil {
		if errors.Is(err, writes.ErrNotLeader) || errors.Is(err, writes.ErrOutcomeUnknown) {
			return apierr.Unavailable("leadership changed; retry")
		}
		return fmt.Errorf("remove server %s: %w", id, err)
	}
	return nil
}
