// Package access decides what a workspace member may do: the five
// capabilities of the contract and how a member's role maps to them.
package access

import (
	"fmt"
	"slices"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// The capabilities a custom role can grant.
const (
	Create       = "create"
	Internals    = "internals"
	Reusables    = "reusables"
	Integrations = "integrations"
	Manage       = "manage"
)

// All lists every capability in a stable order.
var All = []string{Create, Internals, Reusables, Integrations, Manage}

// Set is a set of capabilities.
type Set map[string]bool

// Has reports whether the set holds c.
func (s Set) Has(c string) bool { return s[c] }

// List returns the set in All's order.
func (s Set) List() []string {
	out := []string{}
	for _, c := range All {
		if s[c] {
			out = append(out, c)
		}
	}
	return out
}

// Of returns a member's capabilities: the owner holds all; a member with a
// custom role holds the role's; a member without one holds all but manage.
// role must be the member's custom role (nil when it has none).
func Of(m *state.Member, role *state.Role) Set {
	s := Set{}
	switch {
	case m == nil:
	case m.Role == state.RoleOwner:
		for _, c := range All {
			s[c] = true
		}
	case m.CustomRoleID != "" && role != nil:
		for _, c := range role.Capabilities {
			s[c] = true
		}
	case m.CustomRoleID != "":
		// The role is gone (cannot happen: roles in use are not deleted);
		// fail closed.
	default:
		for _, c := range All {
			s[c] = c != Manage
		}
	}
	return s
}

// Validate checks a role's capability list: known names, no repeats.
// It returns the list in canonical order.
func Validate(caps []string) ([]string, error) {
	seen := Set{}
	for _, c := range caps {
		if !slices.Contains(All, c) {
			return nil, fmt.Errorf("unknown capability %q (allowed: %v)", c, All)
		}
		if seen[c] {
			return nil, fmt.Errorf("capability %q listed twice", c)
		}
		seen[c] = true
	}
	return seen.List(), nil
}
