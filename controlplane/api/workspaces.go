package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/mail"
	"strings"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

type workspacesResponse struct {
	Workspaces []WorkspaceView `json:"workspaces"`
}

type workspaceResponse struct {
	Workspace WorkspaceView `json:"workspace"`
}

// CreateWorkspaceRequest is the body of POST /api/app/workspaces.
type CreateWorkspaceRequest struct {
	Name string `json:"name"`
}

type membersResponse struct {
	Members []MemberView `json:"members"`
}

// InviteRequest is the body of POST /api/app/workspaces/{id}/members.
type InviteRequest struct {
	Email        string `json:"email"`
	CustomRoleID string `json:"customRoleId,omitempty"`
}

type invitationResponse struct {
	Invitation InvitationView `json:"invitation"`
}

// UpdateMemberRequest is the body of PATCH …/members/{userId}:
// customRoleId assigns a role, null clears it.
type UpdateMemberRequest struct {
	CustomRoleID *string `json:"customRoleId"`
}

var (
	wsParam     = map[string]string{"id": "workspace"}
	memberParam = map[string]string{"id": "workspace", "userId": "member"}
)

func (a *API) registerWorkspaces(r *rest.Router) {
	a.bearer(r, guard{scope: scopeAccount}, rest.Route{Method: "GET", Path: "/api/app/workspaces", Tag: "workspaces",
		Summary: "List the caller's workspace memberships.", Response: workspacesResponse{}, Handler: a.listWorkspaces})
	a.bearer(r, guard{scope: scopeAccount}, rest.Route{Method: "POST", Path: "/api/app/workspaces", Tag: "workspaces",
		Summary: "Create a workspace owned by the caller.", Status: http.StatusCreated,
		Request: CreateWorkspaceRequest{}, Response: workspaceResponse{}, Idempotent: true,
		Errors:  []string{apierr.CodeInvalidRequest, apierr.CodePlanLimitReached, apierr.CodePayloadTooLarge},
		Handler: a.createWorkspace})
	a.bearer(r, guard{scope: scopePathWorkspace}, rest.Route{Method: "GET", Path: "/api/app/workspaces/{id}", Tag: "workspaces",
		Summary: "One workspace with the caller's role in it.", Params: wsParam, Response: workspaceResponse{},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			c := CallerFrom(req.Context())
			v, err := a.workspaceView(c.Workspace, c.Member)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, workspaceResponse{Workspace: v})
		}})
	a.bearer(r, guard{scope: scopePathWorkspace}, rest.Route{Method: "GET", Path: "/api/app/workspaces/{id}/members", Tag: "workspaces",
		Summary: "List members; any member may.", Params: wsParam, Response: membersResponse{}, Handler: a.listMembers})
	a.bearer(r, guard{scope: scopePathWorkspace, capability: access.Manage}, rest.Route{Method: "POST",
		Path: "/api/app/workspaces/{id}/members", Tag: "workspaces",
		Summary: "Invite an email address; the invitation is sent by email.", Params: wsParam, Status: http.StatusCreated,
		Request: InviteRequest{}, Response: invitationResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodeConflict, apierr.CodeRoleNotFound,
			apierr.CodePlanLimitReached, apierr.CodePayloadTooLarge},
		Handler: a.invite})
	a.bearer(r, guard{scope: scopePathWorkspace, capability: access.Manage}, rest.Route{Method: "GET",
		Path: "/api/app/workspaces/{id}/invitations", Tag: "workspaces",
		Summary: "List the workspace's invitations.", Params: wsParam, Response: invitationsResponse{},
		Handler: a.listInvitations})
	a.bearer(r, guard{scope: scopePathWorkspace, capability: access.Manage}, rest.Route{Method: "DELETE",
		Path: "/api/app/workspaces/{id}/invitations/{invitationId}", Tag: "workspaces",
		Summary: "Withdraw a pending invitation.", Params: map[string]string{"id": "workspace", "invitationId": "invitation"},
		Response: deletedResponse{}, Errors: []string{apierr.CodeInvitationNotFound, apierr.CodeConflict},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			cmd := fsm.RevokeInvitation{WorkspaceID: CallerFrom(req.Context()).Workspace.ID, InvitationID: req.PathValue("invitationId")}
			if _, err := a.apply(req.Context(), cmd, apierr.NotFound(apierr.CodeInvitationNotFound, "invitation")); err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
		}})
	a.bearer(r, guard{scope: scopePathWorkspace, capability: access.Manage}, rest.Route{Method: "PATCH",
		Path: "/api/app/workspaces/{id}/members/{userId}", Tag: "workspaces",
		Summary: "Assign a custom role to a member, or clear it with null.", Params: memberParam,
		Request: UpdateMemberRequest{}, Response: memberResponse{},
		Errors:  []string{apierr.CodeInvalidRequest, apierr.CodeMemberNotFound, apierr.CodeRoleNotFound, apierr.CodeConflict},
		Handler: a.updateMember})
	// Self-removal needs no capability, so the guard checks none and the
	// handler asks for manage when the target is someone else.
	a.bearer(r, guard{scope: scopePathWorkspace}, rest.Route{Method: "DELETE",
		Path: "/api/app/workspaces/{id}/members/{userId}", Tag: "workspaces", Capability: access.Manage,
		Summary: "Remove a member: yourself, or anyone with the manage capability.", Params: memberParam,
		Response: deletedResponse{}, Errors: []string{apierr.CodeMemberNotFound, apierr.CodeConflict, apierr.CodeCapabilityRequired},
		Handler: a.removeMember})
}

func (a *API) workspaceView(ws *state.Workspace, m *state.Member) (WorkspaceView, error) {
	role, err := a.memberRole(m)
	if err != nil {
		return WorkspaceView{}, err
	}
	return WorkspaceView{ID: ws.ID, Name: ws.Name, OwnerUserID: ws.OwnerID, Personal: ws.Personal, Role: m.Role,
		CustomRoleID: optional(m.CustomRoleID), Capabilities: capsOf(m, role), CreatedAt: ws.CreatedAt}, nil
}

func (a *API) memberRole(m *state.Member) (*state.Role, error) {
	if m.CustomRoleID == "" {
		return nil, nil
	}
	return a.store.Role(m.CustomRoleID)
}

func (a *API) memberView(m *state.Member) (MemberView, error) {
	acct, err := a.store.Account(m.UserID)
	if err != nil {
		return MemberView{}, err
	}
	role, err := a.memberRole(m)
	if err != nil {
		return MemberView{}, err
	}
	v := MemberView{UserID: m.UserID, Role: m.Role, CustomRoleID: optional(m.CustomRoleID), Capabilities: capsOf(m, role), JoinedAt: m.JoinedAt}
	if acct != nil {
		v.Email = acct.Email
	}
	return v, nil
}

func (a *API) listWorkspaces(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	ms, err := a.store.MembershipsOf(c.Account.ID)
	if err != nil {
		return err
	}
	out := make([]WorkspaceView, 0, len(ms))
	for _, m := range ms {
		ws, err := a.store.Workspace(m.WorkspaceID)
		if err != nil {
			return err
		}
		if ws == nil {
			continue
		}
		v, err := a.workspaceView(ws, m)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	return rest.JSON(w, http.StatusOK, workspacesResponse{Workspaces: out})
}

func (a *API) createWorkspace(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body CreateWorkspaceRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	name, err := validName("name", body.Name, 100)
	if err != nil {
		return err
	}
	quota, err := a.cfg.Plans.Quota(c.Account.Plan, plans.Workspaces)
	if err != nil {
		return err
	}
	now := a.now()
	ws := state.Workspace{ID: ids.New(ids.Workspace), Name: name, OwnerID: c.Account.ID, CreatedAt: now, UpdatedAt: now}
	m := &state.Member{WorkspaceID: ws.ID, UserID: c.Account.ID, Role: state.RoleOwner, JoinedAt: now}
	v, err := a.workspaceView(&ws, m)
	if err != nil {
		return err
	}
	return a.commit(w, req, fsm.CreateWorkspace{Workspace: ws, Quota: quota}, nil, http.StatusCreated, workspaceResponse{Workspace: v})
}

func (a *API) listMembers(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	ms, err := a.store.MembersOf(c.Workspace.ID)
	if err != nil {
		return err
	}
	out := make([]MemberView, 0, len(ms))
	for _, m := range ms {
		v, err := a.memberView(m)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	return rest.JSON(w, http.StatusOK, membersResponse{Members: out})
}

func (a *API) listInvitations(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	invs, err := a.store.InvitationsOf(c.Workspace.ID)
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

func validEmail(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return "", apierr.Invalid("email", "email is required")
	}
	addr, err := mail.ParseAddress(s)
	if err != nil || addr.Address != s || addr.Name != "" || len(s) > 254 {
		return "", apierr.Invalid("email", "email must be a plain address such as name@example.com")
	}
	return s, nil
}

func (a *API) invite(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body InviteRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	email, err := validEmail(body.Email)
	if err != nil {
		return err
	}
	roleNotFound := apierr.NotFound(apierr.CodeRoleNotFound, "role").With("field", "customRoleId")
	if body.CustomRoleID != "" {
		role, err := a.store.Role(body.CustomRoleID)
		if err != nil {
			return err
		}
		if role == nil || role.WorkspaceID != c.Workspace.ID {
			return roleNotFound
		}
	}
	now := a.now()
	plan, err := a.store.PlanOf(c.Workspace)
	if err != nil {
		return err
	}
	quota, err := a.cfg.Plans.Quota(plan, plans.MembersPerWorkspace)
	if err != nil {
		return err
	}
	inv := state.Invitation{ID: ids.New(ids.Invitation), WorkspaceID: c.Workspace.ID, Email: email,
		CustomRoleID: body.CustomRoleID, InvitedByUserID: c.Account.ID, Status: state.InvitationPending,
		CreatedAt: now, ExpiresAt: now.Add(a.cfg.InvitationTTL)}
	applied, err := a.commitOnce(w, req, fsm.CreateInvitation{Invitation: inv, Quota: quota}, roleNotFound,
		http.StatusCreated, invitationResponse{Invitation: a.invitationView(&inv, now)})
	if applied {
		a.sendInvitation(req, c, &inv)
	}
	return err
}

// sendInvitation mails the invitee. The invitation is committed already,
// so a delivery failure is logged, not returned: the invitee still sees it
// at GET /api/account/invitations and the inviter can list it.
func (a *API) sendInvitation(req *http.Request, c *Caller, inv *state.Invitation) {
	if a.cfg.Mailer == nil {
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s invited you to the workspace %q.\n\n", c.Account.Email, c.Workspace.Name)
	fmt.Fprintf(&b, "Sign in with an API token for %s and accept:\n\n", inv.Email)
	fmt.Fprintf(&b, "  curl -X POST %s/api/account/invitations/%s/accept \\\n    -H \"Authorization: Bearer $SANDBOX_TOKEN\"\n\n", a.cfg.PublicURL, inv.ID)
	fmt.Fprintf(&b, "Invitation id: %s\nExpires: %s\n", inv.ID, inv.ExpiresAt.Format("2006-01-02 15:04 MST"))
	m := state.Mail{ID: ids.New(ids.Mail), To: inv.Email, Subject: fmt.Sprintf("Invitation to %s", c.Workspace.Name),
		Text: b.String(), CreatedAt: a.now()}
	if err := a.cfg.Mailer.Send(req.Context(), m); err != nil {
		a.log.Error("invitation email not delivered", "invitation_id", inv.ID, "workspace_id", inv.WorkspaceID, "err", err)
	}
}

func (a *API) updateMember(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var raw map[string]json.RawMessage
	if err := rest.DecodeJSON(req, &raw); err != nil {
		return err
	}
	val, ok := raw["customRoleId"]
	for k := range raw {
		if k != "customRoleId" {
			return apierr.Invalid(k, "unknown field %q", k)
		}
	}
	if !ok {
		return apierr.Invalid("customRoleId", "customRoleId is required: a role id, or null to clear the role")
	}
	var roleID *string
	if err := json.Unmarshal(val, &roleID); err != nil || (roleID != nil && *roleID == "") {
		return apierr.Invalid("customRoleId", "customRoleId must be a role id or null")
	}
	cmd := fsm.SetMemberRole{WorkspaceID: c.Workspace.ID, UserID: req.PathValue("userId")}
	if roleID != nil {
		cmd.RoleID = *roleID
		role, err := a.store.Role(*roleID)
		if err != nil {
			return err
		}
		if role == nil || role.WorkspaceID != c.Workspace.ID {
			return apierr.NotFound(apierr.CodeRoleNotFound, "role").With("field", "customRoleId")
		}
	}
	if m, err := a.store.Member(c.Workspace.ID, cmd.UserID); err != nil {
		return err
	} else if m == nil {
		return apierr.NotFound(apierr.CodeMemberNotFound, "member")
	}
	res, err := a.apply(req.Context(), cmd, apierr.NotFound(apierr.CodeMemberNotFound, "member or role"))
	if err != nil {
		return err
	}
	v, err := a.memberView(res.(*state.Member))
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, memberResponse{Member: v})
}

func (a *API) removeMember(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	target := req.PathValue("userId")
	if target != c.Account.ID && !c.Caps.Has(access.Manage) {
		return apierr.CapabilityRequired(access.Manage)
	}
	cmd := fsm.RemoveMember{WorkspaceID: c.Workspace.ID, UserID: target}
	if _, err := a.apply(req.Context(), cmd, apierr.NotFound(apierr.CodeMemberNotFound, "member")); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
}
