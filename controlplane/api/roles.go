package api

import (
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

type rolesResponse struct {
	Roles []RoleView `json:"roles"`
}

type roleResponse struct {
	Role RoleView `json:"role"`
}

// CreateRoleRequest is the body of POST …/roles.
type CreateRoleRequest struct {
	Name         string   `json:"name"`
	Capabilities []string `json:"capabilities" doc:"Any of create, internals, reusables, integrations, manage."`
}

// UpdateRoleRequest is the body of PATCH …/roles/{roleId}; omitted fields stay.
type UpdateRoleRequest struct {
	Name         *string   `json:"name,omitempty"`
	Capabilities *[]string `json:"capabilities,omitempty"`
}

var roleParam = map[string]string{"id": "workspace", "roleId": "role"}

// roleRoutes are a workspace's custom roles.
type roleRoutes struct {
	*base
	workspaces Workspaces
}

func (a roleRoutes) register(r *rest.Router) {
	owner := guard{scope: scopePathWorkspace, ownerOnly: true}
	a.bearer(r, guard{scope: scopePathWorkspace}, rest.Route{Method: "GET", Path: "/api/app/workspaces/{id}/roles", Tag: "workspaces",
		Summary: "List custom roles; any member may.", Params: wsParam, Response: rolesResponse{}, Handler: a.listRoles})
	a.bearer(r, owner, rest.Route{Method: "POST", Path: "/api/app/workspaces/{id}/roles", Tag: "workspaces",
		Summary: "Create a custom role (owner only).", Params: wsParam, Status: http.StatusCreated,
		Request: CreateRoleRequest{}, Response: roleResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodeConflict, apierr.CodePayloadTooLarge}, Handler: a.createRole})
	a.bearer(r, owner, rest.Route{Method: "PATCH", Path: "/api/app/workspaces/{id}/roles/{roleId}", Tag: "workspaces",
		Summary: "Rename a custom role or change its capabilities (owner only).", Params: roleParam,
		Request: UpdateRoleRequest{}, Response: roleResponse{},
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodeRoleNotFound, apierr.CodeConflict}, Handler: a.updateRole})
	a.bearer(r, owner, rest.Route{Method: "DELETE", Path: "/api/app/workspaces/{id}/roles/{roleId}", Tag: "workspaces",
		Summary: "Delete a custom role no member holds (owner only).", Params: roleParam, Response: deletedResponse{},
		Errors: []string{apierr.CodeRoleNotFound, apierr.CodeRoleInUse}, Handler: a.deleteRole})
}

func (a roleRoutes) listRoles(w http.ResponseWriter, req *http.Request) error {
	roles, err := a.store.RolesOf(CallerFrom(req.Context()).Workspace.ID)
	if err != nil {
		return err
	}
	out := make([]RoleView, 0, len(roles))
	for _, r := range roles {
		out = append(out, roleView(r))
	}
	return rest.JSON(w, http.StatusOK, rolesResponse{Roles: out})
}

func (a roleRoutes) createRole(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body CreateRoleRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusCreated, func(r state.Role) any { return roleResponse{Role: roleView(&r)} })
	_, err := a.workspaces.CreateRole(req.Context(), ans, c.Workspace, body.Name, body.Capabilities)
	return respond(a.base, w, req, ans, err)
}

func (a roleRoutes) updateRole(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body UpdateRoleRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	role, err := a.workspaces.UpdateRole(req.Context(), c.Workspace, req.PathValue("roleId"), body.Name, body.Capabilities)
	if err != nil {
		return writeError("", err)
	}
	return rest.JSON(w, http.StatusOK, roleResponse{Role: roleView(role)})
}

func (a roleRoutes) deleteRole(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	if err := a.workspaces.DeleteRole(req.Context(), c.Workspace, req.PathValue("roleId")); err != nil {
		return writeError("", err)
	}
	return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
}
