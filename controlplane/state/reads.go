package state

import (
	"sort"

	memdb "github.com/hashicorp/go-memdb"
)

// Account returns the account with this id, or nil.
func (s *Store) Account(id string) (*Account, error) {
	return first[Account](s.read(), tableAccounts, "id", id)
}

// PlanOf is the plan a workspace's limits come from: its owner's
// (free when the owner is gone).
func (s *Store) PlanOf(ws *Workspace) (string, error) {
	owner, err := s.Account(ws.OwnerID)
	if err != nil {
		return "", err
	}
	if owner == nil {
		return PlanFree, nil
	}
	return owner.Plan, nil
}

// AccountByEmail returns the account with this email (case-insensitive), or nil.
func (s *Store) AccountByEmail(email string) (*Account, error) {
	return first[Account](s.read(), tableAccounts, "email", normEmail(email))
}

// Accounts lists every account ordered by email.
func (s *Store) Accounts() ([]*Account, error) {
	out, err := all[Account](s.read(), tableAccounts, "email")
	return out, err
}

// TokenByHash finds a token by the hash of its secret, or nil.
func (s *Store) TokenByHash(hash string) (*Token, error) {
	return first[Token](s.read(), tableTokens, "hash", hash)
}

// Token returns the token with this id, or nil.
func (s *Store) Token(id string) (*Token, error) {
	return first[Token](s.read(), tableTokens, "id", id)
}

// TokensOf lists an account's tokens, oldest first.
func (s *Store) TokensOf(userID string) ([]*Token, error) {
	out, err := all[Token](s.read(), tableTokens, "user", userID)
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, err
}

// Workspace returns the workspace with this id, or nil.
func (s *Store) Workspace(id string) (*Workspace, error) {
	return first[Workspace](s.read(), tableWorkspaces, "id", id)
}

// Member returns userID's membership of workspaceID, or nil.
func (s *Store) Member(workspaceID, userID string) (*Member, error) {
	return first[Member](s.read(), tableMembers, "id", workspaceID, userID)
}

// MembersOf lists a workspace's members in the order they joined.
func (s *Store) MembersOf(workspaceID string) ([]*Member, error) {
	out, err := all[Member](s.read(), tableMembers, "workspace", workspaceID)
	sort.Slice(out, func(i, j int) bool { return out[i].JoinedAt.Before(out[j].JoinedAt) })
	return out, err
}

// MembershipsOf lists the workspaces an account belongs to, oldest first.
func (s *Store) MembershipsOf(userID string) ([]*Member, error) {
	out, err := all[Member](s.read(), tableMembers, "user", userID)
	sort.Slice(out, func(i, j int) bool { return out[i].JoinedAt.Before(out[j].JoinedAt) })
	return out, err
}

// OwnedWorkspaces counts the workspaces an account owns.
func (s *Store) OwnedWorkspaces(userID string) (int, error) {
	return countOwned(s.read(), userID)
}

func countOwned(tx *memdb.Txn, userID string) (int, error) {
	ms, err := all[Member](tx, tableMembers, "user", userID)
	n := 0
	for _, m := range ms {
		if m.Role == RoleOwner {
			n++
		}
	}
	return n, err
}

// Role returns the custom role with this id, or nil.
func (s *Store) Role(id string) (*Role, error) {
	return first[Role](s.read(), tableRoles, "id", id)
}

// RolesOf lists a workspace's custom roles by name.
func (s *Store) RolesOf(workspaceID string) ([]*Role, error) {
	out, err := all[Role](s.read(), tableRoles, "workspace", workspaceID)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// Invitation returns the invitation with this id, or nil.
func (s *Store) Invitation(id string) (*Invitation, error) {
	return first[Invitation](s.read(), tableInvitations, "id", id)
}

// InvitationsFor lists the invitations addressed to an email, newest first.
func (s *Store) InvitationsFor(email string) ([]*Invitation, error) {
	out, err := all[Invitation](s.read(), tableInvitations, "email", normEmail(email))
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, err
}

// InvitationsOf lists a workspace's invitations, newest first.
func (s *Store) InvitationsOf(workspaceID string) ([]*Invitation, error) {
	out, err := all[Invitation](s.read(), tableInvitations, "workspace", workspaceID)
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, err
}

// Job returns the job with this id, or nil.
func (s *Store) Job(id string) (*Job, error) {
	return first[Job](s.read(), tableJobs, "id", id)
}

// UnfinishedJobs lists queued and running jobs, oldest first, and a watch
// set that fires when any of them changes or a new one is queued, so a
// dispatcher can wait with ws.WatchCtx.
func (s *Store) UnfinishedJobs() ([]*Job, memdb.WatchSet, error) {
	db, abandon := s.current()
	tx := db.Txn(false)
	ws := memdb.NewWatchSet()
	ws.Add(abandon)
	var out []*Job
	for _, st := range []string{JobQueued, JobRunning} {
		it, err := tx.Get(tableJobs, "status", st)
		if err != nil {
			return nil, nil, err
		}
		ws.Add(it.WatchCh())
		for raw := it.Next(); raw != nil; raw = it.Next() {
			out = append(out, raw.(*Job))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, ws, nil
}

// Servers lists the control-plane nodes.
func (s *Store) Servers() ([]*Server, error) {
	return all[Server](s.read(), tableServers, "id")
}

// Server returns one control-plane node, or nil.
func (s *Store) Server(id string) (*Server, error) {
	return first[Server](s.read(), tableServers, "id", id)
}

// Outbox lists kept mail, oldest first.
func (s *Store) Outbox() ([]*Mail, error) {
	out, err := all[Mail](s.read(), tableOutbox, "id")
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, err
}
