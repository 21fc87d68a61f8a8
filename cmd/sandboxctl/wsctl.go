package main

// Helpers shared by the templates, launch, library, members, roles,
// invitations, workspaces, webhook and usage families (the ones every
// family uses are in common.go). Their names start with wsctl so they do
// not collide with other families' helpers.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/sandboxd/sandboxd/apiclient"
)

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
	return clip(s, n)
}

// wsctlOnOff renders a boolean field.
func wsctlOnOff(v any) string {
	if b, _ := v.(bool); b {
		return "on"
	}
	return "off"
}

// readSecret reads a secret (an API token, a license key) from the first
// line of stdin, never from the command line where shell history would
// keep it. Typed at a terminal it is prompted for and not echoed.
func readSecret(e *env, what string) (string, error) {
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
		return "", usageError{fmt.Errorf("no %s on stdin (pipe it in: ... < file)", what)}
	}
	return s, nil
}
