package sitejobs

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// restoreCheckpoint puts a site back as it was at a checkpoint on its
// node; the site is ready again once it answers.
func (r *Runners) restoreCheckpoint(ctx context.Context, j *state.Job, progress func(int)) error {
	s, err := r.site(j)
	if err != nil {
		return err
	}
	p, err := payloadOf[jobspec.CheckpointPayload](j)
	if err != nil {
		return err
	}
	agent, err := r.agentOf(s)
	if err != nil {
		return r.fail(ctx, s, state.SiteCreating, err)
	}
	progress(10)
	resp, err := agent.RestoreCheckpoint(ctx, connect.NewRequest(&agentv1.CheckpointRef{SiteId: s.ID, CheckpointId: p.CheckpointID, JobId: j.ID}))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeNotFound {
			err = &jobs.Failure{Code: "checkpoint_not_found", Message: "the checkpoint is no longer on the site's node: " + ce.Message()}
		} else {
			err = failure("restoring the checkpoint", err)
		}
		return r.fail(ctx, s, state.SiteCreating, err)
	}
	return r.ready(ctx, s, resp.Msg.Status, resp.Msg.WordpressVersion)
}

// fork makes the job's site, placed on its source's node, a copy of the
// source.
func (r *Runners) fork(ctx context.Context, j *state.Job, progress func(int)) error {
	s, err := r.site(j)
	if err != nil {
		return err
	}
	p, err := payloadOf[jobspec.ForkPayload](j)
	if err != nil {
		return err
	}
	agent, err := r.agentOf(s)
	if err != nil {
		return r.fail(ctx, s, state.SiteCreating, err)
	}
	progress(10)
	resp, err := agent.ForkSite(ctx, connect.NewRequest(&agentv1.ForkSiteRequest{SourceSiteId: p.SourceSiteID, Site: &agentv1.CreateSiteRequest{
		SiteId: s.ID, JobId: j.ID, Slug: s.Slug, Name: s.Name, PhpVersion: s.PHPVersion, Url: s.URL, AdminUser: "admin",
		AdminEmail: p.AdminEmail, DiskMb: int64(p.DiskMB), SleepAfterSeconds: p.SleepAfterSeconds}}))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.fail(ctx, s, state.SiteCreating, failure("forking the site", err))
	}
	return r.ready(ctx, s, resp.Msg.Status, resp.Msg.WordpressVersion)
}
