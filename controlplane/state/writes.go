package state

import (
	"fmt"
	"strings"
	"time"

	memdb "github.com/hashicorp/go-memdb"
)

// Tx is one write transaction: the FSM applies a whole batch of commands
// through one Tx and commits once. Each write method checks everything it
// can refuse before it writes anything, so a refused command leaves the
// transaction as it found it.
//
// Rows in memdb are shared with readers: every write below copies a row
// before changing it and never mutates what it looked up.
type Tx struct{ tx *memdb.Txn }

func (t *Tx) run(fn func(tx *memdb.Txn) error) error { return fn(t.tx) }

// Update runs fn in one write transaction and commits it when fn returns
// nil; otherwise nothing fn wrote is kept.
func (s *Store) Update(fn func(*Tx) error) error {
	return s.write(func(tx *memdb.Txn) error { return fn(&Tx{tx: tx}) })
}

// CreateAccount adds an account with its personal workspace, owned by it.
func (t *Tx) CreateAccount(a Account, ws Workspace) error {
	return t.run(func(tx *memdb.Txn) error {
		a.Email = normEmail(a.Email)
		if dup, err := first[Account](tx, tableAccounts, "email", a.Email); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: an account with email %s exists", ErrConflict, a.Email)
		}
		if dup, err := first[Account](tx, tableAccounts, "id", a.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: account id %s exists", ErrConflict, a.ID)
		}
		if dup, err := first[Workspace](tx, tableWorkspaces, "id", ws.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: workspace id %s exists", ErrConflict, ws.ID)
		}
		a.PersonalWorkspaceID = ws.ID
		ws.OwnerID, ws.Personal = a.ID, true
		if err := insert(tx, tableAccounts, &a); err != nil {
			return err
		}
		return addWorkspace(tx, ws)
	})
}

// SetPlan changes an account's plan.
func (t *Tx) SetPlan(userID, plan string, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		a, err := first[Account](tx, tableAccounts, "id", userID)
		if err != nil {
			return err
		}
		if a == nil {
			return fmt.Errorf("%w: account %s", ErrNotFound, userID)
		}
		c := *a
		c.Plan, c.UpdatedAt = plan, at
		return insert(tx, tableAccounts, &c)
	})
}

// CreateToken stores a token for an existing account within its quota.
func (t *Tx) CreateToken(tok Token, q Quota) error {
	return t.run(func(tx *memdb.Txn) error {
		if a, err := first[Account](tx, tableAccounts, "id", tok.UserID); err != nil {
			return err
		} else if a == nil {
			return fmt.Errorf("%w: account %s", ErrNotFound, tok.UserID)
		}
		held, err := all[Token](tx, tableTokens, "user", tok.UserID)
		if err != nil {
			return err
		}
		if err := q.check(len(held)); err != nil {
			return err
		}
		if dup, err := first[Token](tx, tableTokens, "id", tok.ID); err != nil {
			return err
		} else if dup != nil {
			return fmt.Errorf("%w: token id %s exists", ErrConflict, tok.ID)
		}
		return insert(tx, tableTokens, &tok)
	})
}

// RevokeToken deletes one of userID's tokens.
func (t *Tx) RevokeToken(userID, tokenID string) error {
	return t.run(func(tx *memdb.Txn) error {
		tok, err := first[Token](tx, tableTokens, "id", tokenID)
		if err != nil {
			return err
		}
		if tok == nil || tok.UserID != userID {
			return fmt.Errorf("%w: token %s", ErrNotFound, tokenID)
		}
		return remove(tx, tableTokens, tok)
	})
}

// CreateWorkspace adds a workspace owned by ws.OwnerID, within the
// quota of workspaces the owner may own.
func (t *Tx) CreateWorkspace(ws Workspace, q Quota) error {
	return t.run(func(tx *memdb.Txn) error {
		if a, err := first[Account](tx, tableAccounts, "id", ws.OwnerID); err != nil {
			return err
		} else if a == nil {
			return fmt.Errorf("%w: account %s", ErrNotFound, ws.OwnerID)
		}
		owned, err := countOwned(tx, ws.OwnerID)
		if err != nil {
			return err
		}
		if err := q.check(owned); err != nil {
			return err
		}
		return addWorkspace(tx, ws)
	})
}

func addWorkspace(tx *memdb.Txn, ws Workspace) error {
	if dup, err := first[Workspace](tx, tableWorkspaces, "id", ws.ID); err != nil {
		return err
	} else if dup != nil {
		return fmt.Errorf("%w: workspace id %s exists", ErrConflict, ws.ID)
	}
	if err := insert(tx, tableWorkspaces, &ws); err != nil {
		return err
	}
	return insert(tx, tableMembers, &Member{WorkspaceID: ws.ID, UserID: ws.OwnerID, Role: RoleOwner, JoinedAt: ws.CreatedAt})
}

func roleIn(tx *memdb.Txn, workspaceID, roleID string) error {
	if roleID == "" {
		return nil
	}
	r, err := first[Role](tx, tableRoles, "id", roleID)
	if err != nil {
		return err
	}
	if r == nil || r.WorkspaceID != workspaceID {
		return fmt.Errorf("%w: role %s", ErrNotFound, roleID)
	}
	return nil
}

// CreateInvitation records an invitation to a workspace. It refuses an email
// that is already a member or already has a pending invitation there, and
// one that would take members plus pending invitations over the quota.
func (t *Tx) CreateInvitation(inv Invitation, q Quota) error {
	return t.run(func(tx *memdb.Txn) error {
		inv.Email = normEmail(inv.Email)
		if w, err := first[Workspace](tx, tableWorkspaces, "id", inv.WorkspaceID); err != nil {
			return err
		} else if w == nil {
			return fmt.Errorf("%w: workspace %s", ErrNotFound, inv.WorkspaceID)
		}
		if err := roleIn(tx, inv.WorkspaceID, inv.CustomRoleID); err != nil {
			return err
		}
		if a, err := first[Account](tx, tableAccounts, "email", inv.Email); err != nil {
			return err
		} else if a != nil {
			if m, err := first[Member](tx, tableMembers, "id", inv.WorkspaceID, a.ID); err != nil {
				return err
			} else if m != nil {
				return fmt.Errorf("%w: %s is already a member", ErrConflict, inv.Email)
			}
		}
		pending, err := all[Invitation](tx, tableInvitations, "email", inv.Email)
		if err != nil {
			return err
		}
		for _, p := range pending {
			if p.WorkspaceID == inv.WorkspaceID && p.Status == InvitationPending && p.ExpiresAt.After(inv.CreatedAt) {
				return fmt.Errorf("%w: %s already has a pending invitation", ErrConflict, inv.Email)
			}
		}
		members, err := all[Member](tx, tableMembers, "workspace", inv.WorkspaceID)
		if err != nil {
			return err
		}
		invs, err := all[Invitation](tx, tableInvitations, "workspace", inv.WorkspaceID)
		if err != nil {
			return err
		}
		seats := len(members)
		for _, p := range invs {
			if p.Status == InvitationPending && p.ExpiresAt.After(inv.CreatedAt) {
				seats++
			}
		}
		if err := q.check(seats); err != nil {
			return err
		}
		inv.Status = InvitationPending
		return insert(tx, tableInvitations, &inv)
	})
}

// RevokeInvitation deletes a pending invitation of workspaceID; an
// accepted one is history and stays.
func (t *Tx) RevokeInvitation(workspaceID, invID string) error {
	return t.run(func(tx *memdb.Txn) error {
		inv, err := first[Invitation](tx, tableInvitations, "id", invID)
		if err != nil {
			return err
		}
		if inv == nil || inv.WorkspaceID != workspaceID {
			return fmt.Errorf("%w: invitation %s", ErrNotFound, invID)
		}
		if inv.Status != InvitationPending {
			return fmt.Errorf("%w: invitation already %s", ErrConflict, inv.Status)
		}
		return remove(tx, tableInvitations, inv)
	})
}

// AcceptInvitation makes userID a member of the invitation's workspace. The
// invitation must be pending, unexpired at `at`, and addressed to userID's
// email; otherwise it is not found for that user.
func (t *Tx) AcceptInvitation(invID, userID string, at time.Time) (*Member, error) {
	var out *Member
	err := t.run(func(tx *memdb.Txn) error {
		a, err := first[Account](tx, tableAccounts, "id", userID)
		if err != nil {
			return err
		}
		inv, err := first[Invitation](tx, tableInvitations, "id", invID)
		if err != nil {
			return err
		}
		if a == nil || inv == nil || inv.Email != a.Email {
			return fmt.Errorf("%w: invitation %s", ErrNotFound, invID)
		}
		if inv.Status != InvitationPending {
			return fmt.Errorf("%w: invitation already %s", ErrConflict, inv.Status)
		}
		if !at.Before(inv.ExpiresAt) {
			return fmt.Errorf("%w: invitation expired", ErrConflict)
		}
		if m, err := first[Member](tx, tableMembers, "id", inv.WorkspaceID, userID); err != nil {
			return err
		} else if m != nil {
			return fmt.Errorf("%w: already a member", ErrConflict)
		}
		if w, err := first[Workspace](tx, tableWorkspaces, "id", inv.WorkspaceID); err != nil {
			return err
		} else if w == nil {
			return fmt.Errorf("%w: workspace %s", ErrNotFound, inv.WorkspaceID)
		}
		// The role may have been deleted meanwhile only if no invitation
		// pointed at it (DeleteRole refuses otherwise), so it still exists.
		m := &Member{WorkspaceID: inv.WorkspaceID, UserID: userID, Role: RoleMember, CustomRoleID: inv.CustomRoleID, JoinedAt: at}
		c := *inv
		c.Status, c.AcceptedAt = InvitationAccepted, &at
		if err := insert(tx, tableInvitations, &c); err != nil {
			return err
		}
		out = m
		return insert(tx, tableMembers, m)
	})
	return out, err
}

// SetMemberRole assigns a custom role to a member, or clears it with "".
func (t *Tx) SetMemberRole(workspaceID, userID, roleID string) (*Member, error) {
	var out *Member
	err := t.run(func(tx *memdb.Txn) error {
		m, err := first[Member](tx, tableMembers, "id", workspaceID, userID)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("%w: member %s", ErrNotFound, userID)
		}
		if m.Role == RoleOwner {
			return fmt.Errorf("%w: the owner's role cannot be changed", ErrConflict)
		}
		if err := roleIn(tx, workspaceID, roleID); err != nil {
			return err
		}
		c := *m
		c.CustomRoleID = roleID
		out = &c
		return insert(tx, tableMembers, &c)
	})
	return out, err
}

// RemoveMember takes an account out of a workspace. The owner stays.
func (t *Tx) RemoveMember(workspaceID, userID string) error {
	return t.run(func(tx *memdb.Txn) error {
		m, err := first[Member](tx, tableMembers, "id", workspaceID, userID)
		if err != nil {
			return err
		}
		if m == nil {
			return fmt.Errorf("%w: member %s", ErrNotFound, userID)
		}
		if m.Role == RoleOwner {
			return fmt.Errorf("%w: the owner cannot leave or be removed", ErrConflict)
		}
		return remove(tx, tableMembers, m)
	})
}

// MaxRolesPerWorkspace bounds a workspace's custom roles.
const MaxRolesPerWorkspace = 100

func roleNameTaken(tx *memdb.Txn, r Role) error {
	roles, err := all[Role](tx, tableRoles, "workspace", r.WorkspaceID)
	if err != nil {
		return err
	}
	for _, o := range roles {
		if o.ID != r.ID && strings.EqualFold(o.Name, r.Name) {
			return fmt.Errorf("%w: a role named %q exists", ErrConflict, r.Name)
		}
	}
	return nil
}

// PutRole creates a custom role, or replaces an existing one when update is
// set (a role deleted meanwhile is then not found, never re-created).
// Names are unique per workspace regardless of case.
func (t *Tx) PutRole(r Role, update bool) error {
	return t.run(func(tx *memdb.Txn) error {
		if w, err := first[Workspace](tx, tableWorkspaces, "id", r.WorkspaceID); err != nil {
			return err
		} else if w == nil {
			return fmt.Errorf("%w: workspace %s", ErrNotFound, r.WorkspaceID)
		}
		old, err := first[Role](tx, tableRoles, "id", r.ID)
		if err != nil {
			return err
		}
		if (old == nil && update) || (old != nil && (!update || old.WorkspaceID != r.WorkspaceID)) {
			if old != nil && !update && old.WorkspaceID == r.WorkspaceID {
				return fmt.Errorf("%w: role id %s exists", ErrConflict, r.ID)
			}
			return fmt.Errorf("%w: role %s", ErrNotFound, r.ID)
		}
		if old != nil {
			r.CreatedAt = old.CreatedAt
		} else if roles, err := all[Role](tx, tableRoles, "workspace", r.WorkspaceID); err != nil {
			return err
		} else if len(roles) >= MaxRolesPerWorkspace {
			return fmt.Errorf("%w: a workspace has at most %d custom roles", ErrInvalid, MaxRolesPerWorkspace)
		}
		if err := roleNameTaken(tx, r); err != nil {
			return err
		}
		return insert(tx, tableRoles, &r)
	})
}

// DeleteRole removes a custom role that no member or pending invitation holds.
func (t *Tx) DeleteRole(workspaceID, roleID string, at time.Time) error {
	return t.run(func(tx *memdb.Txn) error {
		r, err := first[Role](tx, tableRoles, "id", roleID)
		if err != nil {
			return err
		}
		if r == nil || r.WorkspaceID != workspaceID {
			return fmt.Errorf("%w: role %s", ErrNotFound, roleID)
		}
		if m, err := first[Member](tx, tableMembers, "role", roleID); err != nil {
			return err
		} else if m != nil {
			return fmt.Errorf("%w: role is assigned to a member", ErrRoleInUse)
		}
		invs, err := all[Invitation](tx, tableInvitations, "workspace", workspaceID)
		if err != nil {
			return err
		}
		for _, inv := range invs {
			if inv.CustomRoleID == roleID && inv.Status == InvitationPending && inv.ExpiresAt.After(at) {
				return fmt.Errorf("%w: role is offered by a pending invitation", ErrRoleInUse)
			}
		}
		return remove(tx, tableRoles, r)
	})
}

// CreateJob queues a job. Creating a job whose id exists is a no-op, so a
// retried command is harmless.
func (t *Tx) CreateJob(j Job) error {
	return t.run(func(tx *memdb.Txn) error {
		if old, err := first[Job](tx, tableJobs, "id", j.ID); err != nil {
			return err
		} else if old != nil {
			return nil
		}
		j.Status = JobQueued
		return insert(tx, tableJobs, &j)
	})
}

// JobUpdate is a job's transition reported by the dispatcher.
type JobUpdate struct {
	ID       string    `json:"id"`
	Status   string    `json:"status"`
	Progress int       `json:"progress"`
	Error    *JobError `json:"error,omitempty"`
	At       time.Time `json:"at"`
	// Dispatch marks the start of an attempt (first run or re-dispatch).
	Dispatch bool `json:"dispatch,omitempty"`
}

// UpdateJob moves a job forward: queued → running → succeeded|failed, or
// queued → failed. A finished job never changes again.
func (t *Tx) UpdateJob(u JobUpdate) (*Job, error) {
	var out *Job
	err := t.run(func(tx *memdb.Txn) error {
		j, err := first[Job](tx, tableJobs, "id", u.ID)
		if err != nil {
			return err
		}
		if j == nil {
			return fmt.Errorf("%w: job %s", ErrNotFound, u.ID)
		}
		if j.Terminal() {
			return fmt.Errorf("%w: job %s already %s", ErrConflict, u.ID, j.Status)
		}
		c := *j
		switch u.Status {
		case JobRunning:
			if c.StartedAt == nil {
				c.StartedAt = &u.At
			}
			if u.Dispatch {
				c.Attempts++
			}
		case JobSucceeded, JobFailed:
			c.FinishedAt = &u.At
			c.Error = u.Error
			if u.Status == JobSucceeded {
				u.Progress = 100
			}
		default:
			return fmt.Errorf("%w: job status %q", ErrInvalid, u.Status)
		}
		if u.Progress < c.Progress {
			u.Progress = c.Progress
		}
		c.Status, c.Progress, c.UpdatedAt = u.Status, min(u.Progress, 100), u.At
		out = &c
		return insert(tx, tableJobs, &c)
	})
	return out, err
}

// UpsertServer records where a control-plane node listens.
func (t *Tx) UpsertServer(sv Server) error {
	return t.run(func(tx *memdb.Txn) error { return insert(tx, tableServers, &sv) })
}

// RemoveServer forgets a control-plane node; an unknown one is fine.
func (t *Tx) RemoveServer(id string) error {
	return t.run(func(tx *memdb.Txn) error {
		sv, err := first[Server](tx, tableServers, "id", id)
		if err != nil || sv == nil {
			return err
		}
		return remove(tx, tableServers, sv)
	})
}

// AppendMail keeps one message in the outbox; a repeated id is a no-op.
func (t *Tx) AppendMail(m Mail) error {
	return t.run(func(tx *memdb.Txn) error {
		if old, err := first[Mail](tx, tableOutbox, "id", m.ID); err != nil || old != nil {
			return err
		}
		return insert(tx, tableOutbox, &m)
	})
}
