package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/apiclient"
	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/sealing"
	"github.com/sandboxd/sandboxd/controlplane/sealingspec"
	"github.com/sandboxd/sandboxd/controlplane/server"
)

const adminUsage = `Usage: sandboxd admin COMMAND [flags]

Commands:
  create-account --email E --plan free|paid   create an account with its personal workspace
  create-token   --email E [--name N]         create an API token; the secret is the last line
  set-plan       --email E --plan free|paid   change an account's plan
  accounts                                    list accounts
  outbox                                      show mail kept when no SMTP server is set
  cluster [--json]                            Raft servers: address, voter, leader, state, last contact
  nodes                                       node agents: status, sites, version
  drain NODE [--wait]                         move every site off a node (it takes no new ones); --wait
                                              follows the moves and prints each one's downtime
  undrain NODE                                let a drained node take sites again
  snapshot SITE                               snapshot a running site now (files and database)
  remove-server  --node-id ID                 take a (dead) server out of the Raft cluster

  join-token create --role agent|edge|server [--name N] [--ttl 24h] [--description D]
                                              a single-use token a new member joins with (last line)
  join-token list | join-token revoke ID      list join tokens; revoke one
  operator-token create --name N              an operator token for this CLI and the admin API (last line)
  operator-token list | operator-token revoke ID
  member list                                 the cluster's servers, agents and edges
  member revoke ROLE/NAME                     refuse every certificate of a member at once
  sealing-key new                             print a new sealing key (no server needed)
  sealing-key ids [--sealing-key-file F]      the ids of the keys in F or SANDBOXD_SEALING_KEY (no server needed)
  sealing-key status                          every server's sealing key ids (the first seals)
  rotate-sealing-key [--dry-run]              seal every secret in the state again with the current (first) key

Every command finds the server through --data-dir (default ./.data) or --server URL,
and authenticates with an operator token from SANDBOXD_OPERATOR_TOKEN, --token-file
or <data-dir>/operator-token (written by the server that bootstrapped the cluster).
`

type adminClient struct{ *apiclient.Client }

func runAdmin(args []string, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(os.Stderr, adminUsage)
		return errUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "create-account", "create-token", "set-plan", "accounts", "outbox", "cluster", "remove-server", "nodes", "drain", "undrain", "snapshot",
		"rotate-sealing-key":
	case "join-token", "operator-token", "member", "sealing-key":
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			fmt.Fprint(os.Stderr, adminUsage)
			return fmt.Errorf("admin %s: which one? (create, list, revoke, new, status)", cmd)
		}
		cmd, args = cmd+" "+args[0], args[1:]
	default:
		fmt.Fprint(os.Stderr, adminUsage)
		return fmt.Errorf("admin: unknown command %q", cmd)
	}
	if cmd == "sealing-key new" {
		fmt.Fprintln(out, server.NewSealingKey())
		return nil
	}
	if cmd == "sealing-key ids" {
		return sealingKeyIDs(args, out)
	}
	fs := newFlagSet("sandboxd admin " + cmd)
	dataDir := fs.String("data-dir", ".data", "data directory of the running server")
	serverURL := fs.String("server", "", "API URL of a server (default: read from <data-dir>/api-url)")
	operatorToken := secretFlag(fs, "token", "SANDBOXD_OPERATOR_TOKEN", "operator token (default: <data-dir>/operator-token)")
	email := fs.String("email", "", "account email")
	plan := fs.String("plan", "", "plan: free or paid")
	name := fs.String("name", "", "token or member name")
	nodeID := fs.String("node-id", "", "server id (remove-server)")
	role := fs.String("role", "", "member role: agent, edge or server")
	ttl := fs.Duration("ttl", 24*time.Hour, "how long the join token can be used")
	description := fs.String("description", "", "what the join token is for")
	wait := fs.Bool("wait", false, "drain: wait until every site has moved, printing each move")
	dryRun := fs.Bool("dry-run", false, "count what a rotation would reseal; change nothing (rotate-sealing-key)")
	asJSON := fs.Bool("json", false, "print the server's answer as JSON, for scripts (cluster)")
	// Positional arguments (an id) may come before or after the flags.
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	tok, err := operatorToken()
	if err != nil {
		return err
	}
	c, err := newAdminClient(*dataDir, *serverURL, tok)
	if err != nil {
		return err
	}
	arg := func(what string) (string, error) {
		if len(pos) != 1 {
			return "", fmt.Errorf("admin %s: give the %s", cmd, what)
		}
		return pos[0], nil
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
	case "join-token create":
		if err := need("role"); err != nil {
			return err
		}
		var res struct {
			JoinToken map[string]any
			Token     string
		}
		body := map[string]any{"role": *role, "name": *name, "ttlMinutes": int(ttl.Minutes()), "description": *description}
		if err := c.do("POST", "/api/admin/join-tokens", body, &res); err != nil {
			return err
		}
		fmt.Fprintf(out, "join token %s for %s, usable once until %s; give it to the new member as SANDBOXD_JOIN_TOKEN or --join-token-file:\n%s\n",
			res.JoinToken["id"], withArticle(*role), res.JoinToken["expiresAt"], res.Token)
	case "join-token list":
		var res struct{ JoinTokens []map[string]any }
		if err := c.do("GET", "/api/admin/join-tokens", nil, &res); err != nil {
			return err
		}
		for _, j := range res.JoinTokens {
			state := "unused"
			switch {
			case j["revokedAt"] != nil:
				state = "revoked"
			case j["usedAt"] != nil:
				state = fmt.Sprintf("used by %v", j["usedBy"])
			}
			fmt.Fprintf(out, "%s\t%s\t%s\texpires %s\n", j["id"], j["role"], state, j["expiresAt"])
		}
	case "join-token revoke", "operator-token revoke", "member revoke":
		id, err := arg("id")
		if err != nil {
			return err
		}
		path := map[string]string{"join-token revoke": "/api/admin/join-tokens/", "operator-token revoke": "/api/admin/operator-tokens/",
			"member revoke": "/api/admin/members/"}[cmd]
		if cmd == "member revoke" {
			r, n, ok := strings.Cut(id, "/")
			if !ok {
				return fmt.Errorf("admin member revoke: give ROLE/NAME, e.g. agent/node-1")
			}
			path += url.PathEscape(r) + "/" + url.PathEscape(n)
		} else {
			path += url.PathEscape(id)
		}
		var res struct{ Deleted bool }
		if err := c.do("DELETE", path, nil, &res); err != nil {
			return err
		}
		fmt.Fprintf(out, "revoked %s\n", id)
	case "operator-token create":
		if err := need("name"); err != nil {
			return err
		}
		var res struct {
			OperatorToken map[string]any
			Token         string
		}
		if err := c.do("POST", "/api/admin/operator-tokens", map[string]string{"name": *name}, &res); err != nil {
			return err
		}
		fmt.Fprintf(out, "operator token %s (%s); the secret is shown once:\n%s\n", res.OperatorToken["id"], *name, res.Token)
	case "operator-token list":
		var res struct{ OperatorTokens []map[string]any }
		if err := c.do("GET", "/api/admin/operator-tokens", nil, &res); err != nil {
			return err
		}
		for _, o := range res.OperatorTokens {
			fmt.Fprintf(out, "%s\t%s\t%s\n", o["id"], o["name"], o["createdAt"])
		}
	case "nodes":
		var res struct {
			Nodes []struct {
				ID, Status, Version, Address string
				Sites                        int
				Sleep                        struct {
					Awake, Dozing, Asleep               int
					AwakeMemoryBytes, DozingMemoryBytes int64
				}
			}
		}
		if err := c.do("GET", "/api/admin/nodes", nil, &res); err != nil {
			return err
		}
		for _, n := range res.Nodes {
			z := n.Sleep
			fmt.Fprintf(out, "%s\t%s\t%s\t%d awake (%s), %d dozing (%s), %d asleep\tversion %s\t%s\n", n.ID, n.Status, count(n.Sites, "site"),
				z.Awake, mib(z.AwakeMemoryBytes), z.Dozing, mib(z.DozingMemoryBytes), z.Asleep, n.Version, n.Address)
		}
	case "drain":
		node, err := arg("node id")
		if err != nil {
			return err
		}
		var res struct{ Drain drainView }
		if err := c.do("POST", "/api/admin/nodes/"+url.PathEscape(node)+"/drain", nil, &res); err != nil {
			return err
		}
		fmt.Fprintf(out, "draining %s: %s to move\n", node, count(res.Drain.Remaining, "site"))
		if !*wait {
			return nil
		}
		return c.followDrain(out, node)
	case "undrain":
		node, err := arg("node id")
		if err != nil {
			return err
		}
		var res struct{ Deleted bool }
		if err := c.do("DELETE", "/api/admin/nodes/"+url.PathEscape(node)+"/drain", nil, &res); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s takes sites again\n", node)
	case "snapshot":
		site, err := arg("site id")
		if err != nil {
			return err
		}
		var res struct{ JobID string }
		if err := c.do("POST", "/api/app/sites/"+url.PathEscape(site)+"/snapshot", nil, &res); err != nil {
			return err
		}
		fmt.Fprintf(out, "snapshot of %s queued: job %s\n", site, res.JobID)
	case "member list":
		var res struct{ Members []map[string]any }
		if err := c.do("GET", "/api/admin/members", nil, &res); err != nil {
			return err
		}
		for _, m := range res.Members {
			state := "member"
			if m["revokedAt"] != nil {
				state = "revoked"
			}
			fmt.Fprintf(out, "%s\t%s\tcertificate expires %s\n", m["id"], state, m["expiresAt"])
		}
	case "sealing-key status":
		var res struct{ Servers []sealingspec.Status }
		if err := c.do("GET", "/api/admin/sealing-key", nil, &res); err != nil {
			return err
		}
		printKeyrings(out, res.Servers)
	case "rotate-sealing-key":
		var res struct{ Rotation sealingspec.Rotation }
		if err := c.do("POST", "/api/admin/sealing-key/rotate", map[string]bool{"dryRun": *dryRun}, &res); err != nil {
			return err
		}
		printRotation(out, res.Rotation)
	case "cluster":
		var res struct{ Cluster api.ClusterStatus }
		if err := c.do("GET", "/api/admin/cluster", nil, &res); err != nil {
			return err
		}
		if *asJSON {
			b, _ := json.MarshalIndent(res.Cluster, "", "  ")
			fmt.Fprintln(out, string(b))
			return nil
		}
		printCluster(out, res.Cluster)
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
		if token, err = read("operator-token"); err != nil {
			return nil, fmt.Errorf("no operator token: set SANDBOXD_OPERATOR_TOKEN or pass --token-file (%w)", err)
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

type drainView struct {
	NodeID    string
	Remaining int
	Moves     []struct {
		SiteID, To, JobID, Status, Error string
		DowntimeMs                       int64
	}
}

// followDrain prints each move of a drain as it ends, until no site is
// left on the node (or a move failed and nothing else is moving).
func (c *adminClient) followDrain(out io.Writer, node string) error {
	printed := map[string]bool{}
	for {
		var res struct{ Drain drainView }
		if err := c.do("GET", "/api/admin/nodes/"+url.PathEscape(node)+"/drain", nil, &res); err != nil {
			return err
		}
		moving, failed := 0, 0
		for _, m := range res.Drain.Moves {
			switch m.Status {
			case "moving":
				moving++
				continue
			case "failed":
				failed++
			}
			if printed[m.JobID] {
				continue
			}
			printed[m.JobID] = true
			if m.Status == "failed" {
				fmt.Fprintf(out, "%s: not moved: %s\n", m.SiteID, m.Error)
			} else {
				fmt.Fprintf(out, "%s: moved to %s, unavailable for %d ms\n", m.SiteID, m.To, m.DowntimeMs)
			}
		}
		if res.Drain.Remaining == 0 {
			fmt.Fprintf(out, "%s is drained\n", node)
			return nil
		}
		if moving == 0 && failed > 0 && failed >= res.Drain.Remaining {
			return fmt.Errorf("%s could not be moved off %s", count(res.Drain.Remaining, "site"), node)
		}
		time.Sleep(time.Second)
	}
}

// printKeyrings shows each server's key ids and whether they open the
// cluster's values.
// printCluster is the Raft cluster as a table, one server a line, each
// with what it says of itself (or why it could not be asked).
func printCluster(out io.Writer, c api.ClusterStatus) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tRAFT ADDRESS\tAPI\tVOTER\tLEADER\tSTATE\tAPPLIED\tLAST CONTACT")
	for _, sv := range c.Servers {
		state, applied, contact := "?", "?", "?"
		if st := sv.Status; st != nil {
			state, applied, contact = st.State, strconv.FormatUint(st.AppliedIndex, 10), "-"
			if st.LastContactSeconds != nil {
				contact = "<1ms ago"
				if d := time.Duration(*st.LastContactSeconds * float64(time.Second)); d >= time.Millisecond {
					contact = d.Round(time.Millisecond).String() + " ago"
				}
			}
		} else if sv.Error != "" {
			contact = "unreachable: " + sv.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sv.ID, sv.RaftAddr, orDash(sv.APIAddr), yesNo(sv.Voter), yesNo(sv.Leader),
			state, applied, contact)
	}
	_ = tw.Flush()
	leader := c.LeaderID
	if leader == "" {
		leader = "none (an election is under way)"
	}
	fmt.Fprintf(out, "leader %s, term %d; answered by %s\n", leader, c.Term, c.NodeID)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printKeyrings(out io.Writer, servers []sealingspec.Status) {
	for _, st := range servers {
		switch {
		case st.Error != "":
			fmt.Fprintf(out, "%s\tnot asked: %s\n", st.Server, st.Error)
		case st.ClusterCA == sealingspec.CAUnreadable:
			fmt.Fprintf(out, "%s\tkeys %s\tCANNOT OPEN the cluster's values: they need key %s\n", st.Server,
				strings.Join(st.KeyIDs, ","), orBefore(st.ClusterCAKeyID))
		default:
			fmt.Fprintf(out, "%s\tkeys %s\tcluster CA key %s, sealed with %s\n", st.Server, strings.Join(st.KeyIDs, ","),
				st.ClusterCA, orBefore(st.ClusterCAKeyID))
		}
	}
}

// printRotation says what a rotation did and what the operator does next.
func printRotation(out io.Writer, r sealingspec.Rotation) {
	if r.DryRun {
		fmt.Fprintf(out, "dry run: %d values would be resealed with key %s; %d already are\n", r.Resealed, r.KeyID, r.AlreadyCurrent)
	} else {
		fmt.Fprintf(out, "resealed %d values with key %s; %d already were\n", r.Resealed, r.KeyID, r.AlreadyCurrent)
	}
	unreadable := 0
	for _, u := range r.Unreadable {
		unreadable += u.Count
		fmt.Fprintf(out, "NOT RESEALED: %d %s values no key of the leader opens (sealed with %s); they were left as they are\n",
			u.Count, u.Kind, orBefore(u.KeyID))
	}
	if r.DryRun {
		return
	}
	if unreadable > 0 {
		fmt.Fprintln(out, "Values above stay unreadable until a server holds the key they name; re-enter those secrets, or delete them.")
	}
	fmt.Fprintf(out, `Next:
  1. Check: run rotate-sealing-key again; it should reseal 0 values.
  2. On every server, one at a time: keep only the first key (id %s) in its sealing key file
     (or SANDBOXD_SEALING_KEY), restart it, and wait for it to rejoin (sandboxd admin cluster) before the next.
  3. sandboxd admin sealing-key status: every server shows the one key %s.
`, r.KeyID, r.KeyID)
}

func orBefore(id string) string {
	if id == "" {
		return "a key from before key ids"
	}
	return id
}

// sealingKeyIDs prints the id of each key of a sealing key setting, so an
// operator can tell which line of a key file a server's status names.
func sealingKeyIDs(args []string, out io.Writer) error {
	fs := newFlagSet("sandboxd admin sealing-key ids")
	setting := secretFlag(fs, "sealing-key", "SANDBOXD_SEALING_KEY", "sealing keys, one per line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	v, err := setting()
	if err != nil {
		return err
	}
	ring, err := sealing.Parse(v)
	if err != nil {
		return err
	}
	for i, id := range ring.IDs() {
		role := "previous: opens only"
		if i == 0 {
			role = "current: seals"
		}
		fmt.Fprintf(out, "%d\t%s\t%s\n", i+1, id, role)
	}
	return nil
}

// withArticle puts "a" or "an" before a role's name.
func withArticle(role string) string {
	if role != "" && strings.ContainsRune("aeiou", rune(role[0])) {
		return "an " + role
	}
	return "a " + role
}

// count says n things, in the singular for one.
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// mib writes a byte count in MiB.
func mib(b int64) string { return fmt.Sprintf("%d MiB", (b+1<<19)>>20) }
