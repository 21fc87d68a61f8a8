package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxd/sandboxd/apiclient"
)

// fileLike is stdin, stdout or stderr (a file, or a buffer in tests).
type fileLike interface {
	io.ReadWriter
}

// env is one invocation's streams and global flags.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	server         string
	profile        string
	workspace      string
	json           bool
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "sandboxctl",
		Short: "Disposable WordPress sites from the command line",
		Long: `sandboxctl talks to a sandboxd server: log in once, then make, inspect and
remove sites. Every command takes --json for scripts (the API's objects,
unchanged) and answers a person otherwise.

Exit codes: 0 done; 1 the API refused (its error code on stderr) or could
not be reached; 2 the command line was wrong; 130 interrupted (Ctrl-C) during
an upload, which the same command resumes.`,
		Example: `  sandboxctl login --server https://sandbox.example.com --with-token < token.txt
  sandboxctl sites create --name demo --wait
  sandboxctl sites list --json | jq -r '.sites[].url'`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&e.server, "server", "", "API URL (default: the profile's, or SANDBOX_URL)")
	root.PersistentFlags().StringVar(&e.profile, "profile", "", "profile to use (default: the current one)")
	root.PersistentFlags().StringVar(&e.workspace, "workspace", "", "workspace id (default: the profile's, or your personal one)")
	root.PersistentFlags().BoolVar(&e.json, "json", false, "print the API's JSON objects")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(loginCmd(e), logoutCmd(e), whoamiCmd(e), sitesCmd(e), tokensCmd(e), workspacesCmd(e), sshKeysCmd(e), blueprintsCmd(e))
	for _, f := range families {
		root.AddCommand(f(e))
	}
	return root
}

// families are top-level command groups that files add from init, so
// each resource family lives in a file of its own.
var families []func(*env) *cobra.Command

// siteCommands are `sites` subcommands added the same way.
var siteCommands []func(*env) *cobra.Command

// isCobraUsage recognises cobra's own errors about the command line.
func isCobraUsage(err error) bool {
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires ", "invalid argument",
		"flag needs an argument", "required flag"} {
		if strings.HasPrefix(err.Error(), p) {
			return true
		}
	}
	return false
}

// client is the API client of this invocation: the server and token from
// flags, the environment (SANDBOX_URL, SANDBOX_TOKEN) or the profile.
func (e *env) client() (*apiclient.Client, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	name := e.profile
	if name == "" {
		name = cfg.Current
	}
	p := cfg.Profiles[name]
	if e.profile != "" && p == nil {
		return nil, usageError{fmt.Errorf("no profile %q (have: %s)", e.profile, strings.Join(cfg.names(), ", "))}
	}
	server, token, ws := os.Getenv("SANDBOX_URL"), os.Getenv("SANDBOX_TOKEN"), ""
	if p != nil {
		if server == "" {
			server = p.Server
		}
		if token == "" {
			token = p.Token
		}
		ws = p.Workspace
	}
	if e.server != "" {
		server = e.server
	}
	if e.workspace != "" {
		ws = e.workspace
	}
	if server == "" || token == "" {
		return nil, usageError{fmt.Errorf("not logged in: run `sandboxctl login --server URL` (or set SANDBOX_URL and SANDBOX_TOKEN)")}
	}
	c := apiclient.New(server, token)
	c.Workspace = ws
	return c, nil
}

// call sends one request and turns an error envelope into an error.
func call(c *apiclient.Client, method, path string, body any, header ...string) (*apiclient.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return c.Call(ctx, method, path, body, header...)
}

// printJSON writes a response's body as the API sent it.
func (e *env) printJSON(r *apiclient.Response) error {
	var v any
	if err := json.Unmarshal(r.Raw, &v); err != nil {
		_, err = e.stdout.Write(r.Raw)
		return err
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows under a header, aligned.
func (e *env) table(header []string, rows [][]string) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// ago is a time relative to now, as a person reads it.
func ago(v any) string {
	s, _ := v.(string)
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < 0:
		return "in " + (-d).Round(time.Second).String()
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func str(v any) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(v)
}
