// Package workspaces makes workspaces and changes who is in one and what
// they may do: custom roles, invitations (mailed), members. Every change
// is one Raft entry, under a REST request's answer when one asks.
package workspaces

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/accountspec"
	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/naming"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// Mailer delivers an invitation (to an SMTP server, or the outbox).
type Mailer interface {
	Send(ctx context.Context, m state.Mail) error
}

// Config wires the service.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	Plans plans.Config
	// Mailer delivers invitations (nil: none are mailed).
	Mailer Mailer
	// PublicURL is the API base URL invitations name.
	PublicURL string
	// InvitationTTL is how long an invitation can be accepted; zero
	// means 7 days.
	InvitationTTL time.Duration
	Now           func() time.Time
	Logger        *slog.Logger
}

// Service changes workspaces.
type Service struct{ cfg Config }

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.InvitationTTL == 0 {
		cfg.InvitationTTL = 7 * 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = cfg.Logger.With("component", "workspaces")
	return &Service{cfg: cfg}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// Create makes a workspace owned by owner, within its plan's quota.
func (s *Service) Create(ctx context.Context, ans *writes.Answer[accountspec.WorkspaceMade], owner *state.Account, name string) (*state.Workspace, error) {
	name, err := naming.Field("name", name, 100)
	if err != nil {
		return nil, err
	}
	quota, err := s.cfg.Plans.Quota(owner.Plan, plans.Workspaces)
	if err != nil {
		return nil, err
	}
	now := s.now()
	ws := state.Workspace{ID: ids.New(ids.Workspace), Name: name, OwnerID: owner.ID, CreatedAt: now, UpdatedAt: now}
	made := accountspec.WorkspaceMade{Workspace: ws, Member: state.Member{WorkspaceID: ws.ID, UserID: owner.ID, Role: state.RoleOwner, JoinedAt: now}}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.CreateWorkspace{Workspace: ws, Quota: quota}, made); err != nil {
		return nil, err
	}
	return &ws, nil
}

func validCapabilities(caps []string) ([]string, error) {
	if caps == nil {
		return nil, apierr.Invalid("capabilities", "capabilities is required (it may be an empty list)")
	}
	out, err := access.Validate(caps)
	if err != nil {
		return nil, apierr.Invalid("capabilities", "%s", err.Error())
	}
	return out, nil
}

func roleNotFound() *apierr.Error { return apierr.NotFound(apierr.CodeRoleNotFound, "role") }

// CreateRole adds a custom role to a workspace.
func (s *Service) CreateRole(ctx context.Context, ans *writes.Answer[state.Role], ws *state.Workspace, name string, caps []string) (*state.Role, error) {
	name, err := naming.Field("name", name, 64)
	if err != nil {
		return nil, err
	}
	if caps, err = validCapabilities(caps); err != nil {
		return nil, err
	}
	now := s.now()
	role := state.Role{ID: ids.New(ids.Role), WorkspaceID: ws.ID, Name: name, Capabilities: caps, CreatedAt: now, UpdatedAt: now}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.PutRole{Role: role}, role); err != nil {
		return nil, err
	}
	return &role, nil
}

// Role is a custom role of the workspace, or role_not_found.
func (s *Service) Role(ws *state.Workspace, id string) (*state.Role, error) {
	role, err := s.cfg.Store.Role(id)
	if err != nil {
		return nil, err
	}
	if role == nil || role.WorkspaceID != ws.ID {
		return nil, roleNotFound()
	}
	return role, nil
}

// roleField checks that customRoleId names a role of the workspace.
func (s *Service) roleField(ws *state.Workspace, id string) error {
	role, err := s.cfg.Store.Role(id)
	if err != nil {
		return err
	}
	if role == nil || role.WorkspaceID != ws.ID {
		return roleNotFound().With("field", "customRoleId")
	}
	return nil
}

// UpdateRole renames a custom role or changes its capabilities (nil:
// unchanged).
func (s *Service) UpdateRole(ctx context.Context, ws *state.Workspace, id string, name *string, caps *[]string) (*state.Role, error) {
	old, err := s.Role(ws, id)
	if err != nil {
		return nil, err
	}
	role := *old
	if name != nil {
		if role.Name, err = naming.Field("name", *name, 64); err != nil {
			return nil, err
		}
	}
	if caps != nil {
		if role.Capabilities, err = validCapabilities(*caps); err != nil {
			return nil, err
		}
	}
	role.UpdatedAt = s.now()
	if _, err := s.cfg.Raft.Apply(ctx, fsm.PutRole{Role: role, Update: true}); err != nil {
		return nil, notFound(err, roleNotFound())
	}
	return &role, nil
}

// DeleteRole removes a custom role no member holds.
func (s *Service) DeleteRole(ctx context.Context, ws *state.Workspace, id string) error {
	_, err := s.cfg.Raft.Apply(ctx, fsm.DeleteRole{WorkspaceID: ws.ID, RoleID: id, At: s.now()})
	return notFound(err, roleNotFound())
}

// notFound turns the store's not-found into the route's own code.
func notFound(err error, nf *apierr.Error) error {
	if errors.Is(err, state.ErrNotFound) {
		return nf
	}
	return err
}

// Invite invites an address to a workspace (with a custom role, or
// none), within its plan's member quota, and mails the invitee once the
// invitation is made (a replayed request mails nobody).
func (s *Service) Invite(ctx context.Context, ans *writes.Answer[state.Invitation], ws *state.Workspace, by *state.Account, email, customRoleID string) (*state.Invitation, error) {
	email, err := naming.Email(email)
	if err != nil {
		return nil, err
	}
	noRole := roleNotFound().With("field", "customRoleId")
	if customRoleID != "" {
		if err := s.roleField(ws, customRoleID); err != nil {
			return nil, err
		}
	}
	plan, err := s.cfg.Store.PlanOf(ws)
	if err != nil {
		return nil, err
	}
	quota, err := s.cfg.Plans.Quota(plan, plans.MembersPerWorkspace)
	if err != nil {
		return nil, err
	}
	now := s.now()
	inv := state.Invitation{ID: ids.New(ids.Invitation), WorkspaceID: ws.ID, Email: email, CustomRoleID: customRoleID,
		InvitedByUserID: by.ID, Status: state.InvitationPending, CreatedAt: now, ExpiresAt: now.Add(s.cfg.InvitationTTL)}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.CreateInvitation{Invitation: inv, Quota: quota}, inv); err != nil {
		return nil, notFound(err, noRole)
	}
	s.mail(ctx, ws, by, &inv)
	return &inv, nil
}

// mail tells the invitee. The invitation is committed already, so a
// delivery failure is logged, not returned: the invitee still sees it at
// GET /api/account/invitations and the inviter can list it.
func (s *Service) mail(ctx context.Context, ws *state.Workspace, by *state.Account, inv *state.Invitation) {
	if s.cfg.Mailer == nil {
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s invited you to the workspace %q.\n\n", by.Email, ws.Name)
	fmt.Fprintf(&b, "Sign in with an API token for %s and accept:\n\n", inv.Email)
	fmt.Fprintf(&b, "  curl -X POST %s/api/account/invitations/%s/accept \\\n    -H \"Authorization: Bearer $SANDBOX_TOKEN\"\n\n", s.cfg.PublicURL, inv.ID)
	fmt.Fprintf(&b, "Invitation id: %s\nExpires: %s\n", inv.ID, inv.ExpiresAt.Format("2006-01-02 15:04 MST"))
	m := state.Mail{ID: ids.New(ids.Mail), To: inv.Email, Subject: fmt.Sprintf("Invitation to %s", ws.Name), Text: b.String(), CreatedAt: s.now()}
	if err := s.cfg.Mailer.Send(ctx, m); err != nil {
		s.cfg.Logger.Error("invitation email not delivered", "invitation_id", inv.ID, "workspace_id", inv.WorkspaceID, "err", err)
	}
}

// RevokeInvitation withdraws a pending invitation.
func (s *Service) RevokeInvitation(ctx context.Context, ws *state.Workspace, id string) error {
	_, err := s.cfg.Raft.Apply(ctx, fsm.RevokeInvitation{WorkspaceID: ws.ID, InvitationID: id})
	return notFound(err, apierr.NotFound(apierr.CodeInvitationNotFound, "invitation"))
}

// Accept accepts an invitation addressed to acct: it becomes a member.
func (s *Service) Accept(ctx context.Context, acct *state.Account, id string) (*state.Member, error) {
	res, err := s.cfg.Raft.Apply(ctx, fsm.AcceptInvitation{InvitationID: id, UserID: acct.ID, At: s.now()})
	if err != nil {
		return nil, notFound(err, apierr.NotFound(apierr.CodeInvitationNotFound, "invitation"))
	}
	return res.(*state.Member), nil
}

// SetMemberRole gives a member a custom role, or clears it (nil).
func (s *Service) SetMemberRole(ctx context.Context, ws *state.Workspace, userID string, roleID *string) (*state.Member, error) {
	cmd := fsm.SetMemberRole{WorkspaceID: ws.ID, UserID: userID}
	if roleID != nil {
		if err := s.roleField(ws, *roleID); err != nil {
			return nil, err
		}
		cmd.RoleID = *roleID
	}
	if m, err := s.cfg.Store.Member(ws.ID, userID); err != nil {
		return nil, err
	} else if m == nil {
		return nil, apierr.NotFound(apierr.CodeMemberNotFound, "member")
	}
	res, err := s.cfg.Raft.Apply(ctx, cmd)
	if err != nil {
		return nil, notFound(err, apierr.NotFound(apierr.CodeMemberNotFound, "member or role"))
	}
	return res.(*state.Member), nil
}

// RemoveMember takes a member out of a workspace.
func (s *Service) RemoveMember(ctx context.Context, ws *state.Workspace, userID string) error {
	_, err := s.cfg.Raft.Apply(ctx, fsm.RemoveMember{WorkspaceID: ws.ID, UserID: userID})
	return notFound(err, apierr.NotFound(apierr.CodeMemberNotFound, "member"))
}
