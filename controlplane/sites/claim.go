package sites

import (
	"context"
	"errors"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/pool"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// renameTimeout bounds the node's part of a claim; past it the create
// is made the ordinary way.
const renameTimeout = 10 * time.Second

// claim serves a create from a warm pool when one has a ready site of
// the same kind (the template, or fresh sites of the PHP version with the
// plan's disk): the node renames the pooled site to the new slug and URL
// (and, for a fresh one, its title and administrator), then one Raft
// entry gives it to the workspace with a finished create job. ok is
// false when the create must make a site the ordinary way.
func (s *Service) claim(ctx context.Context, ans *writes.Answer[sitespec.Made], site state.Site, p jobspec.CreatePayload, quota state.Quota, wantWP string,
	launch *state.DemoLaunch) (*state.Site, string, bool, error) {
	if s.cfg.Pools == nil {
		return nil, "", false, nil
	}
	key := pool.StockKey(site.PHPVersion, p.DiskMB)
	if site.TemplateID != "" {
		key = pool.TemplateKey(site.TemplateBuildID())
	}
	ps := s.cfg.Pools.Take(key)
	if ps != nil && wantWP != "" && !strings.HasPrefix(ps.WordPressVersion, wantWP) {
		s.cfg.Pools.Release(ps.ID)
		ps = nil
	}
	if ps == nil {
		s.cfg.Pools.Count(false)
		return nil, "", false, nil
	}
	defer s.cfg.Pools.Release(ps.ID)
	if live, err := s.cfg.Store.LiveSitesOf(site.UserID); err == nil && quota.Exceeded(live) {
		return nil, "", false, &state.QuotaError{Quota: quota} // before the pooled site is touched
	}
	agent, err := s.cfg.Nodes.Agent(ps.NodeID)
	if err != nil {
		s.cfg.Pools.Count(false)
		return nil, "", false, nil
	}
	rctx, cancel := context.WithTimeout(ctx, renameTimeout)
	defer cancel()
	if _, err := agent.RenameSite(rctx, connect.NewRequest(&agentv1.RenameSiteRequest{SiteId: ps.ID, Slug: site.Slug, Url: site.URL,
		Name: site.Name, AdminEmail: p.AdminEmail, SleepAfterSeconds: p.SleepAfterSeconds})); err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeNotFound || ctx.Err() == nil {
			s.cfg.Pools.Discard(context.WithoutCancel(ctx), ps)
		}
		s.cfg.Pools.Count(false)
		return nil, "", false, nil
	}
	now := s.now()
	claimed := site
	claimed.ID, claimed.NodeID, claimed.Status, claimed.Port, claimed.Address = ps.ID, ps.NodeID, state.SiteReady, ps.Port, ps.Address
	claimed.WordPressVersion, claimed.CreatedAt, claimed.UpdatedAt = ps.WordPressVersion, now, now
	job, err := jobs.New(jobspec.CreateSite, site.WorkspaceID, ps.ID, p, now)
	if err != nil {
		return nil, "", false, err
	}
	job.Status, job.Progress, job.StartedAt, job.FinishedAt = state.JobSucceeded, 100, &now, &now
	cmd := fsm.CreateSiteWithJob{Site: claimed, Job: job, Quota: quota, Claim: true, Launch: launchOf(launch, &claimed, job.ID)}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, cmd, sitespec.Made{Site: claimed, JobID: job.ID}); err != nil {
		// The pooled site stays in its pool (a later claim renames it
		// again); a conflict (it went meanwhile) makes the site anew, but
		// a launch refused by its visitor quota is refused.
		if errors.Is(err, state.ErrConflict) && !errors.Is(err, state.ErrLiveDemo) {
			s.cfg.Pools.Count(false)
			return nil, "", false, nil
		}
		return nil, "", false, err
	}
	s.cfg.Pools.Count(true)
	return &claimed, job.ID, true, nil
}
