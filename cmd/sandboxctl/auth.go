package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

func loginCmd(e *env) *cobra.Command {
	var withToken, noBrowser bool
	var name string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "login",
		Short: "Log in to a server (in a browser, or with a token) and keep it in a profile",
		Long: `login gets a token and keeps it, with the server, in a profile (a file
under your config directory that only you can read).

Without --with-token it runs the OAuth flow with PKCE: it prints a page
to open (and opens your browser when there is one), you sign in and
approve there, and the browser hands the code back to sandboxctl on this
computer's loopback address. The token it gets acts as you, like a
personal token; it is listed as "sandboxctl on HOST" in
` + "`sandboxctl tokens list`" + ` and can be revoked there.

With --with-token it reads a personal API token from stdin (as gh does),
so the token never appears in your shell history or in ps.`,
		Example: `  sandboxctl login --server https://sandbox.example.com
  sandboxctl login --server https://sandbox.example.com --no-browser   # on a remote shell
  sandboxctl login --server https://sandbox.example.com --with-token < token.txt
  echo "$SANDBOX_TOKEN" | sandboxctl login --server http://127.0.0.1:8080 --with-token --name dev`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			server := e.server
			if server == "" {
				server = os.Getenv("SANDBOX_URL")
			}
			if server == "" {
				return usageError{errors.New("--server is required (or SANDBOX_URL)")}
			}
			var tok string
			if withToken {
				var err error
				if tok, err = readSecret(e, "API token"); err != nil {
					return err
				}
			} else {
				open := openBrowser
				if noBrowser {
					open = nil
				}
				b := &browserLogin{server: server, out: e.stderr, open: open, timeout: timeout, clientTag: clientTag()}
				var err error
				if tok, err = b.run(cmd.Context()); err != nil {
					return err
				}
			}
			client := apiclient.New(server, tok)
			origin := ""
			if !withToken {
				origin = originBrowser
			}
			// A token this login made and cannot keep is revoked, not left
			// working with nobody holding it.
			abandon := func(err error) error {
				if origin == originBrowser {
					revokeCurrent(client)
				}
				return err
			}
			me, err := call(client, "GET", "/api/account/me", nil)
			if err != nil {
				return abandon(err)
			}
			cfg, err := loadConfig()
			if err != nil {
				return abandon(err)
			}
			name = orElse(name, "default")
			old := cfg.Profiles[name]
			cfg.Profiles[name] = &profile{Server: client.Base, Token: tok, Workspace: e.workspace, User: me.Str("user.email"), Origin: origin}
			cfg.Current = name
			if err := cfg.save(); err != nil {
				return abandon(err)
			}
			// The token an earlier browser login kept in this profile goes.
			if old != nil && old.Origin == originBrowser && old.Token != tok {
				if err := revokeCurrent(apiclient.New(old.Server, old.Token)); err != nil {
					fmt.Fprintf(e.stderr, "note: the profile's earlier login token could not be revoked (%v); see sandboxctl tokens list\n", err)
				}
			}
			fmt.Fprintf(e.stdout, "logged in to %s as %s (profile %s)\n", client.Base, me.Str("user.email"), name)
			return nil
		},
	}
	c.Flags().BoolVar(&withToken, "with-token", false, "read a personal API token from stdin instead of using a browser")
	c.Flags().BoolVar(&noBrowser, "no-browser", false, "print the login page's address without opening a browser")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the browser")
	c.Flags().StringVar(&name, "name", "", "profile name (default: default)")
	return c
}

func logoutCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "logout",
		Short:   "Forget the current profile (and revoke the token a browser login made)",
		Example: "  sandboxctl logout\n  sandboxctl logout --profile staging",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, name, err := e.profileConfig()
			if err != nil {
				return err
			}
			if cfg.Profiles[name] == nil {
				return usageError{fmt.Errorf("no profile %q", name)}
			}
			p := cfg.Profiles[name]
			delete(cfg.Profiles, name)
			if cfg.Current == name {
				cfg.Current = ""
			}
			if err := cfg.save(); err != nil {
				return err
			}
			// A browser login's token was made for this profile: it is
			// revoked. A token given with --with-token is the person's
			// own and may be used elsewhere: it is only forgotten here.
			if p.Origin == originBrowser {
				if err := revokeCurrent(apiclient.New(p.Server, p.Token)); err != nil {
					fmt.Fprintf(e.stderr, "note: forgotten here, but not revoked on %s (%v): revoke it with sandboxctl tokens delete\n", p.Server, err)
				} else {
					fmt.Fprintf(e.stdout, "revoked the login's token on %s\n", p.Server)
				}
			}
			fmt.Fprintf(e.stdout, "logged out of profile %s\n", name)
			return nil
		},
	}
}

func whoamiCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "whoami",
		Short:   "Who the token speaks for, on which server",
		Example: "  sandboxctl whoami\n  sandboxctl whoami --json | jq -r .user.email",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, me, err := e.request("GET", "/api/account/me", nil)
			if err != nil {
				return err
			}
			return e.reply(me, func(me *apiclient.Response) {
				fmt.Fprintf(e.stdout, "%s on %s (plan %s, personal workspace %s)\n", me.Str("user.email"), c.Base, me.Str("user.plan"),
					me.Str("user.personalWorkspaceId"))
			})
		},
	}
}

// originBrowser marks a profile whose token a browser login made.
const originBrowser = "browser"

// revokeCurrent revokes the token c speaks with.
func revokeCurrent(c *apiclient.Client) error {
	r, err := call(c, "GET", "/api/account/tokens", nil)
	if err != nil {
		return err
	}
	for _, t := range r.List("tokens") {
		if t["current"] == true {
			_, err := call(c, "DELETE", "/api/account/tokens/"+url.PathEscape(str(t["id"])), nil)
			return err
		}
	}
	return errors.New("the server does not list the token")
}
