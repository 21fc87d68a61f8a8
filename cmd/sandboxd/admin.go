package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/apiclient"
)

const adminUsage = `Usage: sandboxd admin COMMAND [flags]

Commands:
  create-account --email E --plan free|paid   create an account with its personal workspace
  create-token   --email E [--name N]         create an API token; the secret is the last line
  set-plan       --email E --plan free|paid   change an account's plan
  accounts                                    list accounts
  outbox                                      show mail kept when no SMTP server is set
  cluster                                     show Raft servers and the leader
  remove-server  --node-id ID                 take a (dead) server out of the Raft cluster

Every command finds the server through --data-dir (default ./.data) or --server URL,
and authenticates with the cluster token from --cluster-token, SANDBOXD_CLUSTER_TOKEN
or <data-dir>/cluster-token.
`

type adminClient struct{ *apiclient.Client }

func runAdmin(args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(os.Stderr, adminUsage)
		return errUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "create-account", "create-token", "set-plan", "accounts", "outbox", "cluster", "remove-server":
	default:
		fmt.Fprint(os.Stderr, adminUsage)
		return fmt.Errorf("admin: unknown command %q", cmd)
	}
	fs := flag.NewFlagSet("sandboxd admin "+cmd, flag.ContinueOnError)
	dataDir := fs.String("data-dir", ".data", "data directory of the running server")
	serverURL := fs.String("server", "", "API URL of a server (default: read from <data-dir>/api-url)")
	clusterToken := fs.String("cluster-token", os.Getenv("SANDBOXD_CLUSTER_TOKEN"), "cluster token (default: <data-dir>/cluster-token)")
	email := fs.String("email", "", "account email")
	plan := fs.String("plan", "", "plan: free or paid")
	name := fs.String("name", "", "token name")
	nodeID := fs.String("node-id", "", "server id (remove-server)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := newAdminClient(*dataDir, *serverURL, *clusterToken)
	if err != nil {
		return err
	}
	need := func(flags ...string) error {
		for _, f := range flags {
			if fs.Lookup(f).Value.String() == "" {
				return fmt.Errorf("admin %s: --%s is required", cmd, f)
			}
		}
		return nil
	}
	switch cmd {
	case "create-account":
		if err := need("email", "plan"); err != nil {
			return err
		}
		var res struct{ User map[string]any }
		if err := c.do("POST", "/api/admin/accounts", map[string]string{"email": *email, "plan": *plan}, &res); err != nil {
			return err
		}
		fmt.Fprintf(out, "created account %s (%s) on the %s plan, personal workspace %s\n",
			res.User["email"], res.User["id"], res.User["plan"], res.User["personalWorkspaceId"])
	case "create-token":
		if err := need("email"); err != nil {
			return err
		}
		var res struct {
			Token  map[string]any
			Secret string
		}
		if err := c.do("POST", "/api/admin/tokens", map[string]string{"email": *email, "name": *name}, &res); err != nil {
			return err
		}
		fmt.Fprintf(out, "created token %s for %s; the secret is shown once:\n%s\n", res.Token["id"], *email, res.Secret)
	case "set-plan":
		if err := need("email", "plan"); err != nil {
			return err
		}
		var res struct{ User map[string]any }
		if err := c.do("PUT", "/api/admin/accounts/"+url.PathEscape(*email)+"/plan", map[string]string{"plan": *plan}, &res); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s is now on the %s plan\n", res.User["email"], res.User["plan"])
	case "accounts":
		var res struct{ Users []map[string]any }
		if err := c.do("GET", "/api/admin/accounts", nil, &res); err != nil {
			return err
		}
		for _, u := range res.Users {
			fmt.Fprintf(out, "%s\t%s\t%s\n", u["id"], u["email"], u["plan"])
		}
	case "outbox":
		var res struct {
			Mails []struct {
				ID, To, Subject, Text string
				CreatedAt             time.Time
			}
		}
		if err := c.do("GET", "/api/admin/outbox", nil, &res); err != nil {
			return err
		}
		if len(res.Mails) == 0 {
			fmt.Fprintln(out, "the outbox is empty")
		}
		for _, m := range res.Mails {
			fmt.Fprintf(out, "---- %s\nDate: %s\nTo: %s\nSubject: %s\n\n%s\n", m.ID, m.CreatedAt.Format(time.RFC1123Z), m.To, m.Subject, m.Text)
		}
	case "remove-server":
		if err := need("node-id"); err != nil {
			return err
		}
		var res struct{ Deleted bool }
		if err := c.do("DELETE", "/api/admin/cluster/servers/"+url.PathEscape(*nodeID), nil, &res); err != nil {
			return err
		}
		fmt.Fprintf(out, "removed %s from the cluster\n", *nodeID)
	case "cluster":
		var res struct{ Cluster any }
		if err := c.do("GET", "/api/admin/cluster", nil, &res); err != nil {
			return err
		}
		b, _ := json.MarshalIndent(res.Cluster, "", "  ")
		fmt.Fprintln(out, string(b))
	}
	return nil
}

func newAdminClient(dataDir, serverURL, token string) (*adminClient, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dataDir, name))
		if err != nil {
			return "", fmt.Errorf("no running server found through --data-dir %s (%w); start one or pass --server", dataDir, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	var err error
	if serverURL == "" {
		if serverURL, err = read("api-url"); err != nil {
			return nil, err
		}
	}
	if token == "" {
		if token, err = read("cluster-token"); err != nil {
			return nil, fmt.Errorf("no cluster token: pass --cluster-token or set SANDBOXD_CLUSTER_TOKEN (%w)", err)
		}
	}
	return &adminClient{apiclient.New(serverURL, token)}, nil
}

func (c *adminClient) do(method, path string, body, out any) error {
	r, err := c.Call(context.Background(), method, path, body)
	var ae *apiclient.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case err != nil:
		return fmt.Errorf("reach server %s: %w", c.Base, err)
	}
	if err := r.Decode(out); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	return nil
}
