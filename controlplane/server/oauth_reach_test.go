package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// readyImport uploads a small archive as an import (into siteID, or a
// new sandbox) and waits for it to be ready; it returns the import and
// its site.
func readyImport(t *testing.T, c *st.Client, siteID string) (string, string) {
	t.Helper()
	body := map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 5}
	if siteID != "" {
		body["siteId"] = siteID
	}
	id := c.Do("POST", "/api/app/imports", body).Must(t, 201).Str("import.id")
	c.Do("PUT", "/api/app/imports/"+id+"/upload", []byte("hello"), "Content-Type", "application/octet-stream", "X-Service-Offset", "0").Must(t, 200)
	c.Do("POST", "/api/app/imports/"+id+"/complete", nil).Must(t, 202)
	var r *st.Response
	st.WaitFor(t, 20*time.Second, "import "+id+" ready", func() bool {
		r = c.Do("GET", "/api/app/imports/"+id, nil).Must(t, 200)
		if r.Str("import.status") == "failed" {
			t.Fatalf("import failed: %s", r.Raw)
		}
		return r.Str("import.status") == "ready"
	})
	return id, r.Str("import.siteId")
}

// importIDs lists the ids a client's GET /api/app/imports shows.
func importIDs(t *testing.T, c *st.Client) []string {
	t.Helper()
	var out []string
	for _, imp := range c.Do("GET", "/api/app/imports", nil).Must(t, 200).List("imports") {
		out = append(out, imp["id"].(string))
	}
	return out
}

// TestConnectorTokenReach: a connector's token reaches what its consent
// page promised and nothing more. It is bound to the one workspace
// chosen on the page (the personal one unless another is chosen): any
// other workspace header answers workspace_not_found. It imports into
// new sandboxes, or sites its own client's imports made, never into
// another existing site (site_not_found); it sees only its own client's
// imports, so never another's login link. A token from before the
// binding is bound to the personal workspace; the account's own tokens
// still see and do everything.
func TestConnectorTokenReach(t *testing.T) {
	s := st.Single(t, st.Options{})
	startRestoreAgent(t, s)
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	team := alice.Do("POST", "/api/app/workspaces", map[string]string{"name": "Team"}).Must(t, 201).Str("workspace.id")

	// Alice's own site, made with her personal token, with a login link.
	ownImport, ownSite := readyImport(t, alice.Client, "")
	if alice.Do("GET", "/api/app/imports/"+ownImport, nil).Must(t, 200).Str("loginUrl") == "" {
		t.Fatal("no login link on the personal token's import")
	}

	conn, page, _ := st.ConnectorToken(t, s, alice.Token, "")
	if !strings.Contains(page, `id="workspace"`) || !strings.Contains(page, team) {
		t.Errorf("the consent page offers no choice of workspace: %s", page)
	}
	// Another workspace of the same account is out of reach.
	for _, p := range []string{"/api/app/imports"} {
		if r := conn.In(team).Do("GET", p, nil); r.Status != 404 || r.Code() != "workspace_not_found" {
			t.Errorf("GET %s in another workspace: %d %s", p, r.Status, r.Code())
		}
	}
	if r := conn.In(team).Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 5}); r.Status != 404 || r.Code() != "workspace_not_found" {
		t.Errorf("import into another workspace: %d %s", r.Status, r.Code())
	}
	// An existing site it did not make is out of reach.
	if r := conn.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 5, "siteId": ownSite}); r.Status != 404 || r.Code() != "site_not_found" {
		t.Errorf("import into an existing site: %d %s", r.Status, r.Code())
	}
	// Another client's imports and login links are out of sight.
	if ids := importIDs(t, conn); len(ids) != 0 {
		t.Errorf("the connector lists imports it did not make: %v", ids)
	}
	if r := conn.Do("GET", "/api/app/imports/"+ownImport, nil); r.Status != 404 || r.Code() != "import_not_found" || strings.Contains(string(r.Raw), "loginUrl") {
		t.Errorf("the connector reads another's import: %d %s", r.Status, r.Code())
	}
	conn.Do("DELETE", "/api/app/imports/"+ownImport+"?action=delete", nil).Must(t, 404)

	// What it may do: a new sandbox, then its own sandbox again.
	mine, mySite := readyImport(t, conn, "")
	if conn.Do("GET", "/api/app/imports/"+mine, nil).Must(t, 200).Str("loginUrl") == "" {
		t.Error("no login link on the connector's own import")
	}
	again, _ := readyImport(t, conn, mySite)
	if ids := importIDs(t, conn); len(ids) != 2 || !strings.Contains(strings.Join(ids, " "), mine) || !strings.Contains(strings.Join(ids, " "), again) {
		t.Errorf("the connector lists %v, want its own two imports", ids)
	}
	// A second connector of the same account sees none of the first's.
	other, _, _ := st.ConnectorToken(t, s, alice.Token, "")
	if ids := importIDs(t, other); len(ids) != 0 {
		t.Errorf("another connector lists %v", ids)
	}
	other.Do("GET", "/api/app/imports/"+mine, nil).Must(t, 404)
	if r := other.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 5, "siteId": mySite}); r.Status != 404 {
		t.Errorf("another connector imports into the first's site: %d %s", r.Status, r.Code())
	}

	// One approved for the team workspace works there, and only there.
	teamConn, _, _ := st.ConnectorToken(t, s, alice.Token, team)
	teamConn.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 5}).Must(t, 201)
	if got := alice.In(team).Do("GET", "/api/app/imports", nil).Must(t, 200).List("imports"); len(got) != 1 {
		t.Errorf("the team connector's import is not in the team workspace: %v", got)
	}
	if r := teamConn.In(alice.Personal).Do("GET", "/api/app/imports", nil); r.Status != 404 || r.Code() != "workspace_not_found" {
		t.Errorf("the team connector in the personal workspace: %d %s", r.Status, r.Code())
	}
	// The consent page approves only a workspace of the account's.
	mallory := st.NewAccount(t, s, "mallory@example.com", "paid")
	if _, to := st.NewConsentBrowser(t, s.URL()).ApproveIn(authURLFor(t, s), mallory.Token, team); to.Query().Get("code") != "" {
		t.Errorf("approved into a workspace not the account's: %s", to)
	}

	// A connector token from before the binding is bound to the personal workspace.
	plain := secret.New(secret.TokenPrefix)
	legacy := state.Token{ID: "tok_legacy", UserID: alice.ID, Name: "OAuth: old", Hash: secret.Hash(plain), Prefix: secret.Display(plain),
		CreatedAt: time.Now().UTC(), Kind: state.TokenOAuth, Scope: "import:read import:write", ClientID: "cli_old", ClientName: "old"}
	if _, err := s.Node().Apply(context.Background(), fsm.CreateToken{Token: legacy, Quota: state.Quota{Limit: 100}}); err != nil {
		t.Fatal(err)
	}
	old := st.NewClient(t, s.URL(), plain)
	old.Do("GET", "/api/app/imports", nil).Must(t, 200)
	if r := old.In(team).Do("GET", "/api/app/imports", nil); r.Status != 404 {
		t.Errorf("a token from before the binding in another workspace: %d %s", r.Status, r.Code())
	}
	// The account's own token still sees everything of its workspaces.
	if ids := importIDs(t, alice.Client); len(ids) != 3 {
		t.Errorf("the account lists %v, want 3 imports", ids)
	}
}

// authURLFor registers a connector and returns an authorization URL for it.
func authURLFor(t *testing.T, s interface{ URL() string }) string {
	t.Helper()
	const redirect = "http://127.0.0.1:9/callback"
	id := st.NewClient(t, s.URL(), "").Do("POST", "/api/connect/register", map[string]any{"redirect_uris": []string{redirect}}).Must(t, 201).Str("client_id")
	cfg := &oauth2.Config{ClientID: id, RedirectURL: redirect, Scopes: []string{"import:read", "import:write"},
		Endpoint: oauth2.Endpoint{AuthURL: s.URL() + "/connect/authorize"}}
	return cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(oauth2.GenerateVerifier()))
}
