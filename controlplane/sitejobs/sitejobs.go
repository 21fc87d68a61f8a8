// Package sitejobs carries out site jobs on the leader: it calls the agent
// that holds the site and records the outcome through Raft. Every step is
// idempotent by site id, so a job re-dispatched after a leader change
// converges.
package sitejobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/state"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// Agents gives a client for the agent on a node.
type Agents interface {
	Agent(nodeID string) (agentv1connect.AgentServiceClient, error)
}

// Runners carries out site jobs.
type Runners struct {
	Store  *state.Store
	Raft   fsm.Applier
	Agents Agents
	// Blobs holds the ZIPs deploy_plugin jobs install.
	Blobs Blobs
	// Fetch downloads the zipUrl of a deploy_plugin job; nil fails such
	// jobs.
	Fetch Fetcher
	// Artifacts keeps template artifacts; Held says which templates a
	// node holds (so a site is made from a template it lacks only after
	// the artifact is copied there).
	Artifacts Artifacts
	Held      HeldTemplates
	// Blueprints carries out Blueprint runs; nil fails jobs that need it.
	Blueprints BlueprintRunner
	// Imports tracks restores; nil fails import_restore jobs.
	Imports Imports
	// GitSecrets opens a repository's token and deploy key; nil fails
	// git_deploy jobs.
	GitSecrets func(*state.Repository) (token string, key []byte, err error)
	// PinHost resolves a repository's host and checks its addresses with
	// the address guard; nil fails git_deploy jobs.
	PinHost func(ctx context.Context, host string) (netip.Addr, error)
	// SnapshotsKept is how many snapshots of a site are kept; zero means
	// DefaultSnapshotsKept.
	SnapshotsKept int
	// DiskMB is the disk a site's plan gives it (a moved site gets the
	// same); nil leaves it to the node.
	DiskMB func(*state.Site) int
	// SleepAfterSeconds is the idle time a site's plan gives it, as
	// CreateSiteRequest carries it; nil leaves it to the node.
	SleepAfterSeconds func(*state.Site) int64
	Now               func() time.Time

	snapMu   sync.Mutex
	snapJobs map[string]string // site → its scheduled snapshot's job
	// failedMoves holds when a site's last move failed: it is tried again
	// a minute later, not at every tick.
	failedMoves map[string]time.Time
	// failedSnaps holds when a site's last scheduled snapshot failed.
	failedSnaps map[string]time.Time
}

// Register adds the site job runners to a dispatcher.
func (r *Runners) Register(d *jobs.Dispatcher) {
	for typ, run := range map[string]jobs.RunnerFunc{
		jobspec.CreateSite: r.create, jobspec.DeleteSite: r.delete, jobspec.ResetSite: r.reset,
		jobspec.UpdatePHPConfig: r.phpConfig, jobspec.SwitchPHPVersion: r.switchPHP, jobspec.DeployPlugin: r.deploy,
		jobspec.SnapshotTemplate: r.snapshot, jobspec.RestoreSite: r.restore, jobspec.ApplyBlueprint: r.apply,
		jobspec.BakeBlueprint: r.bake, jobspec.ImportRestore: r.importRestore, jobspec.SetSiteDomain: r.setDomain,
		jobspec.SnapshotSite: r.snapshotSite, jobspec.MoveSite: r.moveSite, jobspec.GitDeploy: r.gitDeploy,
		jobspec.RestoreCheckpoint: r.restoreCheckpoint, jobspec.ForkSite: r.fork,
	} {
		d.Register(typ, r.withPlanDetails(run))
	}
}

// withPlanDetails gives a job that failed plan_limit_reached (the
// site's disk, which holds its files and its database, is full) the
// details the API's error envelope would: plan, limit, resource.
func (r *Runners) withPlanDetails(run jobs.RunnerFunc) jobs.RunnerFunc {
	return func(ctx context.Context, j *state.Job, progress func(int)) error {
		err := run(ctx, j, progress)
		var f *jobs.Failure
		if !errors.As(err, &f) || f.Code != "plan_limit_reached" || f.Details != nil {
			return err
		}
		f.Details = map[string]any{"resource": plans.SiteDiskMB}
		site, serr := r.Store.Site(j.SiteID)
		if serr != nil || site == nil {
			return err
		}
		if ws, werr := r.Store.Workspace(site.WorkspaceID); werr == nil && ws != nil {
			if plan, perr := r.Store.PlanOf(ws); perr == nil {
				f.Details["plan"] = plan
			}
		}
		if r.DiskMB != nil {
			f.Details["limit"] = r.DiskMB(site)
		}
		return err
	}
}

func (r *Runners) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC().Truncate(time.Millisecond)
	}
	return time.Now().UTC().Truncate(time.Millisecond)
}

// agentOf is the agent of the site's node; one the registry cannot reach
// fails the job with node_unavailable.
func (r *Runners) agentOf(s *state.Site) (agentv1connect.AgentServiceClient, error) {
	agent, err := r.Agents.Agent(s.NodeID)
	if err != nil {
		return nil, &jobs.Failure{Code: "node_unavailable", Message: err.Error()}
	}
	return agent, nil
}

// payloadOf decodes a job's payload.
func payloadOf[P any](j *state.Job) (P, error) {
	var p P
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return p, fmt.Errorf("%s payload: %w", j.Type, err)
	}
	return p, nil
}

func (r *Runners) site(j *state.Job) (*state.Site, error) {
	s, err := r.Store.Site(j.SiteID)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, &jobs.Failure{Code: "site_not_found", Message: "the site no longer exists"}
	}
	return s, nil
}

// failure turns an agent error into a job failure the user can read.
func failure(what string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		code := "agent_error"
		switch ce.Code() {
		case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
			code = "node_unavailable"
		case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
			code = "invalid_request"
		case connect.CodeResourceExhausted:
			// The site's disk is full (the plan's), or the request is
			// over a fixed cap of the node's.
			code = "plan_limit_reached"
			if ce.Meta().Get(agentv1.RefusalKey) == agentv1.RefusalTooLarge {
				code = CodePayloadTooLarge
			}
		}
		return &jobs.Failure{Code: code, Message: what + ": " + ce.Message()}
	}
	return &jobs.Failure{Code: "agent_error", Message: what + ": " + err.Error()}
}

func (r *Runners) fail(ctx context.Context, s *state.Site, onlyIf string, err error) error {
	msg := err.Error()
	var f *jobs.Failure
	if errors.As(err, &f) {
		msg = f.Message
	}
	_, _ = r.Raft.Apply(ctx, fsm.UpdateSite{Update: state.SiteUpdate{ID: s.ID, Status: state.SiteFailed,
		FailureReason: &msg, At: r.now(), IfStatus: onlyIf}})
	return err
}

func (r *Runners) create(ctx context.Context, j *state.Job, progress func(int)) error {
	var p jobspec.CreatePayload
	if len(j.Payload) > 0 {
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			return fmt.Errorf("%s payload: %w", j.Type, err)
		}
	}
	if p.RunID == "" {
		return r.makeSite(ctx, j, p, progress)
	}
	// A site made for a Blueprint: the run follows once it is ready. A
	// job run again (a new leader) finds it ready and does not make it
	// twice: that would start its content over under the finished steps.
	if s, err := r.Store.Site(j.SiteID); err == nil && s != nil && s.Status == state.SiteReady {
		return r.runBlueprint(ctx, p.RunID, progress)
	}
	if err := r.makeSite(ctx, j, p, func(pc int) { progress(pc / 2) }); err != nil {
		if ctx.Err() == nil {
			r.abortRun(ctx, p.RunID, "the site could not be made: "+failureMessage(err))
		}
		return err
	}
	return r.runBlueprint(ctx, p.RunID, func(pc int) { progress(50 + pc/2) })
}

func (r *Runners) makeSite(ctx context.Context, j *state.Job, p jobspec.CreatePayload, progress func(int)) error {
	s, err := r.site(j)
	if err != nil {
		return err
	}
	agent, err := r.agentOf(s)
	if err != nil {
		return r.fail(ctx, s, state.SiteCreating, err)
	}
	progress(10)
	if p.TemplateID != "" {
		if err := r.ensureTemplate(ctx, agent, s.NodeID, p.TemplateID, j.ID); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.fail(ctx, s, state.SiteCreating, err)
		}
		progress(40)
	}
	resp, err := agent.CreateSite(ctx, connect.NewRequest(&agentv1.CreateSiteRequest{
		SiteId: s.ID, JobId: j.ID, Slug: s.Slug, Name: s.Name, PhpVersion: s.PHPVersion, WordpressVersion: p.WordPressVersion,
		Url: s.URL, AdminUser: p.AdminUser, AdminEmail: p.AdminEmail, DiskMb: int64(p.DiskMB), TemplateId: p.TemplateID,
		SleepAfterSeconds: p.SleepAfterSeconds, Pooled: p.Pooled,
	}))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.fail(ctx, s, state.SiteCreating, failure("creating the site", err))
	}
	return r.ready(ctx, s, resp.Msg.Status, resp.Msg.WordpressVersion)
}

// ready records that the agent has the site serving. A site deleted
// meanwhile stays deleted: its delete job cleans up on the node.
func (r *Runners) ready(ctx context.Context, s *state.Site, st *agentv1.SiteStatus, wordpressVersion string) error {
	empty := ""
	_, err := r.Raft.Apply(ctx, fsm.UpdateSite{Update: state.SiteUpdate{ID: s.ID, Status: state.SiteReady,
		Port: int(st.GetPort()), Address: st.GetAddress(), WordPressVersion: wordpressVersion, FailureReason: &empty,
		At: r.now(), IfStatus: state.SiteCreating}})
	if errors.Is(err, state.ErrConflict) {
		return nil
	}
	return err
}

func (r *Runners) delete(ctx context.Context, j *state.Job, _ func(int)) error {
	s, err := r.Store.Site(j.SiteID)
	if err != nil || s == nil {
		return err
	}
	r.dropMoveTarget(ctx, s, j.ID)
	// A delete converges: while the site's node cannot be reached (an
	// agent restarting) it is asked again, until it answers or is
	// declared lost, when the site is forgotten at once (the node, back,
	// is told to remove what it holds of it).
	began := time.Now()
	for wait := time.Second; s.NodeID != ""; wait = min(2*wait, 10*time.Second) {
		if n, err := r.Store.Node(s.NodeID); err == nil && (n == nil || n.Status == state.NodeDown) {
			break // a node lost, or one the registry no longer has
		}
		agent, err := r.Agents.Agent(s.NodeID)
		if err == nil {
			if _, err = agent.DeleteSite(ctx, connect.NewRequest(&agentv1.SiteRef{SiteId: s.ID, JobId: j.ID})); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ce *connect.Error
		unreachable := !errors.As(err, &ce) || ce.Code() == connect.CodeUnavailable || ce.Code() == connect.CodeDeadlineExceeded
		if !unreachable || time.Since(began) >= maxDeleteWait {
			return failure("deleting the site", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	_, err = r.Raft.Apply(ctx, fsm.DeleteSite{ID: s.ID, At: r.now()})
	return err
}

// maxDeleteWait bounds how long a delete waits for the site's node to
// answer again before it fails (the node is declared lost well before,
// by default).
const maxDeleteWait = 15 * time.Minute

func (r *Runners) reset(ctx context.Context, j *state.Job, _ func(int)) error {
	s, err := r.site(j)
	if err != nil {
		return err
	}
	agent, err := r.agentOf(s)
	if err != nil {
		return r.fail(ctx, s, state.SiteCreating, err)
	}
	resp, err := agent.ResetSite(ctx, connect.NewRequest(&agentv1.ResetSiteRequest{SiteId: s.ID, JobId: j.ID}))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.fail(ctx, s, state.SiteCreating, failure("resetting the site", err))
	}
	return r.ready(ctx, s, resp.Msg.Status, resp.Msg.WordpressVersion)
}

func (r *Runners) phpConfig(ctx context.Context, j *state.Job, _ func(int)) error {
	s, err := r.site(j)
	if err != nil {
		return err
	}
	p, err := payloadOf[jobspec.PHPConfigPayload](j)
	if err != nil {
		return err
	}
	agent, err := r.agentOf(s)
	if err != nil {
		return err
	}
	if _, err := agent.SetPHPConfig(ctx, connect.NewRequest(&agentv1.SetPHPConfigRequest{SiteId: s.ID, JobId: j.ID, Settings: p.Settings})); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return failure("applying php.ini settings", err)
	}
	if p.Settings == nil {
		p.Settings = map[string]string{}
	}
	_, err = r.Raft.Apply(ctx, fsm.UpdateSite{Update: state.SiteUpdate{ID: s.ID, PHPConfig: p.Settings, At: r.now()}})
	return err
}

// switchPHP records the new runtime only after the agent saw WordPress
// answer on it; a failed switch leaves the site as it was (the agent has
// rolled back) and fails the job with the agent's reason.
func (r *Runners) switchPHP(ctx context.Context, j *state.Job, progress func(int)) error {
	s, err := r.site(j)
	if err != nil {
		return err
	}
	p, err := payloadOf[jobspec.SwitchPayload](j)
	if err != nil {
		return err
	}
	agent, err := r.agentOf(s)
	if err != nil {
		return err
	}
	progress(10)
	resp, err := agent.SwitchPHPVersion(ctx, connect.NewRequest(&agentv1.SwitchPHPVersionRequest{SiteId: s.ID, JobId: j.ID, PhpVersion: p.PHPVersion}))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeFailedPrecondition {
			return &jobs.Failure{Code: "php_switch_failed", Message: ce.Message()}
		}
		return failure("switching PHP", err)
	}
	_, err = r.Raft.Apply(ctx, fsm.UpdateSite{Update: state.SiteUpdate{ID: s.ID, PHPVersion: p.PHPVersion,
		WordPressVersion: resp.Msg.WordpressVersion, At: r.now()}})
	return err
}

// Expire deletes sites whose expiresAt has passed. It is a leader hook;
// it checks every interval until ctx ends.
func (r *Runners) Expire(ctx context.Context, interval time.Duration, allSites func() ([]*state.Site, error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sites, err := allSites()
		if err != nil {
			continue
		}
		now := r.now()
		for _, s := range sites {
			if s.ExpiresAt == nil || s.ExpiresAt.After(now) || s.Status == state.SiteDeleting {
				continue
			}
			j, err := jobs.New(jobspec.DeleteSite, s.WorkspaceID, s.ID, nil, now)
			if err != nil {
				continue
			}
			_, _ = r.Raft.Apply(ctx, fsm.UpdateSiteWithJob{Update: state.SiteUpdate{ID: s.ID, Status: state.SiteDeleting, At: now}, Job: j})
		}
	}
}
