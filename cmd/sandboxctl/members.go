package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() { families = append(families, membersCmd) }

func membersCmd(e *env) *cobra.Command {
	return group("members", "The selected workspace's members and invitations",
		`  sandboxctl members list
  sandboxctl members invite bob@example.com --role Editors
  sandboxctl --workspace ws_abc members set-role bob@example.com Editors`,
		memList(e), memInvite(e), memSetRole(e), memClearRole(e), memRemove(e), memInvitations(e), memWithdraw(e))
}

// memWorkspacePath is /api/app/workspaces/{ws}/rest for the selected
// workspace (which the API requires the path to name).
func memWorkspacePath(c *apiclient.Client, rest ...string) (string, error) {
	ws, err := wsctlWorkspace(c)
	if err != nil {
		return "", err
	}
	return apiPath("/api/app/workspaces", append([]string{ws}, rest...)...), nil
}

// memSend sends one request to a resource of the selected workspace
// (rest as memWorkspacePath takes it) as this invocation's caller and
// prints its answer (see reply).
func memSend(e *env, method string, rest []string, body any, human func(*apiclient.Response), header ...string) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	return memSendWith(e, c, method, rest, body, human, header...)
}

// memSendWith is memSend on a client the command already holds.
func memSendWith(e *env, c *apiclient.Client, method string, rest []string, body any, human func(*apiclient.Response), header ...string) error {
	p, err := memWorkspacePath(c, rest...)
	if err != nil {
		return err
	}
	return e.sendWith(c, method, p, body, human, header...)
}

// memResolve is the invocation's client and what resolve (memUserID,
// memRoleID) makes of name with it: the id a command sends.
func memResolve(e *env, resolve func(*apiclient.Client, string) (string, error), name string) (*apiclient.Client, string, error) {
	c, err := e.client()
	if err != nil {
		return nil, "", err
	}
	id, err := resolve(c, name)
	if err != nil {
		return nil, "", err
	}
	return c, id, nil
}

// memUserID resolves a member given by user id or by email address.
func memUserID(c *apiclient.Client, who string) (string, error) {
	if !strings.Contains(who, "@") {
		return who, nil
	}
	p, err := memWorkspacePath(c, "members")
	if err != nil {
		return "", err
	}
	r, err := call(c, "GET", p, nil)
	if err != nil {
		return "", fmt.Errorf("find member %s: %w", who, err)
	}
	for _, m := range r.List("members") {
		if strings.EqualFold(str(m["email"]), who) {
			return str(m["userId"]), nil
		}
	}
	return "", usageError{fmt.Errorf("%s is not a member of workspace %s", who, c.Workspace)}
}

// memRoles is the selected workspace's custom roles.
func memRoles(c *apiclient.Client) ([]map[string]any, error) {
	p, err := memWorkspacePath(c, "roles")
	if err != nil {
		return nil, err
	}
	r, err := call(c, "GET", p, nil)
	if err != nil {
		return nil, fmt.Errorf("list roles: %w", err)
	}
	return r.List("roles"), nil
}

// memRoleID resolves a custom role given by id or by name.
func memRoleID(c *apiclient.Client, role string) (string, error) {
	if strings.HasPrefix(role, "role_") {
		return role, nil
	}
	roles, err := memRoles(c)
	if err != nil {
		return "", err
	}
	for _, r := range roles {
		if strings.EqualFold(str(r["name"]), role) {
			return str(r["id"]), nil
		}
	}
	return "", usageError{fmt.Errorf("no role named %q in workspace %s (see: sandboxctl roles list)", role, c.Workspace)}
}

func memList(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "The workspace's members and their roles", Args: cobra.NoArgs,
		Example: "  sandboxctl members list\n  sandboxctl --workspace ws_abc members list --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			return memSendWith(e, c, "GET", []string{"members"}, nil, func(r *apiclient.Response) {
				names := map[string]string{}
				if roles, err := memRoles(c); err == nil {
					for _, ro := range roles {
						names[str(ro["id"])] = str(ro["name"])
					}
				}
				var rows [][]string
				for _, m := range r.List("members") {
					role := str(m["role"])
					if id, ok := m["customRoleId"].(string); ok && role != "owner" {
						role = id
						if n := names[id]; n != "" {
							role = n
						}
					}
					rows = append(rows, []string{str(m["userId"]), wsctlText(m["email"], 24), clip(role, 14), ago(m["joinedAt"])})
				}
				e.table([]string{"USER", "EMAIL", "ROLE", "JOINED"}, rows)
			})
		},
	}
}

func memInvite(e *env) *cobra.Command {
	var role string
	cmd := &cobra.Command{
		Use: "invite EMAIL", Short: "Invite someone by email to the workspace",
		Long: "Invite someone by email; they accept with `sandboxctl invitations accept ID`.", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl members invite bob@example.com\n  sandboxctl members invite bob@example.com --role Editors",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			p, err := memWorkspacePath(c, "members")
			if err != nil {
				return err
			}
			body := map[string]any{"email": args[0]}
			if role != "" {
				if body["customRoleId"], err = memRoleID(c, role); err != nil {
					return err
				}
			}
			return e.sendWith(c, "POST", p, body, func(r *apiclient.Response) {
				id := r.Str("invitation.id")
				fmt.Fprintf(e.stdout, "invited %s to %s (invitation %s, expires %s)\nthey accept with: sandboxctl invitations accept %s\n",
					r.Str("invitation.email"), c.Workspace, id, ago(r.Get("invitation.expiresAt")), id)
			}, "Idempotency-Key", e.idempotencyKey())
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "custom role, id or name (default: all but manage)")
	return cmd
}

// memPatchRole sets (roleID) or clears (nil) a member's custom role.
func memPatchRole(e *env, who string, role *string) error {
	c, user, err := memResolve(e, memUserID, who)
	if err != nil {
		return err
	}
	body := map[string]any{"customRoleId": nil}
	if role != nil {
		id, err := memRoleID(c, *role)
		if err != nil {
			return err
		}
		body["customRoleId"] = id
	}
	return memSendWith(e, c, "PATCH", []string{"members", user}, body, func(r *apiclient.Response) {
		fmt.Fprintf(e.stdout, "%s now holds: %s\n", r.Str("member.email"), roleCaps(r.Get("member.capabilities")))
	})
}

func memSetRole(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "set-role USER ROLE", Short: "Give a member a custom role (USER: id or email; ROLE: id or name)", Args: cobra.ExactArgs(2),
		Example: "  sandboxctl members set-role bob@example.com Editors\n  sandboxctl members set-role usr_abc role_def",
		RunE: func(cmd *cobra.Command, args []string) error {
			return memPatchRole(e, args[0], &args[1])
		},
	}
}

func memClearRole(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "clear-role USER", Short: "Clear a member's custom role (back to every capability but manage)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl members clear-role bob@example.com",
		RunE: func(cmd *cobra.Command, args []string) error {
			return memPatchRole(e, args[0], nil)
		},
	}
}

func memRemove(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "remove USER", Short: "Remove a member (yourself, or anyone with manage)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl members remove bob@example.com\n  sandboxctl members remove usr_abc --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, user, err := memResolve(e, memUserID, args[0])
			if err != nil {
				return err
			}
			return memSendWith(e, c, "DELETE", []string{"members", user}, nil, func(*apiclient.Response) {
				fmt.Fprintf(e.stdout, "removed %s from %s\n", args[0], c.Workspace)
			})
		},
	}
}

func memInvitations(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "invitations", Short: "The invitations the workspace sent (needs manage)", Args: cobra.NoArgs,
		Example: "  sandboxctl members invitations\n  sandboxctl members invitations --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return memSend(e, "GET", []string{"invitations"}, nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, i := range r.List("invitations") {
					rows = append(rows, []string{str(i["id"]), wsctlText(i["email"], 28), str(i["status"]), ago(i["expiresAt"])})
				}
				e.table([]string{"ID", "EMAIL", "STATUS", "EXPIRES"}, rows)
			})
		},
	}
}

func memWithdraw(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "withdraw INVITATION", Short: "Withdraw a pending invitation", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl members withdraw inv_abc",
		RunE: func(cmd *cobra.Command, args []string) error {
			return memSend(e, "DELETE", []string{"invitations", args[0]}, nil, func(*apiclient.Response) {
				fmt.Fprintf(e.stdout, "withdrew invitation %s\n", args[0])
			})
		},
	}
}
