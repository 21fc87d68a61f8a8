package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestWsctlHelp: every command of the templates, launch, library,
// members, roles, invitations, webhook and usage families, and the
// workspaces subcommands added here, has a short description, examples
// that invoke sandboxctl, and an argument validator; --help prints the
// examples and exits 0.
func TestWsctlHelp(t *testing.T) {
	root := newRoot(&env{})
	mine := map[string]bool{"templates": true, "launch": true, "library": true, "members": true, "roles": true,
		"invitations": true, "webhook": true, "usage": true}
	var check func(c *cobra.Command)
	var n int
	check = func(c *cobra.Command) {
		n++
		if c.Short == "" || c.Args == nil || !strings.Contains(c.Example, "sandboxctl ") {
			t.Errorf("%s: Short %q, Args set %v, Example %q", c.CommandPath(), c.Short, c.Args != nil, c.Example)
		}
		for _, sub := range c.Commands() {
			check(sub)
		}
	}
	for _, c := range root.Commands() {
		switch {
		case mine[c.Name()]:
			check(c)
			delete(mine, c.Name())
		case c.Name() == "workspaces":
			for _, sub := range c.Commands() {
				if sub.Name() != "list" {
					check(sub)
				}
			}
		}
	}
	if len(mine) > 0 || n < 40 {
		t.Fatalf("families not registered: %v (%d commands checked)", mine, n)
	}
	for _, args := range [][]string{{"launch", "set", "--help"}, {"library", "license-key", "set", "--help"}, {"members", "--help"}} {
		code, out, _ := ctl(t, "", args...)
		if code != 0 || !strings.Contains(out, "Examples:") {
			t.Errorf("%v: %d %s", args, code, out)
		}
	}
	if code, out, _ := ctl(t, "", "webhook"); code != 0 || !strings.Contains(out, "rotate-secret") {
		t.Errorf("a bare family prints its help: %d %s", code, out)
	}
}

func TestWsctlTrunc(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a longer name", 8, "a longe…"},
		{"ééééé", 3, "éé…"},
	} {
		if got := clip(tc.in, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "-"}, {"••••••", "••••"}, {"••••••••abcd", "••••abcd"}, {"••abcd", "••abcd"},
	} {
		if got := libHint(tc.in); got != tc.want {
			t.Errorf("libHint(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
