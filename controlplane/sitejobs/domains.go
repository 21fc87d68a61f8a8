package sitejobs

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/state"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// wantedURL is the URL WordPress should answer at: its custom domain
// while that is verifying or active, else its sandbox URL.
func wantedURL(s *state.Site, d *state.Domain) string {
	if d.WantsDomain() {
		return "https://" + d.Hostname
	}
	return s.URL
}

// setDomain moves a site's WordPress to whatever its domain wants when
// the job runs, so a connect and a disconnect racing each other end in
// the state the last one left: after each move the domain is read again
// and, if it wants another URL meanwhile, the site is moved again. A
// verifying domain becomes active once the node has moved WordPress; a move
// that fails marks it failed with the reason.
func (r *Runners) setDomain(ctx context.Context, j *state.Job, _ func(int)) error {
	for range 4 {
		s, err := r.site(j)
		if err != nil {
			return err
		}
		d, err := r.Store.SiteDomain(s.ID)
		if err != nil {
			return err
		}
		want := wantedURL(s, d)
		agent, err := r.Agents.Agent(s.NodeID)
		if err == nil {
			_, err = agent.SetSiteURL(ctx, connect.NewRequest(&agentv1.SetSiteURLRequest{SiteId: s.ID, JobId: j.ID, Url: want}))
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			f := failure("moving WordPress to "+want, err)
			if d.WantsDomain() {
				next := *d
				next.Status, next.UpdatedAt = state.DomainFailed, r.now()
				var jf *jobs.Failure
				if errors.As(f, &jf) {
					next.LastError = jf.Message
				}
				_, _ = r.Raft.Apply(ctx, fsm.PutDomain{Domain: next, IfStatus: []string{state.DomainVerifying, state.DomainActive}})
			}
			return f
		}
		after, err := r.Store.SiteDomain(s.ID)
		if err != nil {
			return err
		}
		if wantedURL(s, after) != want {
			continue // changed while the site moved: move it again
		}
		if after == nil || after.Status != state.DomainVerifying {
			return nil
		}
		now := r.now()
		next := *after
		next.Status, next.VerifiedAt, next.UpdatedAt, next.LastError = state.DomainActive, &now, now, ""
		_, err = r.Raft.Apply(ctx, fsm.PutDomain{Domain: next, IfStatus: []string{state.DomainVerifying}})
		if errors.Is(err, state.ErrStale) {
			continue
		}
		return err
	}
	return &jobs.Failure{Code: "conflict", Message: "the site's custom domain kept changing while WordPress moved; check the domain again"}
}
