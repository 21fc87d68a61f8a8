package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/libraryspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
)

// MCPPath is where AI agents reach the service's MCP tools.
const MCPPath = "/mcp"

// LicenseToolName is the one path that may read a Library license key.
const LicenseToolName = "service_get_plugin_license"

// LicenseToolInput names the Library entry.
type LicenseToolInput struct {
	Plugin string `json:"plugin" jsonschema:"the Library entry's slug or id"`
}

// LicenseToolOutput is the entry and its license key.
type LicenseToolOutput struct {
	PluginID   string `json:"pluginId"`
	Slug       string `json:"slug"`
	Name       string `json:"name"`
	LicenseKey string `json:"licenseKey"`
}

// registerMCP mounts the MCP endpoint (streamable HTTP, stateless). A
// request authenticates with an API token like any other; the selected
// workspace (X-Service-Workspace) is the one the tools act in.
// mcpRoutes are the MCP server for AI agents.
type mcpRoutes struct {
	*base
	library Library
}

func (a mcpRoutes) register(r *rest.Router) {
	h := mcp.NewStreamableHTTPHandler(func(req *http.Request) *mcp.Server {
		c := CallerFrom(req.Context())
		if c == nil {
			return nil
		}
		return a.mcpServer(c)
	}, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, Logger: a.log})
	a.bearer(r, guard{scope: scopeWorkspace}, rest.Route{Method: "POST", Path: MCPPath, Tag: "mcp",
		Summary: "Model Context Protocol endpoint for AI agents (streamable HTTP, stateless, JSON-RPC body). Tool " +
			LicenseToolName + " {plugin: slug or id} returns a Library entry's license key (needs reusables) and stamps licenseKeyLastReadAt.",
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			h.ServeHTTP(w, req)
			return nil
		}})
}

func (a mcpRoutes) mcpServer(c *Caller) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "sandboxd", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: LicenseToolName,
		Description: "Returns the license key stored with a plugin or theme of the workspace's Library, for activating it on a sandbox. " +
			"Every read is recorded (licenseKeyLastReadAt)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in LicenseToolInput) (*mcp.CallToolResult, LicenseToolOutput, error) {
			out, err := a.readLicense(ctx, c, in.Plugin)
			return nil, out, err
		})
	return s
}

// readLicense opens an entry's key for an agent and stamps the read; the
// key is returned only once the stamp is committed.
func (a mcpRoutes) readLicense(ctx context.Context, c *Caller, plugin string) (LicenseToolOutput, error) {
	if !c.Caps.Has(access.Reusables) {
		return LicenseToolOutput{}, errors.New("capability_required: reading license keys needs the reusables capability")
	}
	e, err := a.store.LibraryEntry(c.Workspace.ID, plugin)
	if err != nil {
		return LicenseToolOutput{}, err
	}
	if e == nil {
		return LicenseToolOutput{}, fmt.Errorf("%s: no Library entry %q in this workspace", libraryspec.CodeEntryNotFound, plugin)
	}
	key, err := a.library.ReadLicense(ctx, e, c.Account.ID)
	if err != nil {
		return LicenseToolOutput{}, err
	}
	return LicenseToolOutput{PluginID: e.ID, Slug: e.Slug, Name: e.Name, LicenseKey: key}, nil
}
