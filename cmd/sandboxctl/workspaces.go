package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func init() {
	workspaceCommands = append(workspaceCommands, wsCreate, wsGet, wsUse)
}

// wsPrint shows a {workspace} answer.
func wsPrint(e *env, r *apiclient.Response) {
	role := r.Str("workspace.role")
	if id := r.Str("workspace.customRoleId"); id != "" {
		role += " (custom role " + id + ")"
	}
	e.fields([][2]string{
		{"id", r.Str("workspace.id")}, {"name", wsctlText(r.Get("workspace.name"), 60)},
		{"personal", fmt.Sprint(r.Get("workspace.personal") == true)}, {"owner", r.Str("workspace.ownerUserId")},
		{"your role", role}, {"capabilities", clip(roleCaps(r.Get("workspace.capabilities")), 60)},
		{"created", ago(r.Get("workspace.createdAt"))},
	})
}

func wsCreate(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "create NAME", Short: "Make a workspace you own", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl workspaces create \"Client X\"\n  sandboxctl workspaces create agency --json | jq -r .workspace.id",
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("POST", "/api/app/workspaces", map[string]string{"name": args[0]}, func(r *apiclient.Response) {
				id := r.Str("workspace.id")
				fmt.Fprintf(e.stdout, "created workspace %s (%s); select it with --workspace %s or: sandboxctl workspaces use %s\n",
					r.Str("workspace.name"), id, id, id)
			}, "Idempotency-Key", e.idempotencyKey())
		},
	}
}

func wsGet(e *env) *cobra.Command {
	return &cobra.Command{
		Use: "get [WORKSPACE]", Short: "One workspace and your role in it (default: the selected one)", Args: cobra.MaximumNArgs(1),
		Example: "  sandboxctl workspaces get\n  sandboxctl workspaces get ws_abc --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				c.Workspace = args[0]
			}
			ws, err := wsctlWorkspace(c)
			if err != nil {
				return err
			}
			return e.sendWith(c, "GET", apiPath("/api/app/workspaces", ws), nil, func(r *apiclient.Response) { wsPrint(e, r) })
		},
	}
}

func wsUse(e *env) *cobra.Command {
	var personal bool
	cmd := &cobra.Command{
		Use: "use [WORKSPACE]", Short: "Make a workspace the profile's default (--personal: back to yours)", Args: cobra.MaximumNArgs(1),
		Example: "  sandboxctl workspaces use ws_abc\n  sandboxctl workspaces use --personal",
		RunE: func(cmd *cobra.Command, args []string) error {
			if personal == (len(args) == 1) {
				return usageError{errors.New("give a workspace id, or --personal")}
			}
			cfg, name, err := e.profileConfig()
			if err != nil {
				return err
			}
			p := cfg.Profiles[name]
			if p == nil {
				return usageError{errors.New("no profile to keep a default in: run `sandboxctl login` (or pass --workspace each time)")}
			}
			c, err := e.client()
			if err != nil {
				return err
			}
			c.Workspace = ""
			if len(args) == 1 {
				c.Workspace = args[0]
			}
			ws, err := wsctlWorkspace(c)
			if err != nil {
				return err
			}
			// Check it is one of yours before keeping it.
			r, err := call(c, "GET", apiPath("/api/app/workspaces", ws), nil)
			if err != nil {
				return err
			}
			p.Workspace = ""
			if !personal {
				p.Workspace = ws
			}
			if err := cfg.save(); err != nil {
				return err
			}
			return e.reply(r, func(r *apiclient.Response) {
				fmt.Fprintf(e.stdout, "profile %s now works in %s (%s)\n", name, r.Str("workspace.name"), ws)
			})
		},
	}
	cmd.Flags().BoolVar(&personal, "personal", false, "go back to your personal workspace")
	return cmd
}
