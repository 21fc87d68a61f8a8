package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// bearer adds a token and a workspace to every request.
type bearer struct {
	token, workspace string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if b.workspace != "" {
		r.Header.Set("X-Service-Workspace", b.workspace)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// mcpClient connects the Go SDK's client to the server's MCP endpoint.
func mcpClient(t *testing.T, base, token, workspace string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token, workspace}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// toolErr is a tool result's error envelope, or nil.
func toolErr(t *testing.T, r *mcp.CallToolResult) map[string]any {
	t.Helper()
	if !r.IsError {
		return nil
	}
	var env struct {
		Error map[string]any `json:"error"`
	}
	text := r.Content[0].(*mcp.TextContent).Text
	if err := json.Unmarshal([]byte(text), &env); err != nil || env.Error == nil {
		t.Fatalf("a tool error that is not the API's envelope: %s", text)
	}
	return env.Error
}

// TestMCPTools: the MCP endpoint lists every tool with an input and an
// output schema and a description; a tool answers structured content
// from the API's own routes; another workspace's site is site_not_found,
// a member without internals gets capability_required for php_run, and
// bad arguments are refused by the schema. Without a credential the
// endpoint says where to sign in (RFC 9728), and the metadata documents
// name the authorization server and the scope.
func TestMCPTools(t *testing.T) {
	w := newWorld(t)
	s, alice, powerless, alices, mallorys := w.s, w.alice, w.powerless, w.alices, w.mallorys
	ctx := context.Background()
	cs := mcpClient(t, s.URL(), alice.Token, "")

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Description == "" || tl.InputSchema == nil || tl.OutputSchema == nil {
			t.Errorf("tool %s lacks a description or a schema", tl.Name)
		}
		// Clients (the TypeScript SDK's) take object schemas only.
		for what, sc := range map[string]any{"input": tl.InputSchema, "output": tl.OutputSchema} {
			b, _ := json.Marshal(sc)
			var m map[string]any
			if json.Unmarshal(b, &m) != nil || m["type"] != "object" {
				t.Errorf("tool %s: its %s schema is not an object: %s", tl.Name, what, b)
			}
		}
	}
	for _, want := range []string{"sites_list", "site_get", "site_create", "site_delete", "site_reset", "site_fork", "checkpoint_create",
		"checkpoint_list", "checkpoint_restore", "checkpoint_delete", "screenshot", "files_list", "file_read", "file_write", "php_run",
		"sql_run", "debug_log", "mail_list", "plugins_list", "plugin_activate", "plugin_deploy", "php_version_set", "php_config",
		"blueprint_validate", "blueprint_apply", "login_link", "templates_list", "job_get", "service_get_plugin_license"} {
		if !slices.Contains(names, want) {
			t.Errorf("no tool %s (have %v)", want, names)
		}
	}

	call := func(cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	r := call(cs, "sites_list", nil)
	if e := toolErr(t, r); e != nil {
		t.Fatalf("sites_list: %v", e)
	}
	b, _ := json.Marshal(r.StructuredContent)
	if !strings.Contains(string(b), alices.ids["site"]) || strings.Contains(string(b), mallorys.ids["site"]) {
		t.Fatalf("sites_list: %s", b)
	}
	if r := call(cs, "checkpoint_list", map[string]any{"siteId": alices.ids["site"]}); toolErr(t, r) != nil {
		t.Fatalf("checkpoint_list: %v", toolErr(t, r))
	}
	for _, c := range []struct {
		cs   *mcp.ClientSession
		name string
		args map[string]any
		code string
	}{
		{cs, "site_get", map[string]any{"siteId": mallorys.ids["site"]}, "site_not_found"},
		{cs, "checkpoint_restore", map[string]any{"siteId": mallorys.ids["site"], "checkpointId": mallorys.ids["checkpoint"]}, "site_not_found"},
		{cs, "checkpoint_restore", map[string]any{"siteId": alices.ids["site"], "checkpointId": mallorys.ids["checkpoint"]}, "checkpoint_not_found"},
		{cs, "screenshot", map[string]any{"siteId": mallorys.ids["site"]}, "site_not_found"},
		{cs, "file_read", map[string]any{"siteId": alices.ids["site"]}, "invalid_request"},
		{mcpClient(t, s.URL(), powerless.Token, alice.Personal), "php_run", map[string]any{"siteId": alices.ids["site"], "code": "<?php echo 1;"},
			"capability_required"},
		{mcpClient(t, s.URL(), powerless.Token, alice.Personal), "sql_run", map[string]any{"siteId": alices.ids["site"], "query": "SELECT 1"},
			"capability_required"},
	} {
		if e := toolErr(t, call(c.cs, c.name, c.args)); e == nil || e["code"] != c.code {
			t.Errorf("%s %v: %v; want %s", c.name, c.args, e, c.code)
		}
	}
	// Arguments the schema refuses never reach a route.
	if r := call(cs, "php_run", map[string]any{"siteId": alices.ids["site"]}); !r.IsError {
		t.Fatal("php_run without code was taken")
	}

	// A token issued for the MCP endpoint (RFC 8707) is a credential
	// there alone, whatever else its scopes name; one issued for another
	// resource is none at the endpoint.
	oauthToken := func(scope, resource string) string {
		plain := secret.New(secret.TokenPrefix)
		tok := state.Token{ID: ids.New(ids.Token), UserID: alice.ID, Name: "mcp test", Hash: secret.Hash(plain), Prefix: secret.Display(plain),
			CreatedAt: time.Now().UTC(), Kind: state.TokenOAuth, Scope: scope, ClientID: "cli_test", ClientName: "test",
			WorkspaceID: alice.Personal, Resource: resource}
		if _, err := s.Node().Apply(ctx, fsm.CreateToken{Token: tok}); err != nil {
			t.Fatal(err)
		}
		return plain
	}
	bound := oauthToken("import:read import:write mcp", s.URL()+"/mcp")
	if r := st.NewClient(t, s.URL(), bound).Do("GET", "/api/app/imports", nil); r.Status != 401 {
		t.Fatalf("an MCP-bound token on REST: %d %s", r.Status, r.Raw)
	}
	if r := call(mcpClient(t, s.URL(), bound, ""), "sites_list", nil); toolErr(t, r) != nil {
		t.Fatalf("the MCP-bound token at /mcp: %v", toolErr(t, r))
	}
	other := oauthToken("mcp", "https://elsewhere.example/mcp")
	res := st.NewClient(t, s.URL(), other).Do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "Accept", "application/json, text/event-stream")
	if res.Status != 401 || !strings.Contains(res.Header.Get("WWW-Authenticate"), "invalid_token") {
		t.Fatalf("a token for another resource at /mcp: %d %q", res.Status, res.Header.Get("WWW-Authenticate"))
	}
	// An id the router would redirect is no resource.
	if e := toolErr(t, call(cs, "checkpoint_delete", map[string]any{"siteId": "..", "checkpointId": ".."})); e == nil || e["code"] != "not_found" {
		t.Fatalf("checkpoint_delete of ..: %v", e)
	}

	// Without a credential: where to sign in.
	anon := st.NewClient(t, s.URL(), "")
	res = anon.Do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "Accept", "application/json, text/event-stream")
	if res.Status != 401 || !strings.Contains(res.Header.Get("WWW-Authenticate"), `resource_metadata="`+s.URL()+`/.well-known/oauth-protected-resource/mcp"`) {
		t.Fatalf("anonymous /mcp: %d %q", res.Status, res.Header.Get("WWW-Authenticate"))
	}
	prm := anon.Do("GET", "/.well-known/oauth-protected-resource/mcp", nil).Must(t, 200)
	if prm.Str("resource") != s.URL()+"/mcp" || prm.Get("authorization_servers").([]any)[0] != s.URL() {
		t.Fatalf("protected resource metadata: %s", prm.Raw)
	}
	asm := anon.Do("GET", "/.well-known/oauth-authorization-server", nil).Must(t, 200)
	if asm.Str("issuer") != s.URL() || asm.Str("registration_endpoint") != s.URL()+"/api/connect/register" ||
		!strings.Contains(string(asm.Raw), `"S256"`) || !strings.Contains(string(asm.Raw), `"mcp"`) {
		t.Fatalf("authorization server metadata: %s", asm.Raw)
	}
}
