package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sandboxd/sandboxd/apiclient"
)

// env is one invocation's streams and global flags.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	server         string
	profile        string
	workspace      string
	json           bool
	// keys counts the Idempotency-Keys this command made.
	keys int
	// noRetry: the command answers a shell's completion, which must not
	// wait for a control plane that is not there.
	noRetry bool
	// retrying is set once sandboxctl has said that it waits: it says so
	// once per command.
	retrying atomic.Bool
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "sandboxctl",
		Short: "Disposable WordPress sites from the command line",
		Long: `sandboxctl talks to a sandboxd server: log in once, then make, inspect,
change and remove sites, and everything around them. Every command takes
--json for scripts (the API's objects, unchanged) and answers a person
otherwise: tables that fit the terminal, colours only on a terminal (never
with NO_COLOR), relative times.

The server and token come from --server, then SANDBOX_URL and
SANDBOX_TOKEN, then the profile (login keeps one; --profile picks another).
The workspace comes from --workspace, then the profile's (workspaces use),
then your personal one.

While the control plane cannot answer (a leader election: 503, or no
connection), reads and creates are sent again, with the same
Idempotency-Key, so nothing is made twice, for up to SANDBOXCTL_RETRY
(default 10s; 0 never retries). A create whose outcome stays unknown says
so, with its key: the same command run again with
SANDBOXCTL_IDEMPOTENCY_KEY set to it learns the outcome without making
anything twice (CI jobs can set their own key for the same effect).

Exit codes: 0 done; 1 the API refused (its error code on stderr) or could
not be reached; 2 the command line was wrong; 130 interrupted (Ctrl-C) during
an upload, which the same command resumes.`,
		Example: `  sandboxctl login --server https://sandbox.example.com        # in a browser
  sandboxctl login --server https://sandbox.example.com --with-token < token.txt
  sandboxctl sites create --name demo --wait
  sandboxctl sites list --json | jq -r '.sites[].url'
  source <(sandboxctl completion bash)`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.PersistentFlags().StringVar(&e.server, "server", "", "API URL (default: the profile's, or SANDBOX_URL)")
	root.PersistentFlags().StringVar(&e.profile, "profile", "", "profile to use (default: the current one)")
	root.PersistentFlags().StringVar(&e.workspace, "workspace", "", "workspace id (default: the profile's, or your personal one)")
	root.PersistentFlags().BoolVar(&e.json, "json", false, "print the API's JSON objects")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(loginCmd(e), logoutCmd(e), whoamiCmd(e), sitesCmd(e), tokensCmd(e), workspacesCmd(e), sshKeysCmd(e))
	for _, f := range families {
		root.AddCommand(f(e))
	}
	if e.stdout != nil {
		root.SetOut(e.stdout)
		root.SetErr(e.stderr)
	}
	completionExamples(root)
	return root
}

// completionExamples makes cobra's completion commands now (it would
// add them when run) so that they, too, show how to install them.
func completionExamples(root *cobra.Command) {
	root.InitDefaultCompletionCmd("completion")
	examples := map[string]string{
		"completion": "  sandboxctl completion bash > ~/.local/share/bash-completion/completions/sandboxctl\n" +
			"  sandboxctl completion zsh > \"${fpath[1]}/_sandboxctl\"\n  sandboxctl completion fish > ~/.config/fish/completions/sandboxctl.fish",
		"bash":       "  source <(sandboxctl completion bash)\n  sandboxctl completion bash > /etc/bash_completion.d/sandboxctl",
		"zsh":        "  sandboxctl completion zsh > \"${fpath[1]}/_sandboxctl\"   # then start a new shell",
		"fish":       "  sandboxctl completion fish | source\n  sandboxctl completion fish > ~/.config/fish/completions/sandboxctl.fish",
		"powershell": "  sandboxctl completion powershell | Out-String | Invoke-Expression",
	}
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = examples["completion"]
		for _, sub := range c.Commands() {
			sub.Example = examples[sub.Name()]
		}
	}
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
	cfg, name, err := e.profileConfig()
	if err != nil {
		return nil, err
	}
	p := cfg.Profiles[name]
	if e.profile != "" && p == nil {
		return nil, usageError{fmt.Errorf("no profile %q (have: %s)", e.profile, strings.Join(cfg.names(), ", "))}
	}
	server, token := orElse(e.server, os.Getenv("SANDBOX_URL")), os.Getenv("SANDBOX_TOKEN")
	if server == "" && p != nil {
		server = p.Server
	}
	// A profile's token goes to its own server only: with another server
	// named, the profile kept for that one (if any) is used instead.
	if p != nil && server != "" && !sameServer(p.Server, server) {
		if e.profile != "" {
			return nil, usageError{fmt.Errorf("profile %q is for %s, not %s", e.profile, p.Server, server)}
		}
		p = nil
		for _, n := range cfg.names() {
			if q := cfg.Profiles[n]; sameServer(q.Server, server) {
				p = q
				break
			}
		}
	}
	ws := ""
	if p != nil {
		token = orElse(token, p.Token)
		ws = p.Workspace
	}
	ws = orElse(e.workspace, ws)
	switch {
	case server == "":
		return nil, usageError{fmt.Errorf("not logged in: run `sandboxctl login --server URL` (or set SANDBOX_URL and SANDBOX_TOKEN)")}
	case token == "":
		return nil, usageError{fmt.Errorf("no token for %s: run `sandboxctl login --server %s` (or set SANDBOX_TOKEN)", server, server)}
	}
	c := apiclient.New(server, token)
	c.Workspace = ws
	budget, err := retryBudget()
	if err != nil {
		return nil, err
	}
	if e.noRetry {
		budget = 0
	}
	c.HTTP.Transport = &retrying{next: http.DefaultTransport, budget: budget, notice: e.stderr, told: &e.retrying}
	c.HTTP.Timeout += budget // each request's own bound stays whole
	return c, nil
}

// sameServer reports whether two API URLs name the same server.
func sameServer(a, b string) bool {
	norm := func(s string) string { return strings.TrimRight(strings.ToLower(strings.TrimSpace(s)), "/") }
	return norm(a) == norm(b)
}

// invocation uses: --profile, else the current one (which may not exist).
func (e *env) profileConfig() (*config, string, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, "", err
	}
	return cfg, orElse(e.profile, cfg.Current), nil
}

// call sends one request and turns an error envelope into an error.
func call(c *apiclient.Client, method, path string, body any, header ...string) (*apiclient.Response, error) {
	return callCtx(context.Background(), c, method, path, body, header...)
}

// callCtx is call under ctx, for requests that something else (a push's
// signals) may stop; each request still gives up after two minutes.
func callCtx(ctx context.Context, c *apiclient.Client, method, path string, body any, header ...string) (*apiclient.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return c.Call(ctx, method, path, body, header...)
}

// printJSON writes a response's body as the API sent it.
func (e *env) printJSON(r *apiclient.Response) error {
	// Indented, but otherwise the bytes the API sent: key order, numbers
	// and escapes unchanged.
	var b bytes.Buffer
	if err := json.Indent(&b, r.Raw, "", "  "); err != nil {
		b.Reset()
		b.Write(r.Raw)
	}
	if b.Len() > 0 && b.Bytes()[b.Len()-1] != '\n' {
		b.WriteByte('\n')
	}
	_, err := e.stdout.Write(b.Bytes())
	return err
}

// table writes rows under a header, aligned. On a terminal the status
// columns are coloured.
func (e *env) table(header []string, rows [][]string) {
	color := e.colorOut()
	names := header
	all := fitColumns(header, append([][]string{header}, rows...), e.termWidth())
	header, rows = all[0], all[1:]
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	line := func(cells []string, head bool) {
		out := make([]string, len(cells))
		for i, c := range cells {
			out[i] = c
			if color && i < len(names) && statusColumns[names[i]] {
				// Every cell of the column gets an escape sequence of the
				// same length (the header's is "default colour"), so the
				// tabwriter's widths stay right.
				code := "39"
				if !head {
					code = statusColor(c)
				}
				out[i] = paint(true, code, c)
			}
		}
		fmt.Fprintln(tw, strings.Join(out, "\t"))
	}
	line(header, true)
	for _, r := range rows {
		line(r, false)
	}
	tw.Flush()
}

// fitColumns shortens the widest columns' cells (with an ellipsis) until
// the table fits width, never an id column; width 0 means no limit (not
// a terminal).
func fitColumns(header []string, rows [][]string, width int) [][]string {
	if width <= 0 || len(header) == 0 {
		return rows
	}
	widths := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			if i < len(widths) {
				widths[i] = max(widths[i], utf8.RuneCountInString(c))
			}
		}
	}
	total := func() int {
		n := 2 * (len(widths) - 1)
		for _, w := range widths {
			n += w
		}
		return n
	}
	for total() > width {
		// Ids stay whole: a shortened id is of no use to copy.
		widest := -1
		for i, w := range widths {
			if !strings.HasSuffix(header[i], "ID") && (widest < 0 || w > widths[widest]) {
				widest = i
			}
		}
		if widest < 0 || widths[widest] <= 8 {
			break
		}
		widths[widest]--
	}
	out := make([][]string, len(rows))
	for j, r := range rows {
		out[j] = make([]string, len(r))
		for i, c := range r {
			if i < len(widths) && utf8.RuneCountInString(c) > widths[i] {
				c = string([]rune(c)[:widths[i]-1]) + "…"
			}
			out[j][i] = c
		}
	}
	return out
}

// termWidth is stdout's terminal width, or 0 when it is not a terminal.
func (e *env) termWidth() int {
	f, ok := e.stdout.(*os.File)
	if !ok || !isTerminal(f) {
		return 0
	}
	w, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return w
}

// statusColumns are the table columns coloured by their value.
var statusColumns = map[string]bool{"STATUS": true, "STATE": true, "SEVERITY": true}

// statusColor is the ANSI colour of a status: green done, red failed,
// yellow on its way.
func statusColor(s string) string {
	switch s {
	case "ready", "active", "succeeded", "delivered", "ok", "accepted", "info":
		return "32"
	case "failed", "error", "cancelled", "expired", "unavailable", "incompatible":
		return "31"
	case "-", "":
		return "39"
	}
	return "33"
}

// colorOut reports whether stdout is a terminal that takes colours
// (not when NO_COLOR is set or TERM is dumb).
func (e *env) colorOut() bool {
	return isTerminal(e.stdout) && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

// ago is a time relative to now, as a person reads it ("5m ago",
// "in 3d"); "-" for no time.
func ago(v any) string {
	s, _ := v.(string)
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "-"
	}
	d := time.Since(t)
	if d < 0 {
		return "in " + span(-d)
	}
	if d < 5*time.Second {
		return "just now"
	}
	return span(d) + " ago"
}

// span is a duration rounded to its largest unit.
func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// str is a field of an API object as a table cell: "-" for null.
func str(v any) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(v)
}
