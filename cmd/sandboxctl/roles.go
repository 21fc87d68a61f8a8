package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

// roleCapsFlag is a --cap list as the API takes it: never null, blanks
// dropped. The API checks the names (invalid_request for unknown ones).
func roleCapsFlag(caps []string) []string {
	out := []string{}
	for _, c := range caps {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

func init() { families = append(families, rolesCmd) }

func rolesCmd(e *env) *cobra.Command {
	c := group("roles", "Custom roles of the selected workspace",
		`  sandboxctl roles create Editors --cap create,reusables
  sandboxctl roles list
  sandboxctl members set-role bob@example.com Editors`,
		roleList(e), roleCreate(e), roleUpdate(e), roleDelete(e))
	c.Long = `Custom roles of the selected workspace. A role is a set of capabilities:
create, internals, reusables, integrations, manage. A member with no custom
role holds every capability but manage; the owner holds all. Any member may
list roles; only the owner makes, changes and deletes them.`
	return c
}

func roleList(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "The workspace's custom roles", Args: cobra.NoArgs,
		Example: "  sandboxctl roles list\n  sandboxctl roles list --json",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return memSend(e, "GET", []string{"roles"}, nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, ro := range r.List("roles") {
					rows = append(rows, []string{str(ro["id"]), wsctlText(ro["name"], 18), roleCaps(ro["capabilities"])})
				}
				e.table([]string{"ID", "NAME", "CAPABILITIES"}, rows)
			})
		},
	}
}

// roleCaps renders a capability list: "create,reusables" or "-".
func roleCaps(v any) string {
	list, _ := v.([]any)
	if len(list) == 0 {
		return "-"
	}
	s := make([]string, len(list))
	for i, c := range list {
		s[i] = str(c)
	}
	return strings.Join(s, ",")
}

// rolePrint shows a {role} answer in one line.
func rolePrint(e *env, verb string, r *apiclient.Response) {
	fmt.Fprintf(e.stdout, "%s role %s (%s): %s\n", verb, r.Str("role.name"), r.Str("role.id"), roleCaps(r.Get("role.capabilities")))
}

func roleCreate(e *env) *cobra.Command {
	var caps []string
	cmd := &cobra.Command{
		Use: "create NAME --cap CAP,...", Short: "Make a custom role (owner only)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl roles create Editors --cap create,reusables\n  sandboxctl roles create Viewers   # no capabilities: read only",
		RunE: func(cmd *cobra.Command, args []string) error {
			list := roleCapsFlag(caps)
			return memSend(e, "POST", []string{"roles"}, map[string]any{"name": args[0], "capabilities": list},
				func(r *apiclient.Response) { rolePrint(e, "created", r) }, "Idempotency-Key", e.idempotencyKey())
		},
	}
	cmd.Flags().StringSliceVar(&caps, "cap", nil, "any of create,internals,reusables,integrations,manage")
	return cmd
}

func roleUpdate(e *env) *cobra.Command {
	var caps []string
	var name string
	cmd := &cobra.Command{
		Use: "update ROLE", Short: "Rename a role or replace its capabilities (owner only)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl roles update Editors --cap create,reusables,internals\n  sandboxctl roles update role_abc --name Authors",
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{}
			if cmd.Flags().Changed("name") {
				body["name"] = name
			}
			if cmd.Flags().Changed("cap") {
				body["capabilities"] = roleCapsFlag(caps)
			}
			if len(body) == 0 {
				return usageError{errors.New("nothing to change: give --name or --cap")}
			}
			c, id, err := memResolve(e, memRoleID, args[0])
			if err != nil {
				return err
			}
			return memSendWith(e, c, "PATCH", []string{"roles", id}, body, func(r *apiclient.Response) { rolePrint(e, "updated", r) })
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "new name")
	cmd.Flags().StringSliceVar(&caps, "cap", nil, "replaces the capabilities (--cap= for none)")
	return cmd
}

func roleDelete(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "delete ROLE", Short: "Delete a role no member holds (owner only)", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl roles delete Editors\n  sandboxctl roles delete role_abc",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, id, err := memResolve(e, memRoleID, args[0])
			if err != nil {
				return err
			}
			return memSendWith(e, c, "DELETE", []string{"roles", id}, nil, func(*apiclient.Response) {
				fmt.Fprintf(e.stdout, "deleted role %s\n", args[0])
			})
		},
	}
}
