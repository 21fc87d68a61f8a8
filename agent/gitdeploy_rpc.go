package agent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/agent/gitdeploy"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/toolbox"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// gitError maps a fetch's refusal to the code the control plane reads;
// the message is the fetcher's, written for customers.
func gitError(err error) error {
	switch {
	case errors.Is(err, gitdeploy.ErrInvalid), errors.Is(err, gitdeploy.ErrRefused):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, gitdeploy.ErrAuth):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, gitdeploy.ErrRepoNotFound), errors.Is(err, gitdeploy.ErrBranchNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, gitdeploy.ErrHostKey):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, gitdeploy.ErrUnreachable):
		return connect.NewError(connect.CodeUnavailable, err)
	case errors.Is(err, gitdeploy.ErrGone):
		return connect.NewError(connect.CodeAborted, err)
	}
	return rpcError(err)
}

// DeployRepository fetches the branch, then streams its tree into the
// site through a pipe: nothing is written to the node's disk but git's
// cache, and the site unpacks it as its own user.
func (v *service) DeployRepository(ctx context.Context, req *connect.Request[agentv1.DeployRepositoryRequest]) (*connect.Response[agentv1.DeployRepositoryResponse], error) {
	m := req.Msg
	if v.sites.Get(m.SiteId) == nil {
		return nil, rpcError(sites.ErrNotFound)
	}
	tree, err := v.git.Fetch(ctx, gitdeploy.Source{RepoID: m.RepositoryId, URL: m.Url, Branch: m.Branch, Token: m.Token,
		SSHKey: m.SshKey, Pin: m.Pin})
	if err != nil {
		v.log.Info("git fetch failed", "site_id", m.SiteId, "job_id", m.JobId, "repository_id", m.RepositoryId, "err", err)
		return nil, gitError(err)
	}
	prefix := m.FolderName
	if m.Destination == toolbox.PlaceWPContent {
		prefix = ""
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() { // ends when the tree is written or the reader is closed
		err := tree.WriteTar(ctx, pw, prefix)
		pw.CloseWithError(err)
		written <- err
	}()
	err = v.box.PlaceTree(ctx, m.SiteId, m.Destination, m.FolderName, pr)
	_ = pr.Close()
	werr := <-written
	if err != nil {
		if werr != nil && !errors.Is(werr, io.ErrClosedPipe) {
			err = werr
		}
		v.log.Info("git deploy failed", "site_id", m.SiteId, "job_id", m.JobId, "repository_id", m.RepositoryId, "err", err)
		return nil, gitError(err)
	}
	if m.Activate && m.Destination != toolbox.PlaceWPContent {
		if _, err := v.box.Activate(ctx, m.SiteId, m.Destination, m.FolderName); err != nil {
			return nil, rpcError(fmt.Errorf("placed %s, but: %w", tree.SHA[:min(12, len(tree.SHA))], err))
		}
	}
	v.log.Info("git deploy placed", "site_id", m.SiteId, "job_id", m.JobId, "repository_id", m.RepositoryId, "sha", tree.SHA,
		"files", len(tree.Files), "bytes", tree.Bytes)
	return connect.NewResponse(&agentv1.DeployRepositoryResponse{Sha: tree.SHA, Files: int64(len(tree.Files)), Bytes: tree.Bytes}), nil
}
