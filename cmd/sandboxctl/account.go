package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

// listCmd is a command that GETs a list and prints chosen fields.
func listCmd(e *env, use, short, path, key string, header []string, fields []string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.send("GET", path, nil, func(r *apiclient.Response) {
				var rows [][]string
				for _, item := range r.List(key) {
					var row []string
					for _, f := range fields {
						if strings.HasSuffix(f, "At") {
							row = append(row, ago(item[f]))
							continue
						}
						row = append(row, str(item[f]))
					}
					rows = append(rows, row)
				}
				e.table(header, rows)
			})
		},
	}
}

// deleteCmd is a command that DELETEs one resource by id.
func deleteCmd(e *env, use, short, path string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.send("DELETE", path+url.PathEscape(args[0]), nil, func(*apiclient.Response) {
				fmt.Fprintf(e.stdout, "deleted %s\n", args[0])
			})
		},
	}
}

func tokensCmd(e *env) *cobra.Command {
	var name string
	var days int
	create := &cobra.Command{
		Use: "create", Short: "Make an API token (the secret is printed once)", Args: cobra.NoArgs,
		Example: "  sandboxctl tokens create --name ci\n  sandboxctl tokens create --name ci --expires 30 --json | jq -r .secret",
		RunE: func(cmd *cobra.Command, _ []string) error {
			body := map[string]any{"name": name}
			if days > 0 {
				body["expiresInDays"] = days
			}
			return e.send("POST", "/api/account/tokens", body, func(r *apiclient.Response) {
				fmt.Fprintf(e.stdout, "token %s (%s); the secret is shown once:\n%s\n", r.Str("token.id"), name, r.Str("secret"))
			}, "Idempotency-Key", e.idempotencyKey())
		},
	}
	create.Flags().StringVar(&name, "name", "sandboxctl", "token name")
	create.Flags().IntVar(&days, "expires", 0, "days until the token stops working (0: never)")
	return group("tokens", "Your API tokens", "",
		example(listCmd(e, "list", "Your API tokens, and what browser logins and connectors were given (never secrets)", "/api/account/tokens", "tokens",
			[]string{"ID", "NAME", "KIND", "CREATED", "EXPIRES"}, []string{"id", "name", "kind", "createdAt", "expiresAt"}),
			"  sandboxctl tokens list\n  sandboxctl tokens list --json | jq -r '.tokens[] | select(.kind == \"oauth\") | .id'"),
		create, example(deleteCmd(e, "delete TOKEN", "Revoke a token (a browser login's too)", "/api/account/tokens/"),
			"  sandboxctl tokens delete tok_0123456789"))
}

func workspacesCmd(e *env) *cobra.Command {
	c := group("workspaces", "Your workspaces", "",
		example(listCmd(e, "list", "The workspaces you belong to", "/api/app/workspaces", "workspaces",
			[]string{"ID", "NAME", "ROLE", "CREATED"}, []string{"id", "name", "role", "createdAt"}),
			"  sandboxctl workspaces list\n  sandboxctl sites list --workspace \"$(sandboxctl workspaces list --json | jq -r '.workspaces[1].id')\""))
	for _, f := range workspaceCommands {
		c.AddCommand(f(e))
	}
	return c
}

// workspaceCommands are `workspaces` subcommands that files add from init.
var workspaceCommands []func(*env) *cobra.Command

func sshKeysCmd(e *env) *cobra.Command {
	return group("ssh-keys", "The SSH keys you sign in to your sites with", "",
		example(listCmd(e, "list", "Your SSH keys", "/api/account/ssh-keys", "sshKeys",
			[]string{"ID", "NAME", "FINGERPRINT", "LAST USED"}, []string{"id", "name", "fingerprint", "lastUsedAt"}),
			"  sandboxctl ssh-keys list"),
		sshKeyAdd(e),
		example(deleteCmd(e, "delete KEY", "Remove an SSH key", "/api/account/ssh-keys/"), "  sandboxctl ssh-keys delete key_0123456789"))
}

func sshKeyAdd(e *env) *cobra.Command {
	var name string
	c := &cobra.Command{
		Use: "add FILE.pub", Short: "Add a public key to sign in to your sites' SSH/SFTP with", Args: cobra.ExactArgs(1),
		Example: "  sandboxctl ssh-keys add ~/.ssh/id_ed25519.pub --name laptop",
		RunE: func(cmd *cobra.Command, args []string) error {
			pub, err := os.ReadFile(args[0])
			if err != nil {
				return usageError{err}
			}
			if strings.Contains(string(pub), "PRIVATE KEY") {
				return usageError{fmt.Errorf("%s is a private key: give the .pub file", args[0])}
			}
			if name == "" {
				name = strings.TrimSuffix(filepath.Base(args[0]), ".pub")
			}
			body := map[string]string{"name": name, "publicKey": strings.TrimSpace(string(pub))}
			return e.send("POST", "/api/account/ssh-keys", body, func(r *apiclient.Response) {
				fmt.Fprintf(e.stdout, "added %s (%s)\n", r.Str("sshKey.id"), r.Str("sshKey.fingerprint"))
			}, "Idempotency-Key", e.idempotencyKey())
		},
	}
	c.Flags().StringVar(&name, "name", "", "a name for the key (default: the file's)")
	return c
}
