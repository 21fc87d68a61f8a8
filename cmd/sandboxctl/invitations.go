package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() { families = append(families, invitationsCmd) }

func invitationsCmd(e *env) *cobra.Command {
	return group("invitations", "Invitations to workspaces addressed to you",
		"  sandboxctl invitations list\n  sandboxctl invitations accept inv_abc",
		invList(e), invAccept(e))
}

func invList(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "Invitations addressed to your account's email", Args: cobra.NoArgs,
		Example: "  sandboxctl invitations list\n  sandboxctl invitations list --json | jq -r '.invitations[].id'",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("GET", "/api/account/invitations", nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, i := range r.List("invitations") {
					rows = append(rows, []string{str(i["id"]), wsctlText(i["workspaceName"], 24), str(i["status"]), ago(i["expiresAt"])})
				}
				e.table([]string{"ID", "WORKSPACE", "STATUS", "EXPIRES"}, rows)
			})
		},
	}
}

func invAccept(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "accept INVITATION", Short: "Accept an invitation and join its workspace", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl invitations accept inv_abc",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			// The answer names the member, not the workspace: read the
			// invitation first so the sentence can say where you joined.
			ws := ""
			if list, err := call(c, "GET", "/api/account/invitations", nil); err == nil {
				for _, i := range list.List("invitations") {
					if str(i["id"]) == args[0] {
						ws = str(i["workspaceId"])
					}
				}
			}
			return e.sendWith(c, "POST", apiPath("/api/account/invitations", args[0], "accept"), nil, func(r *apiclient.Response) {
				if ws == "" {
					fmt.Fprintf(e.stdout, "joined as %s\n", r.Str("member.role"))
					return
				}
				fmt.Fprintf(e.stdout, "joined workspace %s as %s; use it with: sandboxctl --workspace %s ...\n", ws, r.Str("member.role"), ws)
			})
		},
	}
}
