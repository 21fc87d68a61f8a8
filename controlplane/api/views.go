package api

import (
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// The JSON shapes the API answers with. They are separate from the stored
// rows so that nothing stored (token hashes) leaks by accident.

// User is an account as its owner sees it.
type User struct {
	ID                  string    `json:"id"`
	Email               string    `json:"email"`
	Plan                string    `json:"plan" enum:"@plan"`
	PersonalWorkspaceID string    `json:"personalWorkspaceId"`
	CreatedAt           time.Time `json:"createdAt"`
}

func userView(a *state.Account) User {
	return User{ID: a.ID, Email: a.Email, Plan: a.Plan, PersonalWorkspaceID: a.PersonalWorkspaceID, CreatedAt: a.CreatedAt}
}

// APIToken is a personal token without its secret.
type APIToken struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix" doc:"First characters of the secret, to recognise it."`
	CreatedAt  time.Time  `json:"createdAt"`
	ExpiresAt  *time.Time `json:"expiresAt"`
	Current    bool       `json:"current" doc:"True for the token that made this request."`
	Kind       string     `json:"kind" enum:"@tokenKind" doc:"oauth: given to a client through the OAuth flow; it works only on /api/account/me and the Imports routes, unless its scope is account (a command-line login)."`
	ClientName *string    `json:"clientName,omitempty" doc:"For oauth tokens: the client it was given to."`
	Scope      *string    `json:"scope,omitempty" doc:"For oauth tokens: its scopes, space-separated."`
	// WorkspaceID is where a connector's token works.
	WorkspaceID *string `json:"workspaceId,omitempty" doc:"For a connector's oauth token (not the account scope): the one workspace it reaches, chosen on the consent page."`
}

// tokenView shows t; personal is its account's personal workspace (a
// connector token from before workspace binding is bound to it).
func tokenView(t *state.Token, current, personal string) APIToken {
	v := APIToken{ID: t.ID, Name: t.Name, Prefix: t.Prefix, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, Current: t.ID == current,
		Kind: state.TokenPersonal}
	if t.Kind == state.TokenOAuth {
		v.Kind, v.ClientName, v.Scope = state.TokenOAuth, &t.ClientName, &t.Scope
	}
	if ws := t.Bound(personal); ws != "" {
		v.WorkspaceID = &ws
	}
	return v
}

// WorkspaceView is a workspace with the caller's place in it.
type WorkspaceView struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	OwnerUserID  string    `json:"ownerUserId"`
	Personal     bool      `json:"personal"`
	Role         string    `json:"role" enum:"@role"`
	CustomRoleID *string   `json:"customRoleId"`
	Capabilities []string  `json:"capabilities"`
	CreatedAt    time.Time `json:"createdAt"`
}

// MemberView is one member of a workspace.
type MemberView struct {
	UserID       string    `json:"userId"`
	Email        string    `json:"email"`
	Role         string    `json:"role" enum:"@role"`
	CustomRoleID *string   `json:"customRoleId"`
	Capabilities []string  `json:"capabilities"`
	JoinedAt     time.Time `json:"joinedAt"`
}

// RoleView is a custom role.
type RoleView struct {
	ID           string    `json:"id"`
	WorkspaceID  string    `json:"workspaceId"`
	Name         string    `json:"name"`
	Capabilities []string  `json:"capabilities"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

func roleView(r *state.Role) RoleView {
	return RoleView{ID: r.ID, WorkspaceID: r.WorkspaceID, Name: r.Name, Capabilities: r.Capabilities, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// InvitationView is an invitation to a workspace.
type InvitationView struct {
	ID              string     `json:"id"`
	WorkspaceID     string     `json:"workspaceId"`
	WorkspaceName   string     `json:"workspaceName"`
	Email           string     `json:"email"`
	CustomRoleID    *string    `json:"customRoleId"`
	InvitedByUserID string     `json:"invitedByUserId"`
	Status          string     `json:"status" enum:"@invitationStatus"`
	CreatedAt       time.Time  `json:"createdAt"`
	ExpiresAt       time.Time  `json:"expiresAt"`
	AcceptedAt      *time.Time `json:"acceptedAt"`
}

// JobView is the addendum's job record.
type JobView struct {
	ID         string          `json:"id"`
	Type       string          `json:"type" enum:"@jobType"`
	Status     string          `json:"status" enum:"@jobStatus"`
	SiteID     *string         `json:"siteId"`
	Progress   int             `json:"progress"`
	Error      *state.JobError `json:"error"`
	Attempts   int             `json:"attempts"`
	CreatedAt  time.Time       `json:"createdAt"`
	StartedAt  *time.Time      `json:"startedAt"`
	FinishedAt *time.Time      `json:"finishedAt"`
}

func jobView(j *state.Job) JobView {
	return JobView{ID: j.ID, Type: j.Type, Status: j.Status, SiteID: optional(j.SiteID), Progress: j.Progress,
		Error: j.Error, Attempts: j.Attempts, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt}
}

// Usage is an account's consumption against its plan.
type Usage struct {
	Plan   string         `json:"plan" enum:"@plan"`
	Limits plans.Limits   `json:"limits" doc:"0 means unlimited (for siteDiskMb: the node's default, 1024)."`
	Counts map[string]int `json:"counts"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func capsOf(m *state.Member, role *state.Role) []string { return access.Of(m, role).List() }

// invitationList answers a list of invitations (or the error reading it).
func (a *base) invitationList(w http.ResponseWriter, invs []*state.Invitation, err error) error {
	if err != nil {
		return err
	}
	now := a.now()
	out := make([]InvitationView, 0, len(invs))
	for _, inv := range invs {
		out = append(out, a.invitationView(inv, now))
	}
	return rest.JSON(w, http.StatusOK, invitationsResponse{Invitations: out})
}

func (a *base) invitationView(inv *state.Invitation, now time.Time) InvitationView {
	v := InvitationView{ID: inv.ID, WorkspaceID: inv.WorkspaceID, Email: inv.Email, CustomRoleID: optional(inv.CustomRoleID),
		InvitedByUserID: inv.InvitedByUserID, Status: inv.Status, CreatedAt: inv.CreatedAt, ExpiresAt: inv.ExpiresAt, AcceptedAt: inv.AcceptedAt}
	if v.Status == state.InvitationPending && !now.Before(inv.ExpiresAt) {
		v.Status = state.InvitationExpired
	}
	if ws, err := a.store.Workspace(inv.WorkspaceID); err == nil && ws != nil {
		v.WorkspaceName = ws.Name
	}
	return v
}
