package main

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"
)

// listCmd is a command that GETs a list and prints chosen fields.
func listCmd(e *env, use, short, path, key string, header []string, fields []string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			r, err := call(c, "GET", path, nil)
			if err != nil {
				return err
			}
			if e.json {
				return e.printJSON(r)
			}
			var rows [][]string
			for _, item := range r.List(key) {
				var row []string
				for _, f := range fields {
					if f == "createdAt" || f == "lastUsedAt" {
						row = append(row, ago(item[f]))
						continue
					}
					row = append(row, str(item[f]))
				}
				rows = append(rows, row)
			}
			e.table(header, rows)
			return nil
		},
	}
}

// deleteCmd is a command that DELETEs one resource by id.
func deleteCmd(e *env, use, short, path string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			r, err := call(c, "DELETE", path+url.PathEscape(args[0]), nil)
			if err != nil {
				return err
			}
			if e.json {
				return e.printJSON(r)
			}
			fmt.Fprintf(e.stdout, "deleted %s\n", args[0])
			return nil
		},
	}
}

func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	c.AddCommand(subs...)
	return c
}

func tokensCmd(e *env) *cobra.Command {
	var name string
	create := &cobra.Command{
		Use: "create", Short: "Make an API token (the secret is printed once)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			r, err := call(c, "POST", "/api/account/tokens", map[string]string{"name": name})
			if err != nil {
				return err
			}
			if e.json {
				return e.printJSON(r)
			}
			fmt.Fprintf(e.stdout, "token %s (%s); the secret is shown once:\n%s\n", r.Str("token.id"), name, r.Str("secret"))
			return nil
		},
	}
	create.Flags().StringVar(&name, "name", "sandboxctl", "token name")
	return group("tokens", "Your API tokens",
		listCmd(e, "list", "Your API tokens (never their secrets)", "/api/account/tokens", "tokens",
			[]string{"ID", "NAME", "CREATED", "LAST USED"}, []string{"id", "name", "createdAt", "lastUsedAt"}),
		create, deleteCmd(e, "delete TOKEN", "Revoke a token", "/api/account/tokens/"))
}

func workspacesCmd(e *env) *cobra.Command {
	c := group("workspaces", "Your workspaces",
		listCmd(e, "list", "The workspaces you belong to", "/api/app/workspaces", "workspaces",
			[]string{"ID", "NAME", "CREATED"}, []string{"id", "name", "createdAt"}))
	for _, f := range workspaceCommands {
		c.AddCommand(f(e))
	}
	return c
}

// workspaceCommands are `workspaces` subcommands that files add from init.
var workspaceCommands []func(*env) *cobra.Command

func sshKeysCmd(e *env) *cobra.Command {
	return group("ssh-keys", "The SSH keys you sign in to your sites with",
		listCmd(e, "list", "Your SSH keys", "/api/account/ssh-keys", "sshKeys",
			[]string{"ID", "NAME", "FINGERPRINT", "LAST USED"}, []string{"id", "name", "fingerprint", "lastUsedAt"}),
		deleteCmd(e, "delete KEY", "Remove an SSH key", "/api/account/ssh-keys/"))
}
