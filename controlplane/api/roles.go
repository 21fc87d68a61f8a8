package api

import (
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
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

func (a *API) registerRoles(r *rest.Router) {
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

func (a *API) listRoles(w http.ResponseWriter, req *http.Request) error {
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

func (a *API) createRole(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body CreateRoleRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	name, err := validName("name", body.Name, 64)
	if err != nil {
		return err
	}
	caps, err := validCapabilities(body.Capabilities)
	if err != nil {
		return err
	}
	now := a.now()
	role := state.Role{ID: ids.New(ids.Role), WorkspaceID: c.Workspace.ID, Name: name, Capabilities: caps, CreatedAt: now, UpdatedAt: now}
	return a.commit(w, req, fsm.PutRole{Role: role}, nil, http.StatusCreated, roleResponse{Role: roleView(&role)})
}

func (a *API) roleIn(c *Caller, id string) (*state.Role, error) {
	role, err := a.store.Role(id)
	if err != nil {
		return nil, err
	}
	if role == nil || role.WorkspaceID != c.Workspace.ID {
		return nil, apierr.NotFound(apierr.CodeRoleNotFound, "role")
	}
	return role, nil
}

func (a *API) updateRole(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body UpdateRoleRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	old, err := a.roleIn(c, req.PathValue("roleId"))
	if err != nil {
		return err
	}
	role := *old
	if body.Name != nil {
		if role.Name, err = validName("name", *body.Name, 64); err != nil {
			return err
		}
	}
	if body.Capabilities != nil {
		if role.Capabilities, err = validCapabilities(*body.Capabilities); err != nil {
			return err
		}
	}
	role.UpdatedAt = a.now()
	if _, err := a.apply(req.Context(), fsm.PutRole{Role: role, Update: true}, apierr.NotFound(apierr.CodeRoleNotFound, "role")); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, roleResponse{Role: roleView(&role)})
}

func (a *API) deleteRole(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	cmd := fsm.DeleteRole{WorkspaceID: c.Workspace.ID, RoleID: req.PathValue("roleId"), At: a.now()}
	if _, err := a.apply(req.Context(), cmd, apierr.NotFound(apierr.CodeRoleNotFound, "role")); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
}
