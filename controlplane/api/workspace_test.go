package api_test

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/plans"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

func TestWorkspaces(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "free")
	bob := st.NewAccount(t, s, "bob@example.com", "free")

	list := alice.Do("GET", "/api/app/workspaces", nil).Must(t, 200).List("workspaces")
	if len(list) != 1 || list[0]["id"] != alice.Personal || list[0]["personal"] != true || list[0]["role"] != "owner" {
		t.Fatalf("workspaces: %v", list)
	}
	ws := alice.Do("POST", "/api/app/workspaces", map[string]string{"name": "Agency"}).Must(t, 201)
	wsID := ws.Str("workspace.id")
	if !strings.HasPrefix(wsID, "ws_") || ws.Str("workspace.role") != "owner" || len(ws.Get("workspace.capabilities").([]any)) != 5 {
		t.Fatalf("create: %s", ws.Raw)
	}
	alice.Do("GET", "/api/app/workspaces/"+wsID, nil, "X-Service-Workspace", wsID).Must(t, 200)
	if n := len(alice.Do("GET", "/api/app/workspaces", nil).Must(t, 200).List("workspaces")); n != 2 {
		t.Fatalf("want 2 workspaces, got %d", n)
	}
	// free: 2 owned workspaces, personal included.
	lim := alice.Do("POST", "/api/app/workspaces", map[string]string{"name": "Third"}).Must(t, 402)
	if lim.Code() != "plan_limit_reached" || lim.Details()["resource"] != "workspaces" || lim.Details()["limit"] != float64(2) {
		t.Fatalf("limit: %s", lim.Raw)
	}
	for _, body := range []string{`{}`, `{"name":""}`, `{"name":"` + strings.Repeat("x", 101) + `"}`, `{"name":5}`, `{"name":"a","owner":"b"}`} {
		if r := bob.Do("POST", "/api/app/workspaces", body).Must(t, 400); r.Code() != "invalid_request" || r.Details()["field"] == nil {
			t.Fatalf("%s: %s", body, r.Raw)
		}
	}

	t.Run("selection", func(t *testing.T) {
		members := "/api/app/workspaces/" + wsID + "/members"
		// Path and selected workspace must agree.
		if r := alice.Do("GET", members, nil).Must(t, 404); r.Code() != "workspace_not_found" {
			t.Fatal(r.Code())
		}
		alice.In(wsID).Do("GET", members, nil).Must(t, 200)
		alice.Do("GET", members, nil, "X-Service-Organization", wsID).Must(t, 200)
		// Someone else's workspace does not exist for bob.
		if r := bob.In(wsID).Do("GET", members, nil).Must(t, 404); r.Code() != "workspace_not_found" {
			t.Fatal(r.Code())
		}
		if r := bob.In("ws_doesnotexist").Do("GET", "/api/app/jobs/job_x", nil).Must(t, 404); r.Code() != "workspace_not_found" {
			t.Fatal(r.Code())
		}
	})
}

func TestMembersInvitationsRoles(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	bob := st.NewAccount(t, s, "bob@example.com", "free")
	carol := st.NewAccount(t, s, "carol@example.com", "free")
	wsID := alice.Do("POST", "/api/app/workspaces", map[string]string{"name": "Agency"}).Must(t, 201).Str("workspace.id")
	a, b := alice.In(wsID), bob.In(wsID)
	base := "/api/app/workspaces/" + wsID

	// Invite bob by email; the invitation lands in the outbox.
	inv := a.Do("POST", base+"/members", map[string]string{"email": "Bob@Example.com"}).Must(t, 201)
	invID := inv.Str("invitation.id")
	if inv.Str("invitation.status") != "pending" || inv.Str("invitation.email") != "bob@example.com" {
		t.Fatalf("invite: %s", inv.Raw)
	}
	op := st.NewClient(t, s.URL(), s.OperatorToken())
	out := op.Do("GET", "/api/admin/outbox", nil).Must(t, 200).List("mails")
	if len(out) != 1 || out[0]["to"] != "bob@example.com" || !strings.Contains(out[0]["text"].(string), invID) {
		t.Fatalf("outbox: %v", out)
	}
	for _, tc := range []struct{ body, code string }{
		{`{"email":"bob@example.com"}`, "conflict"},     // already invited
		{`{"email":"alice@example.com"}`, "conflict"},   // already a member
		{`{"email":"not-an-email"}`, "invalid_request"}, // bad address
		{`{"email":"Bob <bob@example.com>"}`, "invalid_request"},
		{`{}`, "invalid_request"},
		{`{"email":"x@example.com","customRoleId":"role_nope"}`, "role_not_found"},
	} {
		if r := a.Do("POST", base+"/members", tc.body); r.Code() != tc.code {
			t.Fatalf("%s: got %d %s", tc.body, r.Status, r.Raw)
		}
	}
	if n := len(a.Do("GET", base+"/invitations", nil).Must(t, 200).List("invitations")); n != 1 {
		t.Fatalf("invitations: %d", n)
	}
	// A mistyped invitation is withdrawn; its seat is free again.
	typo := a.Do("POST", base+"/members", map[string]string{"email": "bbo@example.com"}).Must(t, 201).Str("invitation.id")
	a.Do("DELETE", base+"/invitations/"+typo, nil).Must(t, 200)
	if r := a.Do("DELETE", base+"/invitations/"+typo, nil).Must(t, 404); r.Code() != "invitation_not_found" {
		t.Fatal(r.Code())
	}

	// Only the addressee can see and accept it.
	if n := len(carol.Do("GET", "/api/account/invitations", nil).Must(t, 200).List("invitations")); n != 0 {
		t.Fatal("carol sees bob's invitation")
	}
	if r := carol.Do("POST", "/api/account/invitations/"+invID+"/accept", nil).Must(t, 404); r.Code() != "invitation_not_found" {
		t.Fatal(r.Code())
	}
	mine := bob.Do("GET", "/api/account/invitations", nil).Must(t, 200).List("invitations")
	if len(mine) != 1 || mine[0]["workspaceName"] != "Agency" {
		t.Fatalf("bob's invitations: %v", mine)
	}
	m := bob.Do("POST", "/api/account/invitations/"+invID+"/accept", nil).Must(t, 200)
	if m.Str("member.userId") != bob.ID || m.Str("member.role") != "member" {
		t.Fatalf("accept: %s", m.Raw)
	}
	if r := bob.Do("POST", "/api/account/invitations/"+invID+"/accept", nil).Must(t, 409); r.Code() != "conflict" {
		t.Fatal(r.Code())
	}
	if r := a.Do("DELETE", base+"/invitations/"+invID, nil).Must(t, 409); r.Code() != "conflict" {
		t.Fatal("an accepted invitation was withdrawn")
	}

	// A plain member holds everything but manage.
	members := b.Do("GET", base+"/members", nil).Must(t, 200).List("members")
	if len(members) != 2 || members[1]["email"] != "bob@example.com" || len(members[1]["capabilities"].([]any)) != 4 {
		t.Fatalf("members: %v", members)
	}
	if r := b.Do("POST", base+"/members", map[string]string{"email": "carol@example.com"}).Must(t, 403); r.Details()["capability"] != "manage" || r.Code() != "capability_required" {
		t.Fatalf("member invites: %s", r.Raw)
	}
	b.Do("GET", base+"/roles", nil).Must(t, 200)
	if r := b.Do("POST", base+"/roles", map[string]any{"name": "x", "capabilities": []string{}}).Must(t, 403); r.Code() != "owner_required" {
		t.Fatal(r.Code())
	}

	// Roles: owner creates, validation, uniqueness.
	viewer := a.Do("POST", base+"/roles", map[string]any{"name": "Viewer", "capabilities": []string{}}).Must(t, 201)
	roleID := viewer.Str("role.id")
	for _, tc := range []struct{ body, code, field string }{
		{`{"name":"viewer","capabilities":[]}`, "conflict", ""},
		{`{"name":"x","capabilities":["fly"]}`, "invalid_request", "capabilities"},
		{`{"name":"x","capabilities":["create","create"]}`, "invalid_request", "capabilities"},
		{`{"name":"x"}`, "invalid_request", "capabilities"},
		{`{"capabilities":[]}`, "invalid_request", "name"},
	} {
		r := a.Do("POST", base+"/roles", tc.body)
		if r.Code() != tc.code || (tc.field != "" && r.Details()["field"] != tc.field) {
			t.Fatalf("%s: %d %s", tc.body, r.Status, r.Raw)
		}
	}
	manager := a.Do("POST", base+"/roles", map[string]any{"name": "Manager", "capabilities": []string{"manage", "create"}}).Must(t, 201)
	if caps := manager.Get("role.capabilities").([]any); len(caps) != 2 || caps[0] != "create" {
		t.Fatalf("capabilities not canonical: %v", caps)
	}

	// Assign the role: bob loses every capability.
	r := a.Do("PATCH", base+"/members/"+bob.ID, map[string]any{"customRoleId": roleID}).Must(t, 200)
	if r.Str("member.customRoleId") != roleID || len(r.Get("member.capabilities").([]any)) != 0 {
		t.Fatalf("assign: %s", r.Raw)
	}
	if r := b.Do("DELETE", base+"/members/"+alice.ID, nil).Must(t, 403); r.Details()["capability"] != "manage" {
		t.Fatal(r.Raw)
	}
	for _, tc := range []struct{ body, code string }{
		{`{}`, "invalid_request"},
		{`{"customRoleId":""}`, "invalid_request"},
		{`{"customRoleId":5}`, "invalid_request"},
		{`{"customRoleId":null,"role":"owner"}`, "invalid_request"},
		{`{"customRoleId":"role_nope"}`, "role_not_found"},
	} {
		if r := a.Do("PATCH", base+"/members/"+bob.ID, tc.body); r.Code() != tc.code {
			t.Fatalf("%s: %d %s", tc.body, r.Status, r.Raw)
		}
	}
	if r := a.Do("PATCH", base+"/members/"+alice.ID, map[string]any{"customRoleId": roleID}).Must(t, 409); r.Code() != "conflict" {
		t.Fatal("owner's role changed")
	}
	if r := a.Do("PATCH", base+"/members/"+carol.ID, map[string]any{"customRoleId": nil}).Must(t, 404); r.Code() != "member_not_found" {
		t.Fatal(r.Code())
	}

	// A role in use cannot be deleted; clearing it frees it.
	if r := a.Do("DELETE", base+"/roles/"+roleID, nil).Must(t, 409); r.Code() != "role_in_use" {
		t.Fatal(r.Code())
	}
	a.Do("PATCH", base+"/roles/"+roleID, map[string]any{"name": "Read only"}).Must(t, 200)
	if r := a.Do("PATCH", base+"/roles/"+roleID, map[string]any{"name": "manager"}).Must(t, 409); r.Code() != "conflict" {
		t.Fatal(r.Code())
	}
	if r := a.Do("PATCH", base+"/members/"+bob.ID, map[string]any{"customRoleId": nil}).Must(t, 200); r.Get("member.customRoleId") != nil {
		t.Fatal(r.Raw)
	}
	a.Do("DELETE", base+"/roles/"+roleID, nil).Must(t, 200)
	if r := a.Do("DELETE", base+"/roles/"+roleID, nil).Must(t, 404); r.Code() != "role_not_found" {
		t.Fatal(r.Code())
	}

	// A role offered by a pending invitation is in use too.
	invited := a.Do("POST", base+"/members", map[string]any{"email": "dave@example.com", "customRoleId": manager.Str("role.id")}).Must(t, 201)
	if r := a.Do("DELETE", base+"/roles/"+manager.Str("role.id"), nil).Must(t, 409); r.Code() != "role_in_use" {
		t.Fatal(r.Code())
	}
	// dave signs up later and accepts with the role.
	dave := st.NewAccount(t, s, "dave@example.com", "free")
	dm := dave.Do("POST", "/api/account/invitations/"+invited.Str("invitation.id")+"/accept", nil).Must(t, 200)
	if dm.Str("member.customRoleId") != manager.Str("role.id") {
		t.Fatal(dm.Raw)
	}
	// dave manages members but is not the owner.
	dave.In(wsID).Do("DELETE", base+"/members/"+bob.ID, nil).Must(t, 200)
	if r := dave.In(wsID).Do("DELETE", base+"/members/"+alice.ID, nil).Must(t, 409); r.Code() != "conflict" {
		t.Fatal("owner removed")
	}
	// Self-removal needs no capability; afterwards the workspace is gone for dave.
	dave.In(wsID).Do("DELETE", base+"/members/"+dave.ID, nil).Must(t, 200)
	dave.In(wsID).Do("GET", base+"/members", nil).Must(t, 404)
	if r := a.Do("DELETE", base+"/members/"+dave.ID, nil).Must(t, 404); r.Code() != "member_not_found" {
		t.Fatal(r.Code())
	}
}

func TestMemberLimit(t *testing.T) {
	limits := plans.Default()
	limits.Free.MembersPerWorkspace = 2
	s := st.Single(t, st.Options{Plans: &limits})
	alice := st.NewAccount(t, s, "alice@example.com", "free")
	base := "/api/app/workspaces/" + alice.Personal + "/members"
	alice.Do("POST", base, map[string]string{"email": "b@example.com"}).Must(t, 201)
	r := alice.Do("POST", base, map[string]string{"email": "c@example.com"}).Must(t, 402)
	if r.Details()["resource"] != "membersPerWorkspace" || r.Details()["plan"] != "free" {
		t.Fatal(r.Raw)
	}
}
