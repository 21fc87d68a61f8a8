package sites

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
	"github.com/sandboxd/sandboxd/scheduler"
)

// checkName checks a name given to a checkpoint or a fork.
func checkName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if len(name) > 100 || strings.ContainsAny(name, "\x00\r\n") {
		return "", apierr.Invalid("name", "name must be at most 100 characters on one line")
	}
	return name, nil
}

// planQuota is the quota on resource of the plan of a site's workspace.
func (s *Service) planQuota(workspaceID, resource string) (state.Quota, plans.Limits, error) {
	ws, err := s.cfg.Store.Workspace(workspaceID)
	if err != nil {
		return state.Quota{}, plans.Limits{}, err
	}
	if ws == nil {
		return state.Quota{}, plans.Limits{}, apierr.NotFound(apierr.CodeSiteNotFound, "site")
	}
	plan, err := s.cfg.Store.PlanOf(ws)
	if err != nil {
		return state.Quota{}, plans.Limits{}, err
	}
	q, err := s.cfg.Plans.Quota(plan, resource)
	return q, s.cfg.Plans.For(plan), err
}

// MakeCheckpoint checkpoints a ready site on its node (its files and
// database as they are now, while it serves) and records it within the
// plan's count per site, under a REST request's answer.
func (s *Service) MakeCheckpoint(ctx context.Context, ans *writes.Answer[state.Checkpoint], site *state.Site, name string) (*state.Checkpoint, error) {
	name, err := checkName(name)
	if err != nil {
		return nil, err
	}
	q, _, err := s.planQuota(site.WorkspaceID, plans.CheckpointsPerSite)
	if err != nil {
		return nil, err
	}
	have, err := s.cfg.Store.Checkpoints(site.ID)
	if err != nil {
		return nil, err
	}
	if q.Exceeded(len(have)) {
		return nil, plans.Error(q)
	}
	now := s.now()
	if name == "" {
		name = "Checkpoint of " + now.Format(time.DateTime) + " UTC"
	}
	id := ids.New(ids.Checkpoint)
	a, err := s.agent(site)
	if err != nil {
		return nil, err
	}
	resp, err := a.MakeCheckpoint(ctx, connect.NewRequest(&agentv1.CheckpointRef{SiteId: site.ID, CheckpointId: id}))
	if err != nil {
		return nil, checkpointError(q, err)
	}
	info := resp.Msg
	cp := state.Checkpoint{ID: id, SiteID: site.ID, WorkspaceID: site.WorkspaceID, NodeID: site.NodeID, Name: name,
		SizeBytes: info.SizeBytes, CreatedAt: now}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.AddCheckpoint{Checkpoint: cp, Quota: q}, cp); err != nil {
		// Not recorded (a twin filled the count, the site went): the
		// node's copy goes too.
		s.dropOnNode(site, id)
		if errors.Is(err, state.ErrNotFound) {
			return nil, apierr.NotFound(apierr.CodeSiteNotFound, "site")
		}
		return nil, err
	}
	return &cp, nil
}

// dropOnNode removes a checkpoint from a site's node, on its own time.
func (s *Service) dropOnNode(site *state.Site, id string) {
	a, err := s.cfg.Nodes.Agent(site.NodeID)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = a.DeleteCheckpoint(ctx, connect.NewRequest(&agentv1.CheckpointRef{SiteId: site.ID, CheckpointId: id}))
}

// Checkpoints lists a site's checkpoints, newest first, with what each
// holds of its own as its node measures it now (as last measured, when
// the node does not answer within a few seconds).
func (s *Service) Checkpoints(ctx context.Context, site *state.Site) ([]*state.Checkpoint, error) {
	list, err := s.cfg.Store.Checkpoints(site.ID)
	if err != nil || len(list) == 0 || site.Status != state.SiteReady || site.Move != nil {
		return list, err
	}
	// The node measures them at most every sizeEvery a site: a list is a
	// read, and must stay cheap however often it is asked.
	now := s.cfg.Now()
	if last, ok := s.sized.Load(site.ID); ok && now.Sub(last.(time.Time)) < sizeEvery {
		return list, nil
	}
	s.sized.Store(site.ID, now)
	a, err := s.cfg.Nodes.Agent(site.NodeID)
	if err != nil {
		return list, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := a.ListCheckpoints(cctx, connect.NewRequest(&agentv1.SiteRef{SiteId: site.ID}))
	if err != nil {
		return list, nil
	}
	sizes := map[string]int64{}
	for _, c := range resp.Msg.Checkpoints {
		sizes[c.CheckpointId] = c.SizeBytes
	}
	changed := false
	out := make([]*state.Checkpoint, len(list))
	for i, cp := range list {
		c := *cp
		if n, ok := sizes[c.ID]; ok && n != c.SizeBytes {
			c.SizeBytes, changed = n, true
		}
		out[i] = &c
	}
	if changed {
		// Recorded for the next list, on the way: a failure changes nothing.
		_, _ = s.cfg.Raft.Apply(ctx, fsm.SetCheckpointSizes{SiteID: site.ID, Sizes: sizes})
	}
	return out, nil
}

// sizeEvery is how often a list of a site's checkpoints asks its node
// what they hold.
const sizeEvery = 30 * time.Second

// checkpointOf is one of a site's checkpoints, or checkpoint_not_found.
func (s *Service) checkpointOf(site *state.Site, id string) (*state.Checkpoint, error) {
	cp, err := s.cfg.Store.Checkpoint(id)
	if err != nil {
		return nil, err
	}
	if cp == nil || cp.SiteID != site.ID {
		return nil, apierr.NotFound(apierr.CodeCheckpointNotFound, "checkpoint")
	}
	return cp, nil
}

// DeleteCheckpoint removes a site's checkpoint from its node, then from
// the record.
func (s *Service) DeleteCheckpoint(ctx context.Context, site *state.Site, id string) error {
	if _, err := s.checkpointOf(site, id); err != nil {
		return err
	}
	if site.Status != state.SiteDeleting {
		if _, err := call(ctx, s, site, agentv1connect.AgentServiceClient.DeleteCheckpoint,
			&agentv1.CheckpointRef{SiteId: site.ID, CheckpointId: id}); err != nil {
			return err
		}
	}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.DeleteCheckpoint{SiteID: site.ID, ID: id}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return apierr.NotFound(apierr.CodeCheckpointNotFound, "checkpoint")
		}
		return err
	}
	return nil
}

// RestoreCheckpoint queues putting a ready site back as it was at one of
// its checkpoints, keeping its id, URL and domain.
func (s *Service) RestoreCheckpoint(ctx context.Context, ans *writes.Answer[sitespec.Made], site *state.Site, id string) (*state.Site, string, error) {
	if _, err := s.checkpointOf(site, id); err != nil {
		return nil, "", err
	}
	// A site a restore left failed may be restored again.
	if (site.Status != state.SiteReady && site.Status != state.SiteFailed) || site.Move != nil || site.NodeID == "" {
		return nil, "", NotReady(site)
	}
	now := s.now()
	job, err := jobs.New(jobspec.RestoreCheckpoint, site.WorkspaceID, site.ID, jobspec.CheckpointPayload{CheckpointID: id}, now)
	if err != nil {
		return nil, "", err
	}
	next := *site
	next.Status, next.UpdatedAt = state.SiteCreating, now
	cmd := fsm.UpdateSiteWithJob{Update: state.SiteUpdate{ID: site.ID, Status: state.SiteCreating, At: now, IfStatus: site.Status}, Job: job}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, cmd, sitespec.Made{Site: next, JobID: job.ID}); err != nil {
		switch {
		case errors.Is(err, state.ErrNotFound):
			return nil, "", apierr.NotFound(apierr.CodeSiteNotFound, "site")
		case errors.Is(err, state.ErrConflict):
			return nil, "", NotReady(site)
		}
		return nil, "", err
	}
	return &next, job.ID, nil
}

// Fork queues a new site that is a copy of a ready site (its files and
// database, with its URL moved to the new site's), made on the source's
// node while the source serves on; the new site counts against the
// plan's sites.
func (s *Service) Fork(ctx context.Context, in sitespec.Fork) (*state.Site, string, error) {
	src := in.Source
	name, err := checkName(in.Name)
	if err != nil {
		return nil, "", err
	}
	if src.Status != state.SiteReady || src.Move != nil {
		return nil, "", NotReady(src)
	}
	quota, limits, err := s.planQuota(src.WorkspaceID, plans.Sites)
	if err != nil {
		return nil, "", err
	}
	now := s.now()
	var expires *time.Time
	if m := in.ExpiresInMinutes; m != nil {
		if *m < 1 || *m > 43200 {
			return nil, "", apierr.Invalid("expiresInMinutes", "expiresInMinutes must be between 1 and 43200")
		}
		t := now.Add(time.Duration(*m) * time.Minute)
		expires = &t
	} else if m := limits.SiteLifetimeMinutes; m > 0 {
		t := now.Add(time.Duration(m) * time.Minute)
		expires = &t
	}
	if name == "" {
		name = src.Name
		if len(name) <= 93 {
			name += " (fork)"
		}
	}
	if err := s.fitsOn(src.NodeID, src.PHPVersion); err != nil {
		return nil, "", err
	}
	ws, err := s.cfg.Store.Workspace(src.WorkspaceID)
	if err != nil || ws == nil {
		return nil, "", errors.Join(apierr.NotFound(apierr.CodeSiteNotFound, "site"), err)
	}
	slug := slugFor(name)
	site := state.Site{ID: ids.New(ids.Site), WorkspaceID: src.WorkspaceID, UserID: ws.OwnerID, CreatedByUserID: in.By.ID,
		Name: name, Slug: slug, Status: state.SiteCreating, URL: s.cfg.SiteURL(slug), PHPVersion: src.PHPVersion,
		WordPressVersion: src.WordPressVersion, TemplateID: src.TemplateID, TemplateBuild: src.TemplateBuild, Entry: src.Entry,
		NodeID: src.NodeID, ExpiresAt: expires, CreatedAt: now, UpdatedAt: now}
	email := in.By.Email
	if !strings.Contains(email, ".") {
		email = "admin@example.com"
	}
	job, err := jobs.New(jobspec.ForkSite, src.WorkspaceID, site.ID, jobspec.ForkPayload{SourceSiteID: src.ID, AdminEmail: email,
		DiskMB: limits.SiteDiskMB, SleepAfterSeconds: SleepAfterSeconds(limits)}, now)
	if err != nil {
		return nil, "", err
	}
	if _, err := commit.Apply(ctx, s.cfg.Raft, in.Answer, fsm.CreateSiteWithJob{Site: site, Job: job, Quota: quota},
		sitespec.Made{Site: site, JobID: job.ID}); err != nil {
		return nil, "", err
	}
	return &site, job.ID, nil
}

// fitsOn checks that one more site of php fits on node.
func (s *Service) fitsOn(nodeID, php string) error {
	candidates, err := s.cfg.Nodes.Candidates()
	if err != nil {
		return err
	}
	for _, c := range candidates {
		if c.ID != nodeID {
			continue
		}
		_, err := scheduler.Place([]scheduler.Node{c}, scheduler.Request{PHPVersion: php, Needs: scheduler.Resources{MemoryMB: siteMemoryMB}}, s.cfg.Strategy)
		if err != nil {
			return apierr.Unavailable("the site's node cannot take another site right now (%s); a fork is made on its source's node", err.Error())
		}
		return nil
	}
	return apierr.Unavailable("the site's node is not taking sites right now; a fork is made on its source's node")
}

// checkpointError is a refused checkpoint as the contract says it.
func checkpointError(q state.Quota, err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return agentError(err)
	}
	switch {
	case ce.Code() == connect.CodeResourceExhausted && ce.Meta().Get(agentv1.RefusalKey) == agentv1.RefusalCheckpointsFull:
		return apierr.New(http.StatusPaymentRequired, apierr.CodePlanLimitReached, "%s", ce.Message()).
			With("plan", q.Plan).With("limit", q.Limit).With("resource", plans.CheckpointsPerSite)
	case ce.Code() == connect.CodeAborted:
		return apierr.Conflict("%s", ce.Message())
	case ce.Code() == connect.CodeUnavailable && ce.Meta().Get(agentv1.RefusalKey) == agentv1.RefusalNodeUnable:
		return apierr.Unavailable("%s", ce.Message())
	}
	return agentError(err)
}
