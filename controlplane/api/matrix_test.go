package api_test

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// sampleBodies is a valid body for every route that takes one. The matrix
// fails for a new write route missing here, so it cannot be forgotten.
var sampleBodies = map[string]string{
	"POST /api/account/tokens":                        `{"name":"matrix"}`,
	"POST /api/app/workspaces":                        `{"name":"matrix"}`,
	"POST /api/app/sites":                             `{"name":"matrix"}`,
	"PUT /api/app/sites/{id}/php-config":              `{"settings":{"memory_limit":"128M"}}`,
	"PUT /api/app/sites/{id}/php-version":             `{"phpVersion":"7.4"}`,
	"PUT /api/app/sites/{id}/debug":                   `{"wpDebug":true}`,
	"POST /api/app/workspaces/{id}/members":           `{"email":"matrix@example.com"}`,
	"PATCH /api/app/workspaces/{id}/members/{userId}": `{"customRoleId":null}`,
	"POST /api/app/workspaces/{id}/roles":             `{"name":"matrix","capabilities":[]}`,
	"PATCH /api/app/workspaces/{id}/roles/{roleId}":   `{"name":"matrix2"}`,
	"POST /api/admin/accounts":                        `{"email":"m@example.com","plan":"free"}`,
	"PUT /api/admin/accounts/{email}/plan":            `{"plan":"paid"}`,
	"POST /api/admin/tokens":                          `{"email":"m@example.com"}`,
	"POST /api/app/sites/{id}/files/{op}":             `{"contentBase64":""}`,
	"POST /api/app/plugin-library/github":             `{"repository":"acme/widgets"}`,
	"PUT /api/app/plugin-library/{id}/license-key":    `{"licenseKey":"matrix-key-000"}`,
	"POST /api/app/sites/{id}/plugins":                `{"libraryPlugin":"nope"}`,
	"POST /internal/cluster/join":                     `{"id":"x","raftAddr":"127.0.0.1:1","apiAddr":"http://127.0.0.1:1"}`,
}

// fixture is one workspace's resources, one id per parameter kind.
type fixture struct {
	ids map[string]string
}

func newJob(t *testing.T, s *server.Server, workspaceID string) string {
	t.Helper()
	return newJobOfType(t, s, "test_noop", workspaceID)
}

// newJobOfType queues a job of any type directly through Raft, so the
// matrix has a job in each workspace without running a site.
func newJobOfType(t *testing.T, s *server.Server, jobType, workspaceID string) string {
	t.Helper()
	j, err := jobs.New(jobType, workspaceID, "", nil, time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Node().Apply(context.Background(), fsm.CreateJob{Job: j}); err != nil {
		t.Fatal(err)
	}
	return j.ID
}

// setUp builds an owner's workspace with a member, a role, a token, a job
// and an invitation addressed to invitee.
func setUp(t *testing.T, s *server.Server, owner *st.Account, invitee string) fixture {
	t.Helper()
	c := owner.In(owner.Personal)
	base := "/api/app/workspaces/" + owner.Personal
	role := c.Do("POST", base+"/roles", map[string]any{"name": "r-" + owner.ID, "capabilities": []string{}}).Must(t, 201).Str("role.id")
	inv := c.Do("POST", base+"/members", map[string]any{"email": invitee}).Must(t, 201).Str("invitation.id")
	tokens := c.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens")
	site := c.Do("POST", "/api/app/sites", map[string]any{"name": "fixture"}).Must(t, 202).Str("site.id")
	return fixture{ids: map[string]string{
		"site":       site,
		"workspace":  owner.Personal,
		"member":     owner.ID,
		"role":       role,
		"token":      tokens[0]["id"].(string),
		"job":        newJob(t, s, owner.Personal),
		"invitation": inv,
		"fileop":     "write",
		"library":    newLibraryEntry(t, s, owner.Personal),
	}}
}

// newLibraryEntry adds a Library entry directly through Raft (its ZIP is
// not needed by the matrix).
func newLibraryEntry(t *testing.T, s *server.Server, workspaceID string) string {
	t.Helper()
	e := state.LibraryEntry{ID: ids.New("lib"), WorkspaceID: workspaceID, Slug: "matrix", Name: "Matrix", Source: "upload",
		Kind: "plugin", Filename: "matrix.zip", BlobSHA256: strings.Repeat("0", 64), CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if _, err := s.Node().Apply(context.Background(), fsm.PutLibraryEntry{Entry: e}); err != nil {
		t.Fatal(err)
	}
	return e.ID
}

// fakeNode registers a node with a PHP 8.2 image that answers nothing:
// sites can be placed (their jobs then fail), which is all the matrix needs.
func fakeNode(t *testing.T, s *server.Server) {
	t.Helper()
	n := state.Node{ID: "node-fake", Address: "http://127.0.0.1:1", BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}}
	if _, err := s.Node().Apply(context.Background(), fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
}

var paramRE = regexp.MustCompile(`\{([A-Za-z]+)\}`)

func fill(t *testing.T, rt rest.Route, pick func(kind string) string) string {
	t.Helper()
	return paramRE.ReplaceAllStringFunc(rt.Path, func(m string) string {
		name := m[1 : len(m)-1]
		kind, ok := rt.Params[name]
		if !ok {
			t.Fatalf("%s: path parameter %q has no kind in Route.Params", rt.Pattern(), name)
		}
		id := pick(kind)
		if id == "" {
			t.Fatalf("%s: no fixture for parameter kind %q; add one to setUp", rt.Pattern(), kind)
		}
		return id
	})
}

// TestCrossWorkspaceMatrix calls every route that takes an id with ids
// of another workspace (→ 404), and every capability-guarded route as a
// member whose role lacks the capability (→ 403). It walks the router's
// own route list, so new routes are covered without editing this test.
func TestCrossWorkspaceMatrix(t *testing.T) {
	s := st.Single(t, st.Options{})
	fakeNode(t, s)
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	mallory := st.NewAccount(t, s, "mallory@example.com", "paid")
	powerless := st.NewAccount(t, s, "powerless@example.com", "paid")
	alices := setUp(t, s, alice, "powerless@example.com")
	mallorys := setUp(t, s, mallory, "mallory-friend@example.com")

	// powerless joins alice's workspace with a role holding nothing.
	powerless.Do("POST", "/api/account/invitations/"+alices.ids["invitation"]+"/accept", nil).Must(t, 200)
	alice.Do("PATCH", "/api/app/workspaces/"+alice.Personal+"/members/"+powerless.ID,
		map[string]any{"customRoleId": alices.ids["role"]}).Must(t, 200)

	routes := s.Router().Routes()
	if len(routes) < 20 {
		t.Fatalf("only %d routes registered", len(routes))
	}
	for _, rt := range routes {
		body, hasBody := sampleBodies[rt.Pattern()]
		if rt.Request != nil && !hasBody {
			t.Fatalf("%s takes a body: add a sample to sampleBodies", rt.Pattern())
		}
		var payload any
		if hasBody {
			payload = body
		}

		switch rt.Security {
		case "cluster":
			t.Run("user token refused/"+rt.Pattern(), func(t *testing.T) {
				path := fill(t, rt, func(string) string { return "x" })
				if r := alice.Do(rt.Method, path, payload); r.Status != http.StatusUnauthorized || r.Code() != "auth_required" {
					t.Fatalf("%d %s", r.Status, r.Raw)
				}
			})
			continue
		case "bearer":
		default:
			t.Fatalf("%s: unexpected security %q", rt.Pattern(), rt.Security)
		}

		t.Run("no token/"+rt.Pattern(), func(t *testing.T) {
			path := fill(t, rt, func(k string) string { return alices.ids[k] })
			if r := alice.As("").Do(rt.Method, path, payload); r.Status != 401 || r.Code() != "auth_required" {
				t.Fatalf("%d %s", r.Status, r.Raw)
			}
		})

		if len(rt.Params) > 0 {
			t.Run("foreign ids/"+rt.Pattern(), func(t *testing.T) {
				path := fill(t, rt, func(k string) string { return mallorys.ids[k] })
				if r := alice.Do(rt.Method, path, payload); r.Status != 404 {
					t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
				}
			})
			if _, scoped := rt.Params["id"]; scoped && rt.Params["id"] == "workspace" && len(rt.Params) > 1 {
				t.Run("own workspace, foreign ids/"+rt.Pattern(), func(t *testing.T) {
					path := fill(t, rt, func(k string) string {
						if k == "workspace" {
							return alices.ids[k]
						}
						return mallorys.ids[k]
					})
					if r := alice.Do(rt.Method, path, payload); r.Status != 404 {
						t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
					}
				})
			}
		}

		if rt.Capability != "" || slices.Contains(rt.Errors, "owner_required") {
			t.Run("lacking capability/"+rt.Pattern(), func(t *testing.T) {
				path := fill(t, rt, func(k string) string { return alices.ids[k] })
				r := powerless.In(alice.Personal).Do(rt.Method, path, payload)
				if r.Status != 403 {
					t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
				}
				if rt.Capability != "" && r.Code() == "capability_required" && r.Details()["capability"] != rt.Capability {
					t.Fatalf("details.capability = %v, want %s", r.Details()["capability"], rt.Capability)
				}
			})
		}
	}
}
