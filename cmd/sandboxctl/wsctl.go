package main

// Helpers shared by the templates, launch, library, members, roles,
// invitations, workspaces, webhook and usage families. Their names start
// with wsctl so they do not collide with other families' helpers.

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sandboxd/sandboxd/apiclient"
)

// wsctlGroup is a command that only holds subcommands; run bare, it
// prints its help.
func wsctlGroup(use, short, example string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Example: example, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	c.AddCommand(subs...)
	return c
}

// wsctlIdemKey is a fresh Idempotency-Key for one create, so that the
// client's own retries of that request are harmless.
func wsctlIdemKey() string { return "sandboxctl-" + rand.Text() }

// wsctlRun sends one request and prints the answer: the API's JSON with
// --json, else what show writes.
func wsctlRun(e *env, c *apiclient.Client, method, path string, body any, show func(*apiclient.Response), header ...string) error {
	r, err := call(c, method, path, body, header...)
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(r)
	}
	show(r)
	return nil
}

// wsctlWorkspace is the selected workspace: --workspace, else the
// profile's default, else the caller's personal workspace (asked of GET
// /api/account/me). It also selects it on c, so that the header and a
// path naming the workspace agree.
func wsctlWorkspace(c *apiclient.Client) (string, error) {
	if c.Workspace != "" {
		return c.Workspace, nil
	}
	me, err := call(c, "GET", "/api/account/me", nil)
	if err != nil {
		return "", fmt.Errorf("find your personal workspace: %w", err)
	}
	ws := me.Str("user.personalWorkspaceId")
	if ws == "" {
		return "", errors.New("find your personal workspace: GET /api/account/me named none")
	}
	c.Workspace = ws
	return ws, nil
}

// wsctlPath joins path segments, escaping each one.
func wsctlPath(base string, segments ...string) string {
	var b strings.Builder
	b.WriteString(base)
	for _, s := range segments {
		b.WriteString("/")
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// wsctlTrunc shortens s to at most n characters, ending in an ellipsis
// when it cut something; tables stay within 80 columns.
func wsctlTrunc(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// wsctlText is a field of an API object as a table cell: "-" for null
// or empty, truncated to n characters.
func wsctlText(v any, n int) string {
	if v == nil {
		return "-"
	}
	s := fmt.Sprint(v)
	if s == "" {
		return "-"
	}
	return wsctlTrunc(s, n)
}

// wsctlOnOff renders a boolean field.
func wsctlOnOff(v any) string {
	if b, _ := v.(bool); b {
		return "on"
	}
	return "off"
}

// wsctlReadSecret reads a secret (a license key) from the first line of
// stdin, never from the command line where shell history would keep it.
// On a terminal it prompts on stderr first.
func wsctlReadSecret(e *env, what string) (string, error) {
	if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		// Typed at a terminal: not echoed, as a password prompt.
		fmt.Fprintf(e.stderr, "%s (not shown; then Enter): ", what)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(e.stderr)
		if err != nil {
			return "", fmt.Errorf("read the %s: %w", what, err)
		}
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, nil
		}
		return "", usageError{fmt.Errorf("no %s given", what)}
	}
	line, err := bufio.NewReader(e.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the %s from stdin: %w", what, err)
	}
	s := strings.TrimSpace(line)
	if s == "" {
		return "", usageError{fmt.Errorf("no %s on stdin (pipe it in: ... < key.txt)", what)}
	}
	return s, nil
}

// wsctlFields prints an object as a two-column FIELD/VALUE table.
func wsctlFields(e *env, rows [][2]string) {
	out := make([][]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, []string{r[0], r[1]})
	}
	e.table([]string{"FIELD", "VALUE"}, out)
}
