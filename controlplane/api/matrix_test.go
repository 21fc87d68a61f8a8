package api_test

import (
	"crypto/ed25519"
	"crypto/rand"

	"context"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/libraryspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// sampleBodies is a valid body for every route that takes one. The matrix
// fails for a new write route missing here, so it cannot be forgotten.
// An id in a body is written {kind} and filled like path parameters.
var sampleBodies = map[string]string{
	"POST /api/account/tokens":                             `{"name":"matrix"}`,
	"POST /api/app/workspaces":                             `{"name":"matrix"}`,
	"POST /api/app/sites":                                  `{"name":"matrix"}`,
	"PUT /api/app/sites/{id}/php-config":                   `{"settings":{"memory_limit":"128M"}}`,
	"PUT /api/app/sites/{id}/php-version":                  `{"phpVersion":"7.4"}`,
	"PUT /api/app/sites/{id}/debug":                        `{"wpDebug":true}`,
	"PUT /api/app/sites/{id}/domain":                       `{"hostname":"matrix.example.com"}`,
	"POST /api/app/sites/{id}/repositories":                `{"repoUrl":"https://git.example.com/acme/matrix.git","destination":"plugin"}`,
	"PATCH /api/app/sites/{id}/repositories/{repoId}":      `{"autoDeploy":false}`,
	"POST /api/account/ssh-keys":                           `{"name":"matrix","publicKey":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEabcLif3if/zQTiFdt2tvtMEVc/WbVQ/I/9aQOvxV/P matrix"}`,
	"POST /api/app/workspaces/{id}/members":                `{"email":"matrix@example.com"}`,
	"PATCH /api/app/workspaces/{id}/members/{userId}":      `{"customRoleId":null}`,
	"POST /api/app/workspaces/{id}/roles":                  `{"name":"matrix","capabilities":[]}`,
	"PATCH /api/app/workspaces/{id}/roles/{roleId}":        `{"name":"matrix2"}`,
	"POST /api/admin/accounts":                             `{"email":"m@example.com","plan":"free"}`,
	"PUT /api/admin/accounts/{email}/plan":                 `{"plan":"paid"}`,
	"POST /api/admin/tokens":                               `{"email":"m@example.com"}`,
	"POST /api/admin/join-tokens":                          `{"role":"agent"}`,
	"POST /api/admin/operator-tokens":                      `{"name":"matrix"}`,
	"POST /api/admin/sealing-key/rotate":                   `{"dryRun":true}`,
	"POST /api/app/sites/{id}/files/{op}":                  `{"contentBase64":""}`,
	"POST /api/app/plugin-library/github":                  `{"repository":"acme/widgets"}`,
	"PUT /api/app/plugin-library/{id}/license-key":         `{"licenseKey":"matrix-key-000"}`,
	"POST /api/app/sites/{id}/plugins":                     `{"libraryPlugin":"{library}"}`,
	"POST /api/app/sites/{id}/restore":                     `{"templateId":"{template}"}`,
	"POST /api/app/sites/{id}/checkpoints":                 `{"name":"matrix"}`,
	"POST /api/app/sites/{id}/fork":                        `{"name":"matrix"}`,
	"POST /api/app/sites/{id}/php":                         `{"code":"<?php echo 1;"}`,
	"POST /api/app/sites/{id}/sql":                         `{"query":"SELECT 1"}`,
	"POST /api/app/sites/{id}/screenshot":                  `{"path":"/"}`,
	"POST /api/app/templates":                              `{"siteId":"{site}","name":"matrix"}`,
	"PATCH /api/app/templates/{id}":                        `{"name":"matrix2"}`,
	"PUT /api/account/webhooks/demo-launches":              `{"url":"https://hooks.example.com/sandboxd"}`,
	"POST /api/app/blueprints/validate":                    `{"source":{"steps":[]}}`,
	"POST /api/app/blueprints/import":                      `{"url":"http://127.0.0.1:1/blueprint.json"}`,
	"POST /api/app/blueprints":                             `{"name":"matrix","source":{"steps":[]}}`,
	"PATCH /api/app/blueprints/{id}":                       `{"name":"matrix2"}`,
	"POST /api/app/templates/{id}/sites":                   `{"name":"matrix"}`,
	"POST /api/app/blueprints/{id}/sites":                  `{"name":"matrix"}`,
	"POST /api/app/blueprints/{id}/bake":                   `{"name":"matrix"}`,
	"POST /api/app/sites/{id}/blueprint":                   `{"blueprintId":"{blueprint}"}`,
	"POST /api/app/imports":                                `{"sourceUrl":"https://live.example.com","sizeBytes":10}`,
	"POST /api/app/imports/{id}/multipart/init":            `{"objects":[{"key":"a.tar","sizeBytes":10}]}`,
	"POST /api/app/imports/{id}/multipart/part-url":        `{"key":"a.tar","partNumber":1}`,
	"POST /api/app/imports/{id}/multipart/complete-object": `{"key":"a.tar"}`,
	"POST /api/app/imports/{id}/multipart/finalize":        `{"manifest":{"objects":[{"key":"a.tar","kind":"archive"}]}}`,
	"POST /api/connect/register":                           `{"redirect_uris":["https://ok.example.com/cb"]}`,
	"POST /api/connect/token":                              `{"grant_type":"authorization_code"}`,
	"POST /internal/cluster/join":                          `{"id":"x","raftAddr":"127.0.0.1:1","apiAddr":"http://127.0.0.1:1"}`,
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
	// A token of its own: revoking it must not cut the caller's session.
	spare := c.Do("POST", "/api/account/tokens", map[string]any{"name": "spare"}).Must(t, 201).Str("token.id")
	site := c.Do("POST", "/api/app/sites", map[string]any{"name": "fixture"}).Must(t, 202).Str("site.id")
	bp := c.Do("POST", "/api/app/blueprints", map[string]any{"name": "fixture", "source": map[string]any{"steps": []any{}}}).Must(t, 201).Str("blueprint.id")
	return fixture{ids: map[string]string{
		"site":       site,
		"workspace":  owner.Personal,
		"member":     owner.ID,
		"role":       role,
		"token":      spare,
		"job":        newJob(t, s, owner.Personal),
		"invitation": inv,
		"fileop":     "write",
		"library":    newLibraryEntry(t, s, owner.Personal),
		"template":   newTemplate(t, s, owner),
		"blueprint":  bp,
		"run":        newRun(t, s, owner.Personal, bp, site),
		"sshKey":     newSSHKey(t, c),
		"repository": c.Do("POST", "/api/app/sites/"+site+"/repositories", map[string]any{"repoUrl": "https://git.example.com/acme/fixture.git",
			"destination": "plugin"}).Must(t, 201).Str("repository.id"),
		"import": c.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 10}).
			Must(t, 201).Str("import.id"),
		"checkpoint": newCheckpoint(t, s, site),
	}}
}

// newCheckpoint records a checkpoint of a site directly through Raft (the
// site has no node to make one on).
func newCheckpoint(t *testing.T, s *server.Server, siteID string) string {
	t.Helper()
	site, err := s.Node().Store().Site(siteID)
	if err != nil || site == nil {
		t.Fatalf("site %s: %v", siteID, err)
	}
	cp := state.Checkpoint{ID: ids.New(ids.Checkpoint), SiteID: siteID, WorkspaceID: site.WorkspaceID, NodeID: site.NodeID,
		Name: "fixture", CreatedAt: time.Now().UTC()}
	if _, err := s.Node().Apply(context.Background(), fsm.AddCheckpoint{Checkpoint: cp}); err != nil {
		t.Fatal(err)
	}
	return cp.ID
}

// newSSHKey adds a fresh Ed25519 key to the caller's account.
func newSSHKey(t *testing.T, c *st.Client) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return c.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "fixture", "publicKey": string(ssh.MarshalAuthorizedKey(k))}).
		Must(t, 201).Str("sshKey.id")
}

// newRun adds a finished run of a Blueprint directly through Raft.
func newRun(t *testing.T, s *server.Server, workspaceID, blueprintID, siteID string) string {
	t.Helper()
	now := time.Now().UTC()
	j, err := jobs.New("test_noop", workspaceID, siteID, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	run := state.BlueprintRun{ID: ids.New(ids.Run), BlueprintID: blueprintID, WorkspaceID: workspaceID, SiteID: siteID, JobID: j.ID,
		Mode: state.RunApply, Status: state.RunSucceeded, Source: []byte(`{"steps":[]}`), CreatedAt: now}
	if _, err := s.Node().Apply(context.Background(), fsm.CreateRunWithJob{Run: run, Job: j}); err != nil {
		t.Fatal(err)
	}
	return run.ID
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

// newTemplate adds a ready template directly through Raft (no node holds
// it: the matrix only needs its row).
func newTemplate(t *testing.T, s *server.Server, owner *st.Account) string {
	t.Helper()
	now := time.Now().UTC()
	tpl := state.Template{ID: ids.New(ids.Template), WorkspaceID: owner.Personal, UserID: owner.ID, Name: "Matrix", Slug: "matrix",
		Status: state.TemplateReady, PHPVersion: "8.2", NodeID: "node-fake", CreatedAt: now, UpdatedAt: now}
	j, err := jobs.New("test_noop", owner.Personal, "", nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Node().Apply(context.Background(), fsm.CreateTemplateWithJob{Template: tpl, Job: j}); err != nil {
		t.Fatal(err)
	}
	return tpl.ID
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
// A positive control then calls every route with the caller's own ids:
// none may answer 404 (or 401/403), so an id of the wrong kind in a
// fixture, which would make the 404s above meaningless, fails here.
// world is a server with a node that answers nothing, alice and mallory
// with a workspace fixture each, and powerless, a member of alice's
// workspace whose role holds no capability.
type world struct {
	s                         *server.Server
	alice, mallory, powerless *st.Account
	alices, mallorys          fixture
}

func newWorld(t *testing.T) world {
	t.Helper()
	w := world{s: st.Single(t, st.Options{})}
	fakeNode(t, w.s)
	w.alice = st.NewAccount(t, w.s, "alice@example.com", "paid")
	w.mallory = st.NewAccount(t, w.s, "mallory@example.com", "paid")
	w.powerless = st.NewAccount(t, w.s, "powerless@example.com", "paid")
	w.alices = setUp(t, w.s, w.alice, "powerless@example.com")
	w.mallorys = setUp(t, w.s, w.mallory, "mallory-friend@example.com")
	w.powerless.Do("POST", "/api/account/invitations/"+w.alices.ids["invitation"]+"/accept", nil).Must(t, 200)
	w.alice.Do("PATCH", "/api/app/workspaces/"+w.alice.Personal+"/members/"+w.powerless.ID,
		map[string]any{"customRoleId": w.alices.ids["role"]}).Must(t, 200)
	return w
}

func TestCrossWorkspaceMatrix(t *testing.T) {
	w := newWorld(t)
	s, alice, powerless, alices, mallorys := w.s, w.alice, w.powerless, w.alices, w.mallorys

	olivia := st.NewAccount(t, s, "olivia@example.com", "paid")
	olivias := setUp(t, s, olivia, "olivia-friend@example.com")
	// An invitation addressed to olivia, for the route that accepts one.
	toOlivia := alice.Do("POST", "/api/app/workspaces/"+alice.Personal+"/members",
		map[string]any{"email": "olivia@example.com"}).Must(t, 201).Str("invitation.id")

	declared := declaredStatuses(t, s)
	// checked fails a subtest whose answer the document does not declare.
	checked := func(t *testing.T, rt rest.Route, r *st.Response) *st.Response {
		t.Helper()
		if !declared[rt.Pattern()][r.Status] {
			t.Errorf("%s answered %d, which its OpenAPI operation does not declare: %s", rt.Pattern(), r.Status, r.Raw)
		}
		return r
	}

	routes := s.Router().Routes()
	if len(routes) < 20 {
		t.Fatalf("only %d routes registered", len(routes))
	}
	for _, rt := range routes {
		body, hasBody := sampleBodies[rt.Pattern()]
		if rt.Request != nil && !hasBody {
			t.Fatalf("%s takes a body: add a sample to sampleBodies", rt.Pattern())
		}
		// payload fills the body's ids from the same fixture as the path.
		payload := func(pick func(string) string) any {
			if !hasBody {
				return nil
			}
			return paramRE.ReplaceAllStringFunc(body, func(m string) string { return pick(m[1 : len(m)-1]) })
		}
		alicesID := func(k string) string { return alices.ids[k] }
		mallorysID := func(k string) string { return mallorys.ids[k] }

		switch rt.Security {
		case "operator":
			t.Run("user token refused/"+rt.Pattern(), func(t *testing.T) {
				path := fill(t, rt, func(string) string { return "x" })
				if r := checked(t, rt, alice.Do(rt.Method, path, payload(alicesID))); r.Status != http.StatusUnauthorized || r.Code() != "auth_required" {
					t.Fatalf("%d %s", r.Status, r.Raw)
				}
			})
			continue
		case "":
			// The OAuth client's own endpoints: open to anyone, never a 5xx.
			t.Run("public/"+rt.Pattern(), func(t *testing.T) {
				if r := checked(t, rt, alice.As("").Do(rt.Method, fill(t, rt, alicesID), payload(alicesID))); r.Status >= 500 {
					t.Fatalf("%d %s", r.Status, r.Raw)
				}
			})
			continue
		case "bearer":
		default:
			t.Fatalf("%s: unexpected security %q", rt.Pattern(), rt.Security)
		}

		t.Run("no token/"+rt.Pattern(), func(t *testing.T) {
			path := fill(t, rt, alicesID)
			r := checked(t, rt, alice.As("").Do(rt.Method, path, payload(alicesID)))
			if rt.OptionalAuth {
				if r.Status == 401 || r.Status >= 500 {
					t.Fatalf("a route open to anyone: %d %s", r.Status, r.Raw)
				}
				return
			}
			if r.Status != 401 || r.Code() != "auth_required" {
				t.Fatalf("%d %s", r.Status, r.Raw)
			}
		})

		if len(rt.Params) > 0 {
			t.Run("foreign ids/"+rt.Pattern(), func(t *testing.T) {
				path := fill(t, rt, mallorysID)
				if r := checked(t, rt, alice.Do(rt.Method, path, payload(mallorysID))); r.Status != 404 {
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
					if r := checked(t, rt, alice.Do(rt.Method, path, payload(mallorysID))); r.Status != 404 {
						t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
					}
				})
			}
		}

		if rt.Capability != "" || slices.Contains(rt.Errors, "owner_required") {
			t.Run("lacking capability/"+rt.Pattern(), func(t *testing.T) {
				path := fill(t, rt, alicesID)
				r := checked(t, rt, powerless.In(alice.Personal).Do(rt.Method, path, payload(alicesID)))
				if r.Status != 403 {
					t.Fatalf("%s: %d %s", path, r.Status, r.Raw)
				}
				if rt.Capability != "" && r.Code() == "capability_required" && r.Details()["capability"] != rt.Capability {
					t.Fatalf("details.capability = %v, want %s", r.Details()["capability"], rt.Capability)
				}
			})
		}
	}

	// Positive control, with deletes last and sub-resources before their
	// parents (the token olivia calls with is not the one deleted), so
	// every route finds its resources.
	ordered := slices.Clone(routes)
	slices.SortStableFunc(ordered, func(x, y rest.Route) int {
		if d := boolInt(x.Method == "DELETE") - boolInt(y.Method == "DELETE"); d != 0 {
			return d
		}
		if x.Method == "DELETE" {
			return len(y.Path) - len(x.Path)
		}
		return 0
	})
	for _, rt := range ordered {
		if rt.Security != "bearer" || len(rt.Params) == 0 {
			continue
		}
		pick := func(k string) string {
			if k == "invitation" && strings.HasSuffix(rt.Path, "/accept") {
				return toOlivia
			}
			return olivias.ids[k]
		}
		var payload any
		if body, ok := sampleBodies[rt.Pattern()]; ok {
			payload = paramRE.ReplaceAllStringFunc(body, func(m string) string { return pick(m[1 : len(m)-1]) })
		}
		t.Run("own ids/"+rt.Pattern(), func(t *testing.T) {
			path := fill(t, rt, pick)
			r := checked(t, rt, olivia.In(olivia.Personal).Do(rt.Method, path, payload))
			if r.Status == 404 || r.Status == 401 || r.Status == 403 {
				t.Fatalf("%s %s with the caller's own ids: %d %s", rt.Method, path, r.Status, r.Raw)
			}
		})
	}
}

// declaredStatuses maps each operation of the served document to the
// statuses it declares.
func declaredStatuses(t *testing.T, s *server.Server) map[string]map[int]bool {
	t.Helper()
	doc := st.NewClient(t, s.URL(), "").Do("GET", "/api/openapi.json", nil).Must(t, 200)
	out := map[string]map[int]bool{}
	for path, ops := range doc.Get("paths").(map[string]any) {
		for method, op := range ops.(map[string]any) {
			set := map[int]bool{}
			for code := range op.(map[string]any)["responses"].(map[string]any) {
				n, err := strconv.Atoi(code)
				if err != nil {
					t.Fatalf("%s %s declares response %q: want numeric statuses only", method, path, code)
				}
				set[n] = true
			}
			out[strings.ToUpper(method)+" "+path] = set
		}
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestIdsInBodiesStayInTheirWorkspace: ids carried in a body (a deploy's
// libraryPlugin, the MCP license tool's plugin) resolve only in the
// caller's workspace, with the caller's own ids as the positive control,
// and the MCP tool checks its capability.
func TestIdsInBodiesStayInTheirWorkspace(t *testing.T) {
	w := newWorld(t)
	alice, powerless, alices, mallorys := w.alice, w.powerless, w.alices, w.mallorys

	deploy := func(lib string) *st.Response {
		return alice.Do("POST", "/api/app/sites/"+alices.ids["site"]+"/plugins", map[string]any{"libraryPlugin": lib})
	}
	if r := deploy(mallorys.ids["library"]); r.Status != 404 || r.Code() != libraryspec.CodeEntryNotFound {
		t.Fatalf("deploy of another workspace's entry: %d %s", r.Status, r.Raw)
	}
	// Own entry: found; the site (on a node that answers nothing) is not ready.
	if r := deploy(alices.ids["library"]); r.Status != 400 || r.Details()["status"] == nil {
		t.Fatalf("deploy of an own entry: %d %s", r.Status, r.Raw)
	}

	tool := func(c *st.Client, plugin string) string {
		t.Helper()
		r := c.Do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"service_get_plugin_license","arguments":{"plugin":"`+plugin+`"}}}`,
			"Accept", "application/json, text/event-stream").Must(t, 200)
		return string(r.Raw)
	}
	if out := tool(alice.Client, mallorys.ids["library"]); !strings.Contains(out, libraryspec.CodeEntryNotFound) {
		t.Fatalf("MCP read of another workspace's entry: %s", out)
	}
	if out := tool(alice.Client, alices.ids["library"]); !strings.Contains(out, "no license key is stored") {
		t.Fatalf("MCP read of an own entry without a key: %s", out)
	}
	if out := tool(powerless.In(alice.Personal), alices.ids["library"]); !strings.Contains(out, "capability_required") {
		t.Fatalf("MCP read by a member without reusables: %s", out)
	}
}
