package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/blueprintspec"
	"github.com/sandboxd/sandboxd/controlplane/libraryspec"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/sitepath"
)

// Tool inputs and outputs. Every tool that acts on a site takes siteId.

// SiteRef names a site.
type SiteRef struct {
	SiteID string `json:"siteId" jsonschema:"the site's id (site_…), from sites_list or site_create"`
}

// SiteOut is a site.
type SiteOut struct {
	Site SiteView `json:"site"`
}

// SitesOut lists sites.
type SitesOut struct {
	Sites []SiteView `json:"sites"`
}

// SiteCreateIn makes a site.
type SiteCreateIn struct {
	Name             string          `json:"name,omitempty" jsonschema:"the site's title; default WordPress sandbox"`
	PHPVersion       string          `json:"phpVersion,omitempty" jsonschema:"8.4, 8.2 (the default) or 7.4 where nodes have it"`
	TemplateID       string          `json:"templateId,omitempty" jsonschema:"make it from a ready template (tpl_…, see templates_list): its files and database"`
	BlueprintID      string          `json:"blueprintId,omitempty" jsonschema:"make it from a saved Blueprint (bp_…)"`
	Blueprint        json.RawMessage `json:"blueprint,omitempty" jsonschema:"or a Blueprint JSON object run on the new site without saving it"`
	ExpiresInMinutes int             `json:"expiresInMinutes,omitempty" jsonschema:"delete it after this many minutes (1..43200); default the plan's"`
	IdempotencyKey   string          `json:"idempotencyKey,omitempty" jsonschema:"retrying with the same key answers the first call's site instead of making another"`
}

// SiteMadeOut is a site made and ready.
type SiteMadeOut struct {
	Site     SiteView `json:"site"`
	LoginURL string   `json:"loginUrl" jsonschema:"a one-time link that opens wp-admin signed in (5 minutes)"`
}

// SiteNameIn names a new site made from another.
type SiteNameIn struct {
	SiteID         string `json:"siteId" jsonschema:"the site's id"`
	Name           string `json:"name,omitempty" jsonschema:"the new site's name"`
	IdempotencyKey string `json:"idempotencyKey,omitempty" jsonschema:"retrying with the same key answers the first call's site"`
}

// DeletedOut says something was deleted.
type DeletedOut struct {
	Deleted bool `json:"deleted"`
}

// CheckpointIn names a site's checkpoint.
type CheckpointIn struct {
	SiteID       string `json:"siteId" jsonschema:"the site's id"`
	CheckpointID string `json:"checkpointId" jsonschema:"the checkpoint's id (cp_…), from checkpoint_list"`
}

// CheckpointCreateIn keeps a site as it is.
type CheckpointCreateIn struct {
	SiteID         string `json:"siteId" jsonschema:"the site's id"`
	Name           string `json:"name,omitempty" jsonschema:"what this point is, e.g. before installing WooCommerce"`
	IdempotencyKey string `json:"idempotencyKey,omitempty" jsonschema:"retrying with the same key answers the first call's checkpoint"`
}

// CheckpointOut is a checkpoint.
type CheckpointOut struct {
	Checkpoint CheckpointView `json:"checkpoint"`
}

// CheckpointsOut lists checkpoints.
type CheckpointsOut struct {
	Checkpoints []CheckpointView `json:"checkpoints"`
}

// ScreenshotIn is what to take a picture of.
type ScreenshotIn struct {
	SiteID   string `json:"siteId" jsonschema:"the site's id"`
	Path     string `json:"path,omitempty" jsonschema:"a path on the site, default /"`
	Width    int    `json:"width,omitempty" jsonschema:"320..2560, default 1280"`
	Height   int    `json:"height,omitempty" jsonschema:"240..2560, default 800"`
	FullPage bool   `json:"fullPage,omitempty" jsonschema:"the whole page, up to 8000 pixels tall"`
	SignedIn bool   `json:"signedIn,omitempty" jsonschema:"as the site's administrator (for wp-admin pages)"`
}

// FilesIn names a directory or file of a site.
type FilesIn struct {
	SiteID string `json:"siteId" jsonschema:"the site's id"`
	Path   string `json:"path,omitempty" jsonschema:"relative to the WordPress root, e.g. wp-content/plugins; empty for the root"`
}

// FileReadOut is a file's content.
type FileReadOut struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"sizeBytes"`
	Text      string `json:"text,omitempty" jsonschema:"the content, when it is UTF-8 text"`
	Base64    string `json:"base64,omitempty" jsonschema:"the content in base64, when it is not text"`
}

// FileWriteIn writes a file.
type FileWriteIn struct {
	SiteID string `json:"siteId" jsonschema:"the site's id"`
	Path   string `json:"path" jsonschema:"relative to the WordPress root, e.g. wp-content/mu-plugins/hello.php; parents are made"`
	Text   string `json:"text,omitempty" jsonschema:"the content as text"`
	Base64 string `json:"base64,omitempty" jsonschema:"or the content in base64"`
}

// FileWriteOut says a file was written.
type FileWriteOut struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"sizeBytes"`
}

// PHPIn is PHP to run.
type PHPIn struct {
	SiteID         string `json:"siteId" jsonschema:"the site's id"`
	Code           string `json:"code" jsonschema:"a PHP file's content starting with <?php; it runs from the WordPress root, so require 'wp-load.php'; loads WordPress"`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty" jsonschema:"1..120, default 30"`
}

// SQLIn is SQL to run.
type SQLIn struct {
	SiteID         string `json:"siteId" jsonschema:"the site's id"`
	Query          string `json:"query" jsonschema:"one SQL statement, run in the site's database (tables wp_…) with the site's own account"`
	TimeoutSeconds int    `json:"timeoutSeconds,omitempty" jsonschema:"1..120, default 30"`
}

// DebugLogIn asks for the end of a site's debug log.
type DebugLogIn struct {
	SiteID string `json:"siteId" jsonschema:"the site's id"`
	Lines  int    `json:"lines,omitempty" jsonschema:"how many last lines, default 100"`
	Enable bool   `json:"enable,omitempty" jsonschema:"first turn WP_DEBUG and WP_DEBUG_LOG on (off by default), so later errors are logged"`
}

// MailOut is a site's captured mail.
type MailOut struct {
	Emails []sitespec.Email `json:"emails"`
}

// PluginsOut lists installed plugins and themes.
type PluginsOut struct {
	Plugins []sitespec.InstalledPlugin `json:"plugins"`
}

// PluginActivateIn turns a plugin on or off.
type PluginActivateIn struct {
	SiteID string `json:"siteId" jsonschema:"the site's id"`
	Slug   string `json:"slug" jsonschema:"the plugin's directory under wp-content/plugins, as plugins_list shows it"`
	Active bool   `json:"active" jsonschema:"true to activate, false to deactivate"`
}

// PluginDeployIn installs a plugin or theme.
type PluginDeployIn struct {
	SiteID        string `json:"siteId" jsonschema:"the site's id"`
	LibraryPlugin string `json:"libraryPlugin,omitempty" jsonschema:"a plugin or theme of the workspace's Library, by slug or id"`
	ZipURL        string `json:"zipUrl,omitempty" jsonschema:"or an http(s) URL of its ZIP"`
	Activate      bool   `json:"activate,omitempty" jsonschema:"activate it once installed"`
}

// PHPVersionIn switches a site's PHP.
type PHPVersionIn struct {
	SiteID     string `json:"siteId" jsonschema:"the site's id"`
	PHPVersion string `json:"phpVersion" jsonschema:"8.4, 8.2 or 7.4"`
}

// PHPConfigIn changes php.ini settings.
type PHPConfigIn struct {
	SiteID   string            `json:"siteId" jsonschema:"the site's id"`
	Settings map[string]string `json:"settings,omitempty" jsonschema:"directives to set: memory_limit, upload_max_filesize, post_max_size, max_execution_time, max_input_vars, display_errors; none to read them"`
}

// BlueprintIn is a Blueprint to check or run.
type BlueprintIn struct {
	Blueprint json.RawMessage `json:"blueprint" jsonschema:"a WordPress Playground Blueprint JSON object"`
}

// BlueprintApplyIn runs a Blueprint on a site.
type BlueprintApplyIn struct {
	SiteID      string          `json:"siteId" jsonschema:"the site's id"`
	Blueprint   json.RawMessage `json:"blueprint,omitempty" jsonschema:"a Blueprint JSON object"`
	BlueprintID string          `json:"blueprintId,omitempty" jsonschema:"or a saved Blueprint's id"`
}

// RunOut is a finished Blueprint run.
type RunOut struct {
	Run RunView `json:"run"`
}

// LoginIn asks for a one-time login.
type LoginIn struct {
	SiteID   string `json:"siteId" jsonschema:"the site's id"`
	Redirect string `json:"redirect,omitempty" jsonschema:"where to land, a path such as /wp-admin/plugins.php"`
}

// JobIn names a job.
type JobIn struct {
	JobID string `json:"jobId" jsonschema:"a job's id (job_…)"`
}

// JobOut is a job.
type JobOut struct {
	Job JobView `json:"job"`
}

// TemplatesOut lists templates.
type TemplatesOut struct {
	Templates []TemplateView `json:"templates"`
}

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

// tool adds a typed tool; err is the tool's error (an API error keeps
// its code).
func tool[In, Out any](s *mcp.Server, name, description string, annotate *mcp.ToolAnnotations,
	fn func(ctx context.Context, req *mcp.CallToolRequest, in In) (Out, error)) {
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: description, Annotations: annotate},
		func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
			out, err := fn(ctx, req, in)
			return nil, out, err
		})
}

var (
	readOnly    = &mcp.ToolAnnotations{ReadOnlyHint: true}
	destructive = &mcp.ToolAnnotations{DestructiveHint: ptrTo(true)}
)

func ptrTo[T any](v T) *T { return &v }

// sitePath is the API path of a site's sub-resource.
func sitePath(id string, rest ...string) string {
	return "/api/app/sites/" + url.PathEscape(id) + strings.Join(rest, "")
}

// need refuses a tool call missing a required value.
func need(field, v string) error {
	if strings.TrimSpace(v) == "" {
		return &toolError{Status: 400, Code: apierr.CodeInvalidRequest, Message: field + " is required", Details: map[string]any{"field": field}}
	}
	return nil
}

// loginURL is a one-time wp-admin link for a site, or "" if none can be
// made now.
func (s *mcpSession) loginURL(ctx context.Context, id, redirect string) string {
	var link sitespec.LoginLink
	body := map[string]any{}
	if redirect != "" {
		body["redirect"] = redirect
	}
	if err := s.call(ctx, "POST", "/api/sites/"+url.PathEscape(id)+"/magic-login", nil, body, "", &link); err != nil {
		return ""
	}
	return link.URL
}

// siteAfter reads a site once its job is done.
func (s *mcpSession) siteAfter(ctx context.Context, req *mcp.CallToolRequest, made siteJobResponse, what string) (SiteView, error) {
	if _, err := s.waitJob(ctx, req, made.JobID, what); err != nil {
		return SiteView{}, err
	}
	var out siteResponse
	err := s.call(ctx, "GET", sitePath(made.Site.ID), nil, nil, "", &out)
	return out.Site, err
}

func (a mcpRoutes) mcpServer(s *mcpSession) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "sandboxd", Title: "sandboxd: disposable WordPress sites", Version: "1"},
		&mcp.ServerOptions{Instructions: "Disposable WordPress sites for an agent's work: site_create gives a ready site with its URL " +
			"and a login link; change it with file_write, php_run, sql_run, plugin_deploy; look at it with screenshot " +
			"(an image), debug_log and mail_list; checkpoint_create before a risky change and checkpoint_restore to undo it; " +
			"site_fork to try two things side by side; site_delete when done. Errors are JSON {error: {code, message, details}} " +
			"with the REST API's codes."})

	tool(srv, "sites_list", "List the workspace's WordPress sites with their status, URL, PHP and WordPress versions.", readOnly,
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (SitesOut, error) {
			var out SitesOut
			err := s.call(ctx, "GET", "/api/app/sites", nil, nil, "", &out)
			return out, err
		})
	tool(srv, "site_get", "One site: its status (creating, ready, failed, deleting), URL, versions, whether it sleeps.", readOnly,
		func(ctx context.Context, _ *mcp.CallToolRequest, in SiteRef) (SiteOut, error) {
			var out SiteOut
			err := s.call(ctx, "GET", sitePath(in.SiteID), nil, nil, "", &out)
			return out, err
		})
	tool(srv, "site_create", "Make a WordPress site and wait until it is ready (a few seconds; progress is reported): fresh, from a "+
		"template, or from a Blueprint (saved, or given as JSON). Answers the site (its url) and a one-time wp-admin login link.", nil,
		func(ctx context.Context, req *mcp.CallToolRequest, in SiteCreateIn) (SiteMadeOut, error) {
			return a.createSite(ctx, req, s, in)
		})
	tool(srv, "site_delete", "Delete a site for good: its files, database and checkpoints.", destructive,
		func(ctx context.Context, req *mcp.CallToolRequest, in SiteRef) (DeletedOut, error) {
			var made siteJobResponse
			if err := s.call(ctx, "DELETE", sitePath(in.SiteID), nil, nil, "", &made); err != nil {
				return DeletedOut{}, err
			}
			_, err := s.waitJob(ctx, req, made.JobID, "deleting the site")
			return DeletedOut{Deleted: err == nil}, err
		})
	tool(srv, "site_reset", "Put a site back to what it was made from (a fresh install or its template), keeping its id and URL. "+
		"Its checkpoints stay.", destructive,
		func(ctx context.Context, req *mcp.CallToolRequest, in SiteRef) (SiteOut, error) {
			var made siteJobResponse
			if err := s.call(ctx, "POST", sitePath(in.SiteID, "/reset"), nil, map[string]any{}, "", &made); err != nil {
				return SiteOut{}, err
			}
			site, err := s.siteAfter(ctx, req, made, "resetting the site")
			return SiteOut{Site: site}, err
		})
	tool(srv, "site_fork", "Copy a site (its files and database, every URL moved) to a new site at its own URL, while the source "+
		"keeps serving; waits until the copy is ready.", nil,
		func(ctx context.Context, req *mcp.CallToolRequest, in SiteNameIn) (SiteMadeOut, error) {
			var made siteJobResponse
			body := map[string]any{}
			if in.Name != "" {
				body["name"] = in.Name
			}
			if err := s.call(ctx, "POST", sitePath(in.SiteID, "/fork"), nil, body, in.IdempotencyKey, &made); err != nil {
				return SiteMadeOut{}, err
			}
			site, err := s.siteAfter(ctx, req, made, "forking the site")
			if err != nil {
				return SiteMadeOut{}, err
			}
			return SiteMadeOut{Site: site, LoginURL: s.loginURL(ctx, site.ID, "")}, nil
		})
	tool(srv, "checkpoint_create", "Keep a site's files and database as they are now (milliseconds, whatever its size; it serves "+
		"on). Make one before a risky change; checkpoint_restore undoes everything since.", nil,
		func(ctx context.Context, _ *mcp.CallToolRequest, in CheckpointCreateIn) (CheckpointOut, error) {
			var out CheckpointOut
			body := map[string]any{}
			if in.Name != "" {
				body["name"] = in.Name
			}
			err := s.call(ctx, "POST", sitePath(in.SiteID, "/checkpoints"), nil, body, in.IdempotencyKey, &out)
			return out, err
		})
	tool(srv, "checkpoint_list", "A site's checkpoints, newest first.", readOnly,
		func(ctx context.Context, _ *mcp.CallToolRequest, in SiteRef) (CheckpointsOut, error) {
			var out CheckpointsOut
			err := s.call(ctx, "GET", sitePath(in.SiteID, "/checkpoints"), nil, nil, "", &out)
			return out, err
		})
	tool(srv, "checkpoint_restore", "Put a site back exactly as it was at a checkpoint (files, database), at the same URL; "+
		"waits until it serves again. The checkpoint stays, to restore again.", destructive,
		func(ctx context.Context, req *mcp.CallToolRequest, in CheckpointIn) (SiteOut, error) {
			var made siteJobResponse
			if err := s.call(ctx, "POST", sitePath(in.SiteID, "/checkpoints/", url.PathEscape(in.CheckpointID), "/restore"), nil, nil, "", &made); err != nil {
				return SiteOut{}, err
			}
			site, err := s.siteAfter(ctx, req, made, "restoring the checkpoint")
			return SiteOut{Site: site}, err
		})
	tool(srv, "checkpoint_delete", "Delete a checkpoint.", destructive,
		func(ctx context.Context, _ *mcp.CallToolRequest, in CheckpointIn) (DeletedOut, error) {
			err := s.call(ctx, "DELETE", sitePath(in.SiteID, "/checkpoints/", url.PathEscape(in.CheckpointID)), nil, nil, "", nil)
			return DeletedOut{Deleted: err == nil}, err
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "screenshot", Annotations: readOnly, Description: "Look at a page of a site: a PNG taken by a real " +
		"browser, returned as an image (and kept 15 minutes at url). signedIn shows wp-admin pages as the administrator."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in ScreenshotIn) (*mcp.CallToolResult, *sitespec.Screenshot, error) {
			return a.screenshot(ctx, s, in)
		})
	tool(srv, "files_list", "List a directory of a site's WordPress root.", readOnly,
		func(ctx context.Context, _ *mcp.CallToolRequest, in FilesIn) (FileListing, error) {
			var out FileListing
			q := url.Values{}
			if in.Path != "" {
				q.Set("path", sitepath.Encode(in.Path))
			}
			err := s.call(ctx, "GET", sitePath(in.SiteID, "/files"), q, nil, "", &out)
			return out, err
		})
	tool(srv, "file_read", "Read one file of a site (up to 32 MiB): text, or base64 when it is not UTF-8.", readOnly,
		func(ctx context.Context, _ *mcp.CallToolRequest, in FilesIn) (FileReadOut, error) {
			if err := need("path", in.Path); err != nil {
				return FileReadOut{}, err
			}
			var fc FileContent
			if err := s.call(ctx, "GET", sitePath(in.SiteID, "/files/content"), url.Values{"path": {sitepath.Encode(in.Path)}}, nil, "", &fc); err != nil {
				return FileReadOut{}, err
			}
			out := FileReadOut{Path: fc.Path, SizeBytes: fc.SizeBytes}
			if b, err := base64.StdEncoding.DecodeString(fc.ContentBase64); err == nil && utf8.Valid(b) {
				out.Text = string(b)
			} else {
				out.Base64 = fc.ContentBase64
			}
			return out, nil
		})
	tool(srv, "file_write", "Write one file of a site (replacing it; parents are made), as the site's user.", nil,
		func(ctx context.Context, _ *mcp.CallToolRequest, in FileWriteIn) (FileWriteOut, error) {
			if err := need("path", in.Path); err != nil {
				return FileWriteOut{}, err
			}
			b64 := in.Base64
			if b64 == "" {
				b64 = base64.StdEncoding.EncodeToString([]byte(in.Text))
			}
			var out struct {
				Path      string `json:"path"`
				SizeBytes int64  `json:"sizeBytes"`
			}
			err := s.call(ctx, "POST", sitePath(in.SiteID, "/files/write"), url.Values{"path": {sitepath.Encode(in.Path)}},
				map[string]string{"contentBase64": b64}, "", &out)
			return FileWriteOut{Path: in.Path, SizeBytes: out.SizeBytes}, err
		})
	tool(srv, "php_run", "Run PHP in a site as its user (the PHP CLI, from the WordPress root): stdout, stderr and the exit code. "+
		"require 'wp-load.php'; gives WordPress's functions.", nil,
		func(ctx context.Context, _ *mcp.CallToolRequest, in PHPIn) (sitespec.PHPRun, error) {
			var out sitespec.PHPRun
			err := s.call(ctx, "POST", sitePath(in.SiteID, "/php"), nil, PHPRequest{Code: in.Code, TimeoutSeconds: in.TimeoutSeconds}, "", &out)
			return out, err
		})
	tool(srv, "sql_run", "Run one SQL statement in a site's database (its own account): columns and rows, or the rows changed.", nil,
		func(ctx context.Context, _ *mcp.CallToolRequest, in SQLIn) (sitespec.SQLRun, error) {
			var out sitespec.SQLRun
			err := s.call(ctx, "POST", sitePath(in.SiteID, "/sql"), nil, SQLRequest{Query: in.Query, TimeoutSeconds: in.TimeoutSeconds}, "", &out)
			return out, err
		})
	tool(srv, "debug_log", "The end of a site's wp-content/debug.log (PHP errors and notices), optionally turning debug logging on first.", nil,
		func(ctx context.Context, _ *mcp.CallToolRequest, in DebugLogIn) (sitespec.DebugLog, error) {
			var out sitespec.DebugLog
			if in.Enable {
				if err := s.call(ctx, "PUT", sitePath(in.SiteID, "/debug"), nil, map[string]bool{"wpDebug": true, "wpDebugLog": true}, "", nil); err != nil {
					return out, err
				}
			}
			lines := in.Lines
			if lines <= 0 {
				lines = 100
			}
			err := s.call(ctx, "GET", sitePath(in.SiteID, "/debug/log"), url.Values{"lines": {strconv.Itoa(lines)}}, nil, "", &out)
			return out, err
		})
	tool(srv, "mail_list", "The mail a site sent (captured, never delivered), newest first.", readOnly,
		func(ctx context.Context, _ *mcp.CallToolRequest, in SiteRef) (MailOut, error) {
			var out MailOut
			err := s.call(ctx, "GET", sitePath(in.SiteID, "/email"), nil, nil, "", &out)
			return out, err
		})
	tool(srv, "plugins_list", "A site's installed plugins and themes, with their version and whether each is active.", readOnly,
		func(ctx context.Context, _ *mcp.CallToolRequest, in SiteRef) (PluginsOut, error) {
			var out PluginsOut
			err := s.call(ctx, "GET", sitePath(in.SiteID, "/plugins"), nil, nil, "", &out)
			return out, err
		})
	tool(srv, "plugin_activate", "Activate or deactivate an installed plugin (as WordPress's Plugins screen does).", nil,
		func(ctx context.Context, _ *mcp.CallToolRequest, in PluginActivateIn) (PluginsOut, error) {
			return a.activatePlugin(ctx, s, in)
		})
	tool(srv, "plugin_deploy", "Install a plugin or theme from the workspace's Library or a ZIP URL (replacing an installed copy), "+
		"optionally activating it; waits until it is in place.", nil,
		func(ctx context.Context, req *mcp.CallToolRequest, in PluginDeployIn) (PluginsOut, error) {
			body := DeployPluginRequest{Activate: in.Activate}
			if in.LibraryPlugin != "" {
				body.LibraryPlugin = &in.LibraryPlugin
			}
			if in.ZipURL != "" {
				body.ZipURL = &in.ZipURL
			}
			var made deployResponse
			if err := s.call(ctx, "POST", sitePath(in.SiteID, "/plugins"), nil, body, "", &made); err != nil {
				return PluginsOut{}, err
			}
			if _, err := s.waitJob(ctx, req, made.JobID, "deploying the plugin"); err != nil {
				return PluginsOut{}, err
			}
			var out PluginsOut
			err := s.call(ctx, "GET", sitePath(in.SiteID, "/plugins"), nil, nil, "", &out)
			return out, err
		})
	tool(srv, "php_version_set", "Switch a site to another PHP version; waits until WordPress answers on it (a failed switch leaves the site as it was).", nil,
		func(ctx context.Context, req *mcp.CallToolRequest, in PHPVersionIn) (SiteOut, error) {
			var made phpVersionResponse
			if err := s.call(ctx, "PUT", sitePath(in.SiteID, "/php-version"), nil, PHPVersionRequest{PHPVersion: in.PHPVersion}, "", &made); err != nil {
				return SiteOut{}, err
			}
			site, err := s.siteAfter(ctx, req, siteJobResponse{Site: SiteView{ID: in.SiteID}, JobID: made.JobID}, "switching PHP")
			return SiteOut{Site: site}, err
		})
	tool(srv, "php_config", "Read a site's php.ini overrides, or set some (memory_limit, upload_max_filesize, post_max_size, "+
		"max_execution_time, max_input_vars, display_errors).", nil,
		func(ctx context.Context, req *mcp.CallToolRequest, in PHPConfigIn) (PHPConfig, error) {
			if len(in.Settings) == 0 {
				var out phpConfigResponse
				err := s.call(ctx, "GET", sitePath(in.SiteID, "/php-config"), nil, nil, "", &out)
				return out.PHPConfig, err
			}
			var out phpConfigJobResponse
			if err := s.call(ctx, "PUT", sitePath(in.SiteID, "/php-config"), nil, map[string]any{"settings": in.Settings}, "", &out); err != nil {
				return PHPConfig{}, err
			}
			_, err := s.waitJob(ctx, req, out.JobID, "applying php.ini")
			return out.PHPConfig, err
		})
	tool(srv, "blueprint_validate", "Check a WordPress Playground Blueprint before running it: what runs here as it is, what is adapted, what is refused.", readOnly,
		func(ctx context.Context, _ *mcp.CallToolRequest, in BlueprintIn) (blueprintspec.Validation, error) {
			var out blueprintspec.Validation
			err := s.call(ctx, "POST", "/api/app/blueprints/validate", nil, ValidateBlueprintRequest{Source: in.Blueprint}, "", &out)
			return out, err
		})
	tool(srv, "blueprint_apply", "Run a Blueprint (JSON, or a saved one's id) on a ready site, step by step; waits for its end.", nil,
		func(ctx context.Context, req *mcp.CallToolRequest, in BlueprintApplyIn) (RunOut, error) {
			var out runResponse
			if err := s.call(ctx, "POST", sitePath(in.SiteID, "/blueprint"), nil,
				ApplyBlueprintRequest{BlueprintID: in.BlueprintID, Source: in.Blueprint}, "", &out); err != nil {
				return RunOut{}, err
			}
			run, err := s.waitRun(ctx, req, out.Run)
			if err != nil {
				return RunOut{}, err
			}
			return RunOut{Run: *run}, nil
		})
	tool(srv, "login_link", "A one-time link (5 minutes) that opens the site signed in as its administrator.", nil,
		func(ctx context.Context, _ *mcp.CallToolRequest, in LoginIn) (sitespec.LoginLink, error) {
			var out sitespec.LoginLink
			body := map[string]any{}
			if in.Redirect != "" {
				body["redirect"] = in.Redirect
			}
			err := s.call(ctx, "POST", "/api/sites/"+url.PathEscape(in.SiteID)+"/magic-login", nil, body, "", &out)
			return out, err
		})
	tool(srv, "templates_list", "The workspace's templates (frozen sites to make new ones from with site_create templateId).", readOnly,
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (TemplatesOut, error) {
			var out TemplatesOut
			err := s.call(ctx, "GET", "/api/app/templates", nil, nil, "", &out)
			return out, err
		})
	tool(srv, "job_get", "A job's status and progress (for a long tool that answered job_pending).", readOnly,
		func(ctx context.Context, _ *mcp.CallToolRequest, in JobIn) (JobOut, error) {
			var out JobOut
			err := s.call(ctx, "GET", "/api/app/jobs/"+url.PathEscape(in.JobID), nil, nil, "", &out)
			return out, err
		})
	tool(srv, LicenseToolName, "Returns the license key stored with a plugin or theme of the workspace's Library, for activating it on a sandbox. "+
		"Every read is recorded (licenseKeyLastReadAt).", nil,
		func(ctx context.Context, _ *mcp.CallToolRequest, in LicenseToolInput) (LicenseToolOutput, error) {
			return a.readLicense(ctx, s.caller, in.Plugin)
		})
	return srv
}

// createSite makes a site (fresh, from a template, or from a Blueprint)
// and waits until it is ready.
func (a mcpRoutes) createSite(ctx context.Context, req *mcp.CallToolRequest, s *mcpSession, in SiteCreateIn) (SiteMadeOut, error) {
	body := map[string]any{}
	if in.Name != "" {
		body["name"] = in.Name
	}
	if in.PHPVersion != "" {
		body["phpVersion"] = in.PHPVersion
	}
	if in.TemplateID != "" {
		body["templateId"] = in.TemplateID
	}
	if in.ExpiresInMinutes != 0 {
		body["expiresInMinutes"] = in.ExpiresInMinutes
	}
	var site SiteView
	switch {
	case in.BlueprintID != "":
		var made siteRunResponse
		if err := s.call(ctx, "POST", "/api/app/blueprints/"+url.PathEscape(in.BlueprintID)+"/sites", nil,
			map[string]any{"name": in.Name}, in.IdempotencyKey, &made); err != nil {
			return SiteMadeOut{}, err
		}
		if _, err := s.waitRun(ctx, req, made.Run); err != nil {
			return SiteMadeOut{}, err
		}
		site = made.Site
	default:
		var made siteJobResponse
		if err := s.call(ctx, "POST", "/api/app/sites", nil, body, in.IdempotencyKey, &made); err != nil {
			return SiteMadeOut{}, err
		}
		var err error
		if site, err = s.siteAfter(ctx, req, made, "making the site"); err != nil {
			return SiteMadeOut{}, err
		}
		if len(in.Blueprint) > 0 {
			var out runResponse
			if err := s.call(ctx, "POST", sitePath(site.ID, "/blueprint"), nil, ApplyBlueprintRequest{Source: in.Blueprint}, "", &out); err != nil {
				return SiteMadeOut{Site: site}, err
			}
			if _, err := s.waitRun(ctx, req, out.Run); err != nil {
				return SiteMadeOut{Site: site}, err
			}
		}
	}
	var out siteResponse
	if err := s.call(ctx, "GET", sitePath(site.ID), nil, nil, "", &out); err != nil {
		return SiteMadeOut{}, err
	}
	return SiteMadeOut{Site: out.Site, LoginURL: s.loginURL(ctx, site.ID, "")}, nil
}

// screenshot takes a picture and answers it as an image.
func (a mcpRoutes) screenshot(ctx context.Context, s *mcpSession, in ScreenshotIn) (*mcp.CallToolResult, *sitespec.Screenshot, error) {
	var out screenshotResponse
	body := sitespec.ScreenshotRequest{Path: in.Path, Width: in.Width, Height: in.Height, FullPage: in.FullPage, SignedIn: in.SignedIn}
	if err := s.call(ctx, "POST", sitePath(in.SiteID, "/screenshot"), nil, body, "", &out); err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(out.Screenshot.URL)
	if err != nil {
		return nil, nil, err
	}
	png, err := s.raw(ctx, "GET", u.Path, u.Query(), nil, "", nil)
	if err != nil {
		return nil, nil, err
	}
	shot := out.Screenshot
	note := fmt.Sprintf("A %dx%d screenshot of %s%s (kept until %s at %s).", shot.Width, shot.Height, in.SiteID, orSlash(in.Path),
		shot.ExpiresAt.Format(time.RFC3339), shot.URL)
	if !shot.Loaded {
		note += " The page had not finished loading when it was taken."
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: png, MIMEType: "image/png"}, &mcp.TextContent{Text: note}}}, shot, nil
}

func orSlash(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// activatePluginPHP activates or deactivates the plugin whose directory
// (or single file) is named by the script's input.
const activatePluginPHP = `<?php
require 'wp-load.php';
require_once ABSPATH . 'wp-admin/includes/plugin.php';
$slug = %s; $active = %s;
$file = '';
foreach (array_keys(get_plugins()) as $f) { if (dirname($f) === $slug || $f === $slug || $f === $slug . '.php') { $file = $f; break; } }
if ($file === '') { fwrite(STDERR, "no installed plugin " . $slug); exit(3); }
$r = $active ? activate_plugin($file) : (deactivate_plugins($file) ?: null);
if (is_wp_error($r)) { fwrite(STDERR, $r->get_error_message()); exit(4); }
echo $file;
`

// activatePlugin turns a plugin on or off through the site's PHP.
func (a mcpRoutes) activatePlugin(ctx context.Context, s *mcpSession, in PluginActivateIn) (PluginsOut, error) {
	if err := need("slug", in.Slug); err != nil {
		return PluginsOut{}, err
	}
	code := fmt.Sprintf(activatePluginPHP, "base64_decode('"+base64.StdEncoding.EncodeToString([]byte(in.Slug))+"')", strconv.FormatBool(in.Active))
	var run sitespec.PHPRun
	if err := s.call(ctx, "POST", sitePath(in.SiteID, "/php"), nil, PHPRequest{Code: code}, "", &run); err != nil {
		return PluginsOut{}, err
	}
	switch run.ExitCode {
	case 0:
	case 3:
		return PluginsOut{}, &toolError{Status: 404, Code: "plugin_not_found", Message: run.Stderr, Details: map[string]any{"slug": in.Slug}}
	default:
		return PluginsOut{}, &toolError{Status: 400, Code: apierr.CodeInvalidRequest, Message: "the plugin could not be switched: " + run.Stderr}
	}
	var out PluginsOut
	err := s.call(ctx, "GET", sitePath(in.SiteID, "/plugins"), nil, nil, "", &out)
	return out, err
}

// readLicense opens an entry's key for an agent and stamps the read; the
// key is returned only once the stamp is committed.
func (a mcpRoutes) readLicense(ctx context.Context, c *Caller, plugin string) (LicenseToolOutput, error) {
	if !c.Caps.Has(access.Reusables) {
		return LicenseToolOutput{}, &toolError{Status: 403, Code: apierr.CodeCapabilityRequired,
			Message: "capability_required: reading license keys needs the reusables capability", Details: map[string]any{"capability": access.Reusables}}
	}
	e, err := a.store.LibraryEntry(c.Workspace.ID, plugin)
	if err != nil {
		return LicenseToolOutput{}, err
	}
	if e == nil {
		return LicenseToolOutput{}, &toolError{Status: 404, Code: libraryspec.CodeEntryNotFound,
			Message: fmt.Sprintf("%s: no Library entry %q in this workspace", libraryspec.CodeEntryNotFound, plugin)}
	}
	key, err := a.library.ReadLicense(ctx, e, c.Account.ID)
	if err != nil {
		return LicenseToolOutput{}, err
	}
	return LicenseToolOutput{PluginID: e.ID, Slug: e.Slug, Name: e.Name, LicenseKey: key}, nil
}
