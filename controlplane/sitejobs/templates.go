package sitejobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/templates"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

func templatePayload(j *state.Job) (jobspec.TemplatePayload, error) {
	var p jobspec.TemplatePayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return p, fmt.Errorf("%s payload: %w", j.Type, err)
	}
	return p, nil
}

// snapshot freezes the job's site into its template on the site's node
// and records the outcome on the template. A template deleted meanwhile
// is left to the collector (its tree may have been made).
func (r *Runners) snapshot(ctx context.Context, j *state.Job, progress func(int)) error {
	p, err := templatePayload(j)
	if err != nil {
		return err
	}
	tpl, err := r.Store.Template(p.TemplateID)
	if err != nil || tpl == nil {
		return err
	}
	s, err := r.site(j)
	if err != nil {
		return r.templateFailed(ctx, tpl, err)
	}
	return r.freezeInto(ctx, j, s, tpl, progress, nil)
}

// freezeInto freezes site s into template tpl and records it ready (with
// also applied to it), or failed.
func (r *Runners) freezeInto(ctx context.Context, j *state.Job, s *state.Site, tpl *state.Template, progress func(int), also func(*state.Template)) error {
	agent, err := r.agentOf(s)
	if err != nil {
		return r.templateFailed(ctx, tpl, err)
	}
	progress(10)
	resp, err := agent.FreezeTemplate(ctx, connect.NewRequest(&agentv1.FreezeTemplateRequest{SiteId: s.ID, TemplateId: tpl.BuildID(), JobId: j.ID}))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.templateFailed(ctx, tpl, failure("freezing the site", err))
	}
	progress(60)
	// The artifact lets any node make sites of the template, and it
	// outlives the node that froze it.
	sha, err := r.exportArtifact(ctx, agent, tpl.BuildID(), j.ID)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.templateFailed(ctx, tpl, failure("writing the template's artifact", err))
	}
	return r.putTemplate(ctx, tpl.ID, func(t *state.Template) {
		t.Status, t.FailureReason, t.NodeID, t.ArtifactSHA256 = state.TemplateReady, "", s.NodeID, sha
		t.SizeBytes, t.PHPVersion, t.WordPressVersion = resp.Msg.SizeBytes, resp.Msg.PhpVersion, resp.Msg.WordpressVersion
		if also != nil {
			also(t)
		}
	})
}

// templateFailed records why a template could not be made and fails the
// job with the same reason.
func (r *Runners) templateFailed(ctx context.Context, tpl *state.Template, err error) error {
	msg := err.Error()
	var f *jobs.Failure
	if errors.As(err, &f) {
		msg = f.Message
	}
	// A rebake's rebuild is internal: it goes, and the run says why; the
	// template it rebuilds stays as it was.
	if tpl.RebuildOf != "" {
		if _, derr := r.Raft.Apply(context.WithoutCancel(ctx), fsm.DeleteTemplate{ID: tpl.ID}); derr != nil && !errors.Is(derr, state.ErrNotFound) {
			return errors.Join(err, derr)
		}
		return err
	}
	// Only a template still building fails: a ready one (a job run again
	// after it finished) stays as it is.
	if perr := r.putTemplate(ctx, tpl.ID, func(t *state.Template) {
		if t.Status == state.TemplateBuilding {
			t.Status, t.FailureReason = state.TemplateFailed, msg
		}
	}); perr != nil {
		return errors.Join(err, perr)
	}
	return err
}

// putTemplate changes the template as it is now, and writes only over
// that: a PATCH that lands meanwhile is read again and the change applied
// to it. A deleted template stays deleted.
func (r *Runners) putTemplate(ctx context.Context, id string, change func(*state.Template)) error {
	for try := 0; ; try++ {
		t, err := r.Store.Template(id)
		if err != nil || t == nil {
			return err
		}
		next := *t
		change(&next)
		next.UpdatedAt = templates.Later(r.now(), t.UpdatedAt)
		read := t.UpdatedAt
		_, err = r.Raft.Apply(ctx, fsm.PutTemplate{Template: next, IfUpdatedAt: &read})
		switch {
		case errors.Is(err, state.ErrNotFound):
			return nil
		case errors.Is(err, state.ErrStale) && try < 4:
			continue
		}
		return err
	}
}

// restore replaces the site's content with the template's on its node.
func (r *Runners) restore(ctx context.Context, j *state.Job, progress func(int)) error {
	p, err := templatePayload(j)
	if err != nil {
		return err
	}
	s, err := r.site(j)
	if err != nil {
		return err
	}
	agent, err := r.agentOf(s)
	if err != nil {
		return r.fail(ctx, s, state.SiteCreating, err)
	}
	progress(10)
	if err := r.ensureTemplate(ctx, agent, s.NodeID, p.TemplateID, j.ID); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.fail(ctx, s, state.SiteCreating, err)
	}
	resp, err := agent.RestoreSite(ctx, connect.NewRequest(&agentv1.RestoreSiteRequest{SiteId: s.ID, JobId: j.ID, TemplateId: p.TemplateID}))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return r.fail(ctx, s, state.SiteCreating, failure("restoring the site", err))
	}
	return r.ready(ctx, s, resp.Msg.Status, resp.Msg.WordpressVersion)
}

// HeldTemplates tells which templates a node reported holding.
type HeldTemplates interface {
	HeldTemplates(nodeID string) []string
}

// CollectTemplates removes from each node the templates that have no row
// any more and that no site on that node is made from. It is a leader
// hook; it looks every interval until ctx ends. Nodes refuse to delete a
// template one of their sites still lies over, so a site made from it
// between the look and the call loses nothing.
func (r *Runners) CollectTemplates(ctx context.Context, interval time.Duration, held HeldTemplates) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.collectTemplates(ctx, held)
	}
}

func (r *Runners) collectTemplates(ctx context.Context, held HeldTemplates) {
	nodes, err := r.Store.Nodes()
	if err != nil {
		return
	}
	for _, n := range nodes {
		have := held.HeldTemplates(n.ID)
		if len(have) == 0 {
			continue
		}
		sites, err := r.Store.SitesOnNode(n.ID)
		if err != nil {
			continue
		}
		used := map[string]bool{}
		for _, s := range sites {
			used[s.TemplateBuildID()] = true
		}
		for _, id := range have {
			if used[id] {
				continue
			}
			if tpl, err := r.Store.TemplateByBuild(id); err != nil || tpl != nil {
				continue
			}
			agent, err := r.Agents.Agent(n.ID)
			if err != nil {
				continue
			}
			_, _ = agent.DeleteTemplate(ctx, connect.NewRequest(&agentv1.TemplateRef{TemplateId: id}))
		}
	}
}
