package sitejobs

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/gitsource"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// gitDeploy fetches a repository's branch on the site's node and places
// its tree; a plugin or theme's first deploy also activates it. The repository's host is resolved and checked here, by the
// address guard, and the node's git is pinned to that address: a name
// cannot lead git into the node's private network.
func (r *Runners) gitDeploy(ctx context.Context, j *state.Job, progress func(int)) error {
	p, err := payloadOf[jobspec.GitDeployPayload](j)
	if err != nil {
		return err
	}
	repo, err := r.Store.Repository(p.RepositoryID)
	if err != nil {
		return err
	}
	if repo == nil {
		return &jobs.Failure{Code: "repository_not_found", Message: "the repository was disconnected"}
	}
	s, err := r.site(j)
	if err != nil {
		return err
	}
	if s.Status != state.SiteReady {
		return &jobs.Failure{Code: "invalid_request", Message: "the site is " + s.Status}
	}
	if r.GitSecrets == nil || r.PinHost == nil {
		return &jobs.Failure{Code: "git_unavailable", Message: "Git deploys are not set up on this control plane"}
	}
	token, key, err := r.GitSecrets(repo)
	if err != nil {
		return err
	}
	remote, err := gitsource.Parse(repo.RepoURL, nil)
	if err != nil {
		return &jobs.Failure{Code: "invalid_request", Message: err.Error()}
	}
	pin, err := r.PinHost(ctx, remote.Host)
	if err != nil {
		return &jobs.Failure{Code: "git_unreachable", Message: "the repository's host cannot be used: " + err.Error()}
	}
	progress(10)
	agent, err := r.agentOf(s)
	if err != nil {
		return err
	}
	resp, err := agent.DeployRepository(ctx, connect.NewRequest(&agentv1.DeployRepositoryRequest{SiteId: s.ID, JobId: j.ID,
		RepositoryId: repo.ID, Url: repo.RepoURL, Branch: repo.Branch, Token: token, SshKey: key, Pin: pin.String(),
		Destination: repo.Destination, FolderName: repo.FolderName, Activate: repo.LastDeployedSHA == ""}))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return gitFailure(err)
	}
	progress(90)
	_, err = r.Raft.Apply(ctx, fsm.RecordDeploy{ID: repo.ID, SHA: resp.Msg.Sha, At: r.now()})
	return err
}

// gitFailure says why a deploy failed in the fetcher's own words, under
// a code a client can branch on.
func gitFailure(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return failure("deploying the repository", err)
	}
	code := map[connect.Code]string{
		connect.CodePermissionDenied:   "git_auth_failed",
		connect.CodeNotFound:           "git_not_found",
		connect.CodeUnavailable:        "git_unreachable",
		connect.CodeFailedPrecondition: "git_host_key_changed",
		connect.CodeInvalidArgument:    "git_refused",
		connect.CodeResourceExhausted:  "plan_limit_reached",
		connect.CodeDeadlineExceeded:   "git_unreachable",
		connect.CodeAborted:            "git_retry",
	}[ce.Code()]
	if code == "" {
		return failure("deploying the repository", err)
	}
	return &jobs.Failure{Code: code, Message: ce.Message()}
}
