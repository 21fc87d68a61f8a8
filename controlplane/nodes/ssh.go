package nodes

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// touchEvery bounds how often a key's lastUsedAt is written: a burst of
// connections (an sftp client opening several) costs one Raft entry.
const touchEvery = time.Minute

// AuthorizeSSH decides whether a key opens a site through the asking
// node's SSH gateway: the key must be an account's, the account a member
// of the site's workspace whose role holds internals, and the site ready
// on that very node. It is asked at every connection.
func (r *Registry) AuthorizeSSH(ctx context.Context, req *connect.Request[agentv1.AuthorizeSSHRequest]) (*connect.Response[agentv1.AuthorizeSSHResponse], error) {
	m := req.Msg
	if err := itself(ctx, m.NodeId); err != nil {
		return nil, err
	}
	refuse := func(format string, args ...any) (*connect.Response[agentv1.AuthorizeSSHResponse], error) {
		return connect.NewResponse(&agentv1.AuthorizeSSHResponse{Reason: fmt.Sprintf(format, args...)}), nil
	}
	pub, err := ssh.ParsePublicKey(m.PublicKey)
	if err != nil {
		return refuse("not a public key")
	}
	fp := ssh.FingerprintSHA256(pub)
	key, err := r.cfg.Store.SSHKeyByFingerprint(fp)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if key == nil {
		return refuse("key %s is on no account", fp)
	}
	site, err := r.cfg.Store.Site(m.SiteId)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	switch {
	case site == nil || site.Pool != "":
		return refuse("no site %q", m.SiteId)
	case site.NodeID != m.NodeId:
		return refuse("site %s is not on node %s", site.ID, m.NodeId)
	case site.Status != state.SiteReady:
		return refuse("site %s is %s", site.ID, site.Status)
	}
	member, err := r.cfg.Store.Member(site.WorkspaceID, key.UserID)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if member == nil {
		return refuse("account %s is no member of the site's workspace", key.UserID)
	}
	var role *state.Role
	if member.CustomRoleID != "" {
		if role, err = r.cfg.Store.Role(member.CustomRoleID); err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
	}
	if !access.Of(member, role).Has(access.Internals) {
		return refuse("account %s lacks the internals capability in the site's workspace", key.UserID)
	}
	now := r.now()
	if key.LastUsedAt == nil || now.Sub(*key.LastUsedAt) >= touchEvery {
		if _, err := r.cfg.Raft.Apply(ctx, fsm.TouchSSHKey{ID: key.ID, At: now}); err != nil {
			r.log.Warn("record ssh key use", "err", err)
		}
	}
	r.log.Info("ssh session allowed", "site_id", site.ID, "node_id", m.NodeId, "user_id", key.UserID, "fingerprint", fp, "remote", m.RemoteAddr)
	return connect.NewResponse(&agentv1.AuthorizeSSHResponse{Allowed: true, AccountId: key.UserID}), nil
}
