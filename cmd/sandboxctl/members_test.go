package main

import (
	"strings"
	"testing"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// TestMembersRolesInvitations runs members, roles, invitations,
// workspaces create/get/use and usage against a real server with two
// accounts: alice makes roles (a bad capability refused), invites bob
// with one, bob lists and accepts with his own token, alice changes and
// clears his role, a role in use cannot be deleted, bob (no manage)
// cannot invite, alice removes him; a new workspace is made, read and
// made the profile's default.
func TestMembersRolesInvitations(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	bob := st.NewAccount(t, s, "bob@example.com", "paid")
	wsctlEnv(t, s.URL(), alice.Token)
	as := func(a *st.Account) { t.Setenv("SANDBOX_TOKEN", a.Token) }

	code, out, errs := ctl(t, "", "roles", "create", "Editors", "--cap", "create,reusables")
	if code != 0 || !strings.Contains(out, "created role Editors (role_") || !strings.Contains(out, "create,reusables") {
		t.Fatalf("roles create: %d %s %s", code, out, errs)
	}
	if code, _, errs := ctl(t, "", "roles", "create", "Pilots", "--cap", "create,fly"); code != 1 || !strings.Contains(errs, "invalid_request") {
		t.Fatalf("a bad capability: %d %s", code, errs)
	}
	code, out, _ = ctl(t, "", "roles", "create", "Viewers", "--json")
	viewers := wsctlJSON(t, "roles create --json", out)["role"].(map[string]any)
	if code != 0 || len(viewers["capabilities"].([]any)) != 0 {
		t.Fatalf("roles create with no capabilities: %d %s", code, out)
	}
	code, out, _ = ctl(t, "", "roles", "list")
	if code != 0 || !strings.Contains(out, "Editors") || !strings.Contains(out, "Viewers") || strings.Contains(out, "Pilots") {
		t.Fatalf("roles list: %d %s", code, out)
	}
	wsctlNarrow(t, "roles list", out)

	code, out, errs = ctl(t, "", "members", "invite", "bob@example.com", "--role", "editors", "--json")
	inv := wsctlJSON(t, "invite --json", out)["invitation"].(map[string]any)
	invID, _ := inv["id"].(string)
	if code != 0 || invID == "" || inv["customRoleId"] == nil || inv["workspaceId"] != alice.Personal {
		t.Fatalf("members invite: %d %s %s", code, out, errs)
	}
	code, out, _ = ctl(t, "", "members", "invitations")
	if code != 0 || !strings.Contains(out, invID) || !strings.Contains(out, "pending") {
		t.Fatalf("members invitations: %d %s", code, out)
	}
	wsctlNarrow(t, "members invitations", out)

	// Bob, with his own token, finds the invitation and accepts it.
	as(bob)
	code, out, _ = ctl(t, "", "invitations", "list")
	if code != 0 || !strings.Contains(out, invID) || !strings.Contains(out, "pending") {
		t.Fatalf("bob: invitations list: %d %s", code, out)
	}
	wsctlNarrow(t, "invitations list", out)
	code, out, errs = ctl(t, "", "invitations", "accept", invID)
	if code != 0 || !strings.Contains(out, "joined workspace "+alice.Personal+" as member") {
		t.Fatalf("bob: invitations accept: %d %s %s", code, out, errs)
	}
	if code, _, errs := ctl(t, "", "invitations", "accept", invID); code != 1 || errs == "" {
		t.Fatalf("bob: accept twice: %d %s", code, errs)
	}
	// Any member lists members; inviting needs manage, which Editors lack.
	if code, out, _ := ctl(t, "", "--workspace", alice.Personal, "members", "list"); code != 0 || !strings.Contains(out, "alice@example.com") {
		t.Fatalf("bob: members list: %d %s", code, out)
	}
	if code, _, errs := ctl(t, "", "--workspace", alice.Personal, "members", "invite", "carol@example.com"); code != 1 ||
		!strings.Contains(errs, "capability_required") {
		t.Fatalf("bob: invite without manage: %d %s", code, errs)
	}
	// Bob's own workspace is the default: the path names it.
	if code, out, _ := ctl(t, "", "members", "list"); code != 0 || !strings.Contains(out, "bob@example.com") || strings.Contains(out, "alice") {
		t.Fatalf("bob: members list of his own workspace: %d %s", code, out)
	}

	as(alice)
	code, out, _ = ctl(t, "", "members", "list")
	if code != 0 || !strings.Contains(out, bob.ID) || !strings.Contains(out, "Editors") || !strings.Contains(out, "owner") {
		t.Fatalf("members list: %d %s", code, out)
	}
	wsctlNarrow(t, "members list", out)
	if code, out, _ := ctl(t, "", "members", "set-role", "bob@example.com", "Viewers"); code != 0 || out != "bob@example.com now holds: -\n" {
		t.Fatalf("members set-role: %d %q", code, out)
	}
	if code, _, errs := ctl(t, "", "roles", "delete", "Viewers"); code != 1 || !strings.Contains(errs, "role_in_use") {
		t.Fatalf("delete a role in use: %d %s", code, errs)
	}
	code, out, _ = ctl(t, "", "members", "clear-role", bob.ID)
	if code != 0 || !strings.Contains(out, "now holds: create,internals,reusables,integrations\n") {
		t.Fatalf("members clear-role: %d %q", code, out)
	}
	code, out, _ = ctl(t, "", "roles", "update", "Editors", "--name", "Authors", "--cap", "create")
	if code != 0 || !strings.Contains(out, "updated role Authors") || !strings.Contains(out, ": create\n") {
		t.Fatalf("roles update: %d %s", code, out)
	}
	if code, out, _ := ctl(t, "", "roles", "delete", viewers["id"].(string)); code != 0 || !strings.Contains(out, "deleted role") {
		t.Fatalf("roles delete: %d %s", code, out)
	}
	if code, out, _ := ctl(t, "", "members", "remove", "bob@example.com"); code != 0 || !strings.Contains(out, "removed bob@example.com") {
		t.Fatalf("members remove: %d %s", code, out)
	}
	code, out, _ = ctl(t, "", "members", "list", "--json")
	if v := wsctlJSON(t, "members list --json", out); code != 0 || len(v["members"].([]any)) != 1 {
		t.Fatalf("members after remove: %d %s", code, out)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"not a member", []string{"members", "set-role", "nobody@example.com", "Authors"}, 2, "not a member"},
		{"no such role", []string{"members", "invite", "carol@example.com", "--role", "Pilots"}, 2, "no role named"},
		{"unknown role id", []string{"members", "set-role", alice.ID, "role_nope"}, 1, "role_not_found"},
		{"bad email", []string{"members", "invite", "not-an-address"}, 1, "invalid_request"},
		{"another workspace", []string{"--workspace", bob.Personal, "members", "list"}, 1, "workspace_not_found"},
		{"unknown role delete", []string{"roles", "delete", "role_nope"}, 1, "role_not_found"},
		{"unknown invitation", []string{"invitations", "accept", "inv_nope"}, 1, "invitation_not_found"},
		{"set-role without a role", []string{"members", "set-role", "bob@example.com"}, 2, "accepts 2 arg"},
		{"invite without an email", []string{"members", "invite"}, 2, "accepts 1 arg"},
		{"update nothing", []string{"roles", "update", "Authors"}, 2, "nothing to change"},
		{"roles create without a name", []string{"roles", "create"}, 2, "accepts 1 arg"},
		{"workspaces create without a name", []string{"workspaces", "create"}, 2, "accepts 1 arg"},
		{"use without a workspace", []string{"workspaces", "use"}, 2, "give a workspace id"},
		{"use with no profile", []string{"workspaces", "use", alice.Personal}, 2, "no profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := ctl(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("%v: exit %d (want %d), stderr %q (want %q), stdout %q", tc.args, code, tc.code, errs, tc.want, out)
			}
		})
	}

	// A new workspace: made, read, made the profile's default.
	code, out, _ = ctl(t, "", "workspaces", "create", "Agency", "--json")
	agency, _ := wsctlJSON(t, "workspaces create", out)["workspace"].(map[string]any)["id"].(string)
	if code != 0 || !strings.HasPrefix(agency, "ws_") {
		t.Fatalf("workspaces create: %d %s", code, out)
	}
	code, out, _ = ctl(t, "", "workspaces", "get", agency)
	if code != 0 || !strings.Contains(out, "Agency") || !strings.Contains(out, "owner") || !strings.Contains(out, "manage") {
		t.Fatalf("workspaces get: %d %s", code, out)
	}
	wsctlNarrow(t, "workspaces get", out)
	t.Setenv("SANDBOX_TOKEN", "")
	t.Setenv("SANDBOX_URL", "")
	if code, _, errs := ctl(t, alice.Token+"\n", "login", "--server", s.URL(), "--with-token"); code != 0 {
		t.Fatalf("login: %d %s", code, errs)
	}
	if code, out, _ := ctl(t, "", "workspaces", "use", agency); code != 0 || !strings.Contains(out, "now works in Agency") {
		t.Fatalf("workspaces use: %d %s", code, out)
	}
	if code, out, _ := ctl(t, "", "workspaces", "get"); code != 0 || !strings.Contains(out, agency) {
		t.Fatalf("workspaces get after use: %d %s", code, out)
	}
	if code, out, _ := ctl(t, "", "roles", "list", "--json"); code != 0 || !strings.Contains(out, `"roles": []`) {
		t.Fatalf("roles of the new default workspace: %d %s", code, out)
	}
	if code, out, _ := ctl(t, "", "workspaces", "use", "--personal"); code != 0 || !strings.Contains(out, alice.Personal) {
		t.Fatalf("workspaces use --personal: %d %s", code, out)
	}
	if code, out, _ := ctl(t, "", "workspaces", "get"); code != 0 || !strings.Contains(out, alice.Personal) {
		t.Fatalf("workspaces get after --personal: %d %s", code, out)
	}

	// Usage: two workspaces owned now.
	code, out, _ = ctl(t, "", "usage")
	if code != 0 || !strings.HasPrefix(out, "plan: paid\n") || !strings.Contains(out, "workspaces owned") {
		t.Fatalf("usage: %d %s", code, out)
	}
	wsctlNarrow(t, "usage", out)
	code, out, _ = ctl(t, "", "usage", "--json")
	u := wsctlJSON(t, "usage --json", out)["usage"].(map[string]any)
	if code != 0 || u["counts"].(map[string]any)["workspaces"] != 2.0 || u["plan"] != "paid" {
		t.Fatalf("usage --json: %d %s", code, out)
	}
}
