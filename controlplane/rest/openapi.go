package rest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/apierr"
)

// OpenAPIInfo titles the generated document.
type OpenAPIInfo struct {
	Title       string
	Version     string
	Description string
	// Webhooks are the requests the service sends to its customers'
	// endpoints (OpenAPI 3.1's webhooks object).
	Webhooks []Webhook
	// Enums are the closed sets a field's `enum:"@name"` tag names, each
	// taken from the constants the code sends, so that the document's
	// enums cannot drift from the answers.
	Enums map[string][]string
}

// Webhook is one kind of request the service sends: its body's type and
// the headers it carries (name: meaning).
type Webhook struct {
	Name    string
	Summary string
	Body    any
	Headers map[string]string
}

var pathParam = regexp.MustCompile(`\{([A-Za-z0-9_]+)\.{0,3}\}`)

// OpenAPI builds an OpenAPI 3.1 document from the registered routes, so
// the document and the router cannot drift apart.
func (rt *Router) OpenAPI(info OpenAPIInfo) map[string]any {
	g := &schemaGen{defs: map[string]any{}, enums: info.Enums}
	paths := map[string]map[string]any{}
	for _, r := range rt.Routes() {
		op := map[string]any{
			"operationId": operationID(r),
			"summary":     r.Summary,
		}
		if r.Tag != "" {
			op["tags"] = []string{r.Tag}
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(r.Path, -1) {
			p := map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}}
			if kind := r.Params[m[1]]; kind != "" {
				p["description"] = "Id of a " + kind + "."
			}
			params = append(params, p)
		}
		for _, name := range sortedKeys(r.Query) {
			params = append(params, map[string]any{"name": name, "in": "query", "description": r.Query[name], "schema": map[string]any{"type": "string"}})
		}
		if r.Security != "" {
			params = append(params,
				map[string]any{"name": "X-Service-Workspace", "in": "header", "required": false,
					"description": "Selects the workspace; defaults to the caller's personal workspace.", "schema": map[string]any{"type": "string"}},
				map[string]any{"name": "X-Service-Organization", "in": "header", "required": false, "deprecated": true,
					"description": "Legacy alias of X-Service-Workspace.", "schema": map[string]any{"type": "string"}})
			op["security"] = []any{map[string]any{r.Security: []string{}}}
			if r.OptionalAuth {
				op["security"] = []any{map[string]any{}, map[string]any{r.Security: []string{}}}
			}
			if r.OAuthScope != "" {
				scopes := []string{r.OAuthScope}
				if r.OAuthScope == "*" {
					scopes = []string{}
				}
				op["security"] = []any{map[string]any{r.Security: []string{}}, map[string]any{"oauth": scopes}}
			}
			if r.Idempotent {
				params = append(params, map[string]any{"name": "Idempotency-Key", "in": "header", "required": false,
					"description": "Makes the request safe to retry: the same key (up to 255 printable ASCII characters, " +
						"per account) with the same method, path, workspace and body within 24 hours returns the first answer " +
						"again (with header Idempotent-Replayed: true), without acting twice; with another request, 409 " +
						"idempotency_key_reused. Retry an outcome_unknown answer with the same key.",
					"schema": map[string]any{"type": "string", "maxLength": 255}})
			}
		} else {
			op["security"] = []any{}
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if r.Capability != "" {
			op["x-capability"] = r.Capability
		}
		content := map[string]any{}
		if r.Request != nil {
			content["application/json"] = map[string]any{"schema": g.schema(reflect.TypeOf(r.Request))}
		}
		if len(r.Multipart) > 0 {
			props := map[string]any{}
			for name, desc := range r.Multipart {
				if d, ok := strings.CutPrefix(desc, "file:"); ok {
					props[name] = map[string]any{"type": "string", "format": "binary", "description": strings.TrimSpace(d)}
				} else {
					props[name] = map[string]any{"type": "string", "description": desc}
				}
			}
			content["multipart/form-data"] = map[string]any{"schema": map[string]any{"type": "object", "properties": props}}
		}
		if len(content) > 0 {
			op["requestBody"] = map[string]any{"required": true, "content": content}
		}
		responses := map[string]any{}
		ok := map[string]any{"description": http.StatusText(r.Status)}
		if r.Response != nil {
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(r.Response))}}
		}
		responses[fmt.Sprint(r.Status)] = ok
		for status, when := range r.AlsoStatus {
			also := map[string]any{"description": http.StatusText(status) + ": " + when}
			if content, ok := ok["content"]; ok {
				also["content"] = content
			}
			responses[fmt.Sprint(status)] = also
		}
		// Each error status the route can answer, with its codes; every
		// route can fail with internal_error.
		byStatus := map[int][]string{}
		for _, code := range append(slices.Clone(r.Errors), apierr.CodeInternal) {
			status, known := apierr.StatusOf(code)
			if !known {
				panic(fmt.Sprintf("openapi: %s lists the error code %q, which has no status", r.Pattern(), code))
			}
			if !slices.Contains(byStatus[status], code) {
				byStatus[status] = append(byStatus[status], code)
			}
		}
		for status, codes := range byStatus {
			resp := map[string]any{
				"description": http.StatusText(status) + ": error.code is " + strings.Join(codes, " or ") + ".",
				"content": map[string]any{"application/json": map[string]any{
					"schema": errorSchema(codes)}},
			}
			if status == http.StatusTooManyRequests {
				resp["description"] = "rate_limited: too many failed authentications from the client's address, writes by its token or address, or OAuth client registrations (from its address, or in all). Retry after Retry-After seconds (also details.retryAfterSeconds; details.limit names the limit)."
			}
			if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
				resp["headers"] = map[string]any{"Retry-After": map[string]any{
					"description": "Whole seconds, at least 1, until a retry can succeed.",
					"schema":      map[string]any{"type": "integer", "minimum": 1}}}
			}
			responses[fmt.Sprint(status)] = resp
		}
		op["responses"] = responses
		if paths[r.Path] == nil {
			paths[r.Path] = map[string]any{}
		}
		paths[r.Path][strings.ToLower(r.Method)] = op
	}
	g.defs["ErrorEnvelope"] = map[string]any{
		"type": "object", "required": []string{"error"},
		"properties": map[string]any{"error": map[string]any{
			"type": "object", "required": []string{"code", "message"},
			"properties": map[string]any{
				"code":    map[string]any{"type": "string"},
				"message": map[string]any{"type": "string"},
				"details": map[string]any{"type": "object", "description": "{} when there is no extra context; omitted on internal_error."},
			},
		}},
	}
	hooks := map[string]any{}
	for _, h := range info.Webhooks {
		var params []any
		for _, name := range sortedKeys(h.Headers) {
			params = append(params, map[string]any{"name": name, "in": "header", "required": true, "description": h.Headers[name],
				"schema": map[string]any{"type": "string"}})
		}
		hooks[h.Name] = map[string]any{"post": map[string]any{
			"summary": h.Summary, "parameters": params,
			"requestBody": map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(h.Body))}}},
			"responses": map[string]any{"2XX": map[string]any{"description": "Received; anything else is retried."}},
		}}
	}
	return map[string]any{
		"openapi":  "3.1.0",
		"info":     map[string]any{"title": info.Title, "version": info.Version, "description": info.Description},
		"paths":    paths,
		"webhooks": hooks,
		"components": map[string]any{
			"schemas": g.defs,
			"securitySchemes": map[string]any{
				"bearer":   map[string]any{"type": "http", "scheme": "bearer", "description": "Personal API token."},
				"operator": map[string]any{"type": "http", "scheme": "bearer", "description": "Operator token (`sandboxd admin operator-token create`)."},
				"oauth": map[string]any{"type": "oauth2", "description": "A connector's token from the OAuth flow (public client, " +
					"S256 PKCE, no refresh token): accepted only by GET /api/account/me and the Imports routes.",
					"flows": map[string]any{"authorizationCode": map[string]any{
						"authorizationUrl": "/connect/authorize", "tokenUrl": "/api/connect/token",
						"scopes": map[string]any{"import:read": "Read imports.",
							"import:write": "Create, upload, complete, cancel and delete imports."}}}},
			},
		},
	}
}

// errorSchema is the envelope with error.code limited to codes.
func errorSchema(codes []string) map[string]any {
	return map[string]any{"allOf": []any{
		map[string]any{"$ref": "#/components/schemas/ErrorEnvelope"},
		map[string]any{"type": "object", "properties": map[string]any{"error": map[string]any{
			"type": "object", "properties": map[string]any{"code": map[string]any{"enum": codes}}}}},
	}}
}

func operationID(r Route) string {
	parts := []string{strings.ToLower(r.Method)}
	for _, seg := range strings.Split(strings.Trim(r.Path, "/"), "/") {
		if m := pathParam.FindStringSubmatch(seg); m != nil {
			seg = "by_" + m[1]
		}
		parts = append(parts, strings.ReplaceAll(seg, "-", "_"))
	}
	return strings.Join(parts, "_")
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type schemaGen struct {
	defs  map[string]any
	enums map[string][]string
}

// enumValues resolves an enum tag: "@name" is a set of OpenAPIInfo.Enums
// (an unknown name is a programming error the document's tests catch);
// anything else is a literal comma-separated list.
func (g *schemaGen) enumValues(tag string) []string {
	name, ok := strings.CutPrefix(tag, "@")
	if !ok {
		return strings.Split(tag, ",")
	}
	vals, ok := g.enums[name]
	if !ok || len(vals) == 0 {
		panic(fmt.Sprintf("openapi: enum tag @%s names no set of OpenAPIInfo.Enums", name))
	}
	return slices.Clone(vals)
}

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage{})
)

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.Pointer:
		inner := g.schema(t.Elem())
		return map[string]any{"anyOf": []any{inner, map[string]any{"type": "null"}}}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		name := t.Name()
		if name == "" {
			return g.object(t)
		}
		ref := map[string]any{"$ref": "#/components/schemas/" + name}
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = map[string]any{} // placeholder breaks recursion
			g.defs[name] = g.object(t)
		}
		return ref
	}
	return map[string]any{}
}

func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		s := g.schema(f.Type)
		if enum := f.Tag.Get("enum"); enum != "" {
			s["enum"] = g.enumValues(enum)
		}
		if doc := f.Tag.Get("doc"); doc != "" {
			s = map[string]any{"allOf": []any{s}, "description": doc}
		}
		props[name] = s
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			required = append(required, name)
		}
	}
	out := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		out["required"] = required
	}
	return out
}
