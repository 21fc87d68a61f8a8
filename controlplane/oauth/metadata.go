package oauth

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Well-known paths of the metadata documents.
const (
	ProtectedResourcePath = "/.well-known/oauth-protected-resource"
	AuthServerPath        = "/.well-known/oauth-authorization-server"
)

// ResourceMetadataURL is the URL of the MCP endpoint's protected
// resource metadata (what a 401 from it points to).
func (s *Service) ResourceMetadataURL() string {
	return s.issuer() + ProtectedResourcePath + "/mcp"
}

// MCPResource is the MCP endpoint's URL, the audience of mcp tokens.
func (s *Service) MCPResource() string { return s.cfg.MCPResource }

func (s *Service) issuer() string { return strings.TrimSuffix(s.cfg.PublicURL, "/") }

func writeMetadata(w http.ResponseWriter, doc any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	_ = json.NewEncoder(w).Encode(doc)
}

// resourceMetadata is the MCP endpoint's protected resource metadata
// (RFC 9728).
func (s *Service) resourceMetadata(w http.ResponseWriter, _ *http.Request) {
	writeMetadata(w, map[string]any{
		"resource":                 s.cfg.MCPResource,
		"resource_name":            "sandboxd MCP: disposable WordPress sites for AI agents",
		"authorization_servers":    []string{s.issuer()},
		"scopes_supported":         []string{ScopeMCP},
		"bearer_methods_supported": []string{"header"},
		"resource_documentation":   s.issuer() + "/api/openapi.json",
	})
}

// serverMetadata is the authorization server's metadata (RFC 8414).
func (s *Service) serverMetadata(w http.ResponseWriter, _ *http.Request) {
	base := s.issuer()
	writeMetadata(w, map[string]any{
		"issuer":                                         base,
		"authorization_endpoint":                         base + "/connect/authorize",
		"token_endpoint":                                 base + "/api/connect/token",
		"registration_endpoint":                          base + "/api/connect/register",
		"scopes_supported":                               AllScopes,
		"response_types_supported":                       []string{"code"},
		"response_modes_supported":                       []string{"query"},
		"grant_types_supported":                          []string{"authorization_code"},
		"token_endpoint_auth_methods_supported":          []string{"none"},
		"code_challenge_methods_supported":               []string{"S256"},
		"authorization_response_iss_parameter_supported": false,
	})
}
