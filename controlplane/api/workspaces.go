package api

import (
	"encoding/json"
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/accountspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
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

// workspaceRoutes are workspaces, their members and invitations.
type workspaceRoutes struct {
	*base
	workspaces Workspaces
}

func (a workspaceRoutes) register(r *rest.Router) {
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
			if err := a.workspaces.RevokeInvitation(req.Context(), CallerFrom(req.Context()).Workspace, req.PathValue("invitationId")); err != nil {
				return writeError("", err)
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

func (a *base) workspaceView(ws *state.Workspace, m *state.Member) (WorkspaceView, error) {
	role, err := a.memberRole(m)
	if err != nil {
		return WorkspaceView{}, err
	}
	return WorkspaceView{ID: ws.ID, Name: ws.Name, OwnerUserID: ws.OwnerID, Personal: ws.Personal, Role: m.Role,
		CustomRoleID: optional(m.CustomRoleID), Capabilities: capsOf(m, role), CreatedAt: ws.CreatedAt}, nil
}

func (a *base) memberRole(m *state.Member) (*state.Role, error) {
	if m.CustomRoleID == "" {
		return nil, nil
	}
	return a.store.Role(m.CustomRoleID)
}

func (a *base) memberView(m *state.Member) (MemberView, error) {
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

func (a workspaceRoutes) listWorkspaces(w http.ResponseWriter, req *http.Request) error {
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

func (a workspaceRoutes) createWorkspace(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body CreateWorkspaceRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	var viewErr error
	ans := answer(a.base, req, http.StatusCreated, func(m accountspec.WorkspaceMade) any {
		v, err := a.workspaceView(&m.Workspace, &m.Member)
		viewErr = err
		return workspaceResponse{Workspace: v}
	})
	_, err := a.workspaces.Create(req.Context(), ans, c.Account, body.Name)
	if viewErr != nil {
		return viewErr
	}
	return respond(a.base, w, req, ans, err)
}

func (a workspaceRoutes) listMembers(w http.ResponseWriter, req *http.Request) error {
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

func (a workspaceRoutes) listInvitations(w http.ResponseWriter, req *http.Request) error {
	invs, err := a.store.InvitationsOf(CallerFrom(req.Context()).Workspace.ID)
	return a.invitationList(w, invs, err)
}

func (a workspaceRoutes) invite(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body InviteRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusCreated, func(inv state.Invitation) any {
		return invitationResponse{Invitation: a.invitationView(&inv, inv.CreatedAt)}
	})
	_, err := a.workspaces.Invite(req.Context(), ans, c.Workspace, c.Account, body.Email, body.CustomRoleID)
	return respond(a.base, w, req, ans, err)
}

func (a workspaceRoutes) updateMember(w http.ResponseWriter, req *http.Request) error {
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
	m, err := a.workspaces.SetMemberRole(req.Context(), c.Workspace, req.PathValue("userId"), roleID)
	if err != nil {
		return writeError("", err)
	}
	v, err := a.memberView(m)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, memberResponse{Member: v})
}

func (a workspaceRoutes) removeMember(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	target := req.PathValue("userId")
	if target != c.Account.ID && !c.Caps.Has(access.Manage) {
		return apierr.CapabilityRequired(access.Manage)
	}
	if err := a.workspaces.RemoveMember(req.Context(), c.Workspace, target); err != nil {
		return writeError("", err)
	}
	return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
}
