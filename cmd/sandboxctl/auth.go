package main

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func loginCmd(e *env) *cobra.Command {
	var withToken bool
	var name string
	c := &cobra.Command{
		Use:   "login",
		Short: "Keep a server and a token for the next commands",
		Long: `login checks a token against the server and keeps both in a profile
(the file under your config directory is readable by you only).`,
		Example: `  sandboxctl login --server https://sandbox.example.com --with-token < token.txt
  echo "$SANDBOX_TOKEN" | sandboxctl login --server http://127.0.0.1:8080 --with-token --name dev`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !withToken {
				return usageError{errors.New("give a token on stdin with --with-token (make one with POST /api/account/tokens)")}
			}
			if e.server == "" {
				return usageError{errors.New("--server is required")}
			}
			line, err := bufio.NewReader(e.stdin).ReadString('\n')
			tok := strings.TrimSpace(line)
			if tok == "" {
				return usageError{fmt.Errorf("no token on stdin (%v)", err)}
			}
			client := apiclient.New(e.server, tok)
			me, err := call(client, "GET", "/api/account/me", nil)
			if err != nil {
				return err
			}
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if name == "" {
				name = "default"
			}
			cfg.Profiles[name] = &profile{Server: client.Base, Token: tok, Workspace: e.workspace, User: me.Str("user.email")}
			cfg.Current = name
			if err := cfg.save(); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "logged in to %s as %s (profile %s)\n", client.Base, me.Str("user.email"), name)
			return nil
		},
	}
	c.Flags().BoolVar(&withToken, "with-token", false, "read a personal API token from stdin")
	c.Flags().StringVar(&name, "name", "", "profile name (default: default)")
	return c
}

func logoutCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Forget the current profile's token",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			name := e.profile
			if name == "" {
				name = cfg.Current
			}
			if cfg.Profiles[name] == nil {
				return usageError{fmt.Errorf("no profile %q", name)}
			}
			delete(cfg.Profiles, name)
			if cfg.Current == name {
				cfg.Current = ""
			}
			if err := cfg.save(); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "logged out of profile %s\n", name)
			return nil
		},
	}
}

func whoamiCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Who the token speaks for, on which server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := e.client()
			if err != nil {
				return err
			}
			me, err := call(c, "GET", "/api/account/me", nil)
			if err != nil {
				return err
			}
			if e.json {
				return e.printJSON(me)
			}
			fmt.Fprintf(e.stdout, "%s on %s (plan %s, personal workspace %s)\n", me.Str("user.email"), c.Base, me.Str("user.plan"),
				me.Str("user.personalWorkspaceId"))
			return nil
		},
	}
}
