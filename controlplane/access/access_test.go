package access

import (
	"reflect"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

func TestOf(t *testing.T) {
	role := &state.Role{ID: "role_1", Capabilities: []string{Reusables, Create}}
	cases := []struct {
		name   string
		member *state.Member
		role   *state.Role
		want   []string
	}{
		{"owner holds all", &state.Member{Role: state.RoleOwner}, nil, All},
		{"owner ignores a role", &state.Member{Role: state.RoleOwner, CustomRoleID: "role_1"}, role, All},
		{"member without role: all but manage", &state.Member{Role: state.RoleMember}, nil, []string{Create, Internals, Reusables, Integrations}},
		{"member with role", &state.Member{Role: state.RoleMember, CustomRoleID: "role_1"}, role, []string{Create, Reusables}},
		{"member whose role is missing holds nothing", &state.Member{Role: state.RoleMember, CustomRoleID: "role_gone"}, nil, []string{}},
		{"no membership", nil, nil, []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.member, tc.role).List(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	if got, err := Validate([]string{Manage, Create}); err != nil || !reflect.DeepEqual(got, []string{Create, Manage}) {
		t.Fatalf("got %v %v", got, err)
	}
	for _, bad := range [][]string{{"admin"}, {Create, Create}, {""}} {
		if _, err := Validate(bad); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
}
