// Package sitespec holds the shapes and rules of site operations (what a
// create asks for, what a site's toolbox answers, which php.ini settings
// a tenant may change) shared by the sites service, which talks to
// agents, and the REST API, which must not. It depends on neither.
package sitespec

import (
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// PHPVersions are the versions the contract allows.
var PHPVersions = []string{"8.5", "8.4", "8.3", "8.2", "8.1", "7.4"}

// WordPressOf is the WordPress each PHP image carries (Debian's suites:
// bullseye, bookworm, trixie).
var WordPressOf = map[string]string{"7.4": "5.7", "8.2": "6.1", "8.4": "6.8"}

// DefaultPHPVersion is used when a request names none.
const DefaultPHPVersion = "8.2"

// ValidPHP reports whether v is a version the contract allows.
func ValidPHP(v string) bool { return slices.Contains(PHPVersions, v) }

// Create is what a new site is made from.
type Create struct {
	Workspace *state.Workspace
	// By is the account asking; the site's admin email is theirs.
	By               *state.Account
	Name             string
	PHPVersion       string
	WordPressVersion string
	TemplateID       string
	ExpiresInMinutes *int
	// Launch, for a demo launched from the template's public link, is
	// written with the site (its SiteID, SiteURL and JobID filled in).
	Launch *state.DemoLaunch
	// Run, for a site made from a Blueprint, is the run its job carries
	// out once the site is ready (its SiteID and JobID are filled in).
	Run *state.BlueprintRun
	// Bake, with Run, makes the site a bake's scratch site: the template
	// (building, within BakeQuota) is added with it.
	Bake      *state.Template
	BakeQuota state.Quota
	// Import, for a sandbox an import makes, moves the import (from one
	// of ImportIfStatus) to restoring with its site and job, in the same
	// entry; the job restores the archive once the site is ready.
	Import         *state.Import
	ImportIfStatus []string
	// Answer, for a create a REST request asked for, is rendered from
	// what the create made and goes in its Raft entry (nil: none).
	Answer *writes.Answer[Made]
}

// Fork is what a copy of a running site is made from.
type Fork struct {
	Source *state.Site
	// By is the account asking.
	By               *state.Account
	Name             string
	ExpiresInMinutes *int
	Answer           *writes.Answer[Made]
}

// Made is what a site's create or change applied: the site as it now is
// and its job, with the run, baked template or import it started. REST
// answers are rendered from it.
type Made struct {
	Site     state.Site
	JobID    string
	Run      *state.BlueprintRun
	Template *state.Template
	Import   *state.Import
}

// Deploy is a plugin or theme bound for a site: exactly one of a Library
// entry (slug or id), a URL the job downloads, or an uploaded ZIP.
type Deploy struct {
	LibraryPlugin *string
	ZipURL        *string
	// Upload is an uploaded ZIP; non-nil (even empty) means the request
	// was an upload.
	Upload   []byte
	Activate bool
}

// LoginLink is the contract's one-time login link.
type LoginLink struct {
	Token     string    `json:"token"`
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// DebugSettings are WordPress's debug constants of a site.
type DebugSettings struct {
	WPDebug        bool `json:"wpDebug"`
	WPDebugLog     bool `json:"wpDebugLog"`
	WPDebugDisplay bool `json:"wpDebugDisplay"`
	ScriptDebug    bool `json:"scriptDebug"`
}

// DebugPatch changes any subset of the debug settings.
type DebugPatch struct {
	WPDebug        *bool `json:"wpDebug,omitempty"`
	WPDebugLog     *bool `json:"wpDebugLog,omitempty"`
	WPDebugDisplay *bool `json:"wpDebugDisplay,omitempty"`
	ScriptDebug    *bool `json:"scriptDebug,omitempty"`
}

// DebugLog is the contract's debug log result.
type DebugLog struct {
	// Content is the last lines asked for, from the log's last MiB at
	// most: one bounded read, however large the log.
	Content string `json:"content" doc:"The last lines asked for, read from the log's last MiB at most (a last line longer than that is its last MiB); invalid UTF-8 is replaced by U+FFFD."`
	Exists  bool   `json:"exists" doc:"false, with empty content, when wp-content/debug.log does not exist, is a link or is not a regular file."`
	Lines   int    `json:"lines"`
	// Truncated says the log is longer than the end that was read (1 MiB).
	Truncated bool `json:"truncated" doc:"The log is longer than the last MiB that was read; older lines are not shown."`
}

// Tail lengths of the debug log, from the contract.
const (
	DefaultLogLines = 500
	MaxLogLines     = 2000
)

// DatabaseAccess is a site's own database: credentials that reach only it
// and a one-time link to a database UI signed in to it.
type DatabaseAccess struct {
	Host       string    `json:"host" doc:"As the site's node sees it; reach it through adminerUrl."`
	Port       int       `json:"port"`
	Name       string    `json:"name"`
	User       string    `json:"user"`
	Password   string    `json:"password"`
	AdminerURL string    `json:"adminerUrl" doc:"Opens Adminer signed in to this database; works once."`
	ExpiresAt  time.Time `json:"adminerUrlExpiresAt"`
}

// Email is one message a site sent; it was captured, not delivered.
type Email struct {
	ID      string    `json:"id"`
	From    string    `json:"from"`
	To      string    `json:"to" doc:"Recipients, comma-separated."`
	Subject string    `json:"subject"`
	Date    time.Time `json:"date"`
	Text    string    `json:"text"`
	HTML    string    `json:"html"`
}

// InstalledPlugin is a plugin or theme installed in a site.
type InstalledPlugin struct {
	Slug    string `json:"slug" doc:"Its directory under wp-content/plugins or wp-content/themes."`
	Name    string `json:"name"`
	Version string `json:"version"`
	Active  bool   `json:"active"`
	Kind    string `json:"kind" enum:"@pluginKind"`
}

// PluginKinds is what an installed plugin can be.
var PluginKinds = []string{"plugin", "theme"}

// FileEntryTypes is what a directory listing's entry can be (the agent's
// in-site lister reports these).
var FileEntryTypes = []string{"file", "directory", "symlink"}

// CodeFileNotFound answers a file-manager call on a path that does not exist.
const CodeFileNotFound = "file_not_found"

// File-manager operations.
const (
	FileList   = "list"
	FileRead   = "read"
	FileWrite  = "write"
	FileUpload = "upload"
	FileMkdir  = "mkdir"
	FileDelete = "delete"
	FileRename = "rename"
	FileCopy   = "copy"
)

// FileOp is one file-manager operation, its paths relative to the
// WordPress root.
type FileOp struct {
	Op             string
	Path, From, To string
	Content        []byte
	// Filename is an upload's own name, kept when Path is a directory.
	Filename string
}

// FileEntry is one directory entry of a listing.
type FileEntry struct {
	Name       string `json:"name"`
	Type       string `json:"type" enum:"@fileEntryType"`
	SizeBytes  int64  `json:"sizeBytes"`
	ModifiedAt string `json:"modifiedAt"`
}

// FileAnswer is what the file manager answers to an operation; which
// fields are set depends on it.
type FileAnswer struct {
	Path, From, To string
	SizeBytes      *int64
	Entries        []FileEntry
	// Truncated is set when a directory has more than 10,000 entries.
	Truncated bool
	Content   []byte
}

// NotReady is the error of an operation that needs a ready site: 400
// invalid_request with details.status, the site's.
func NotReady(s *state.Site) error {
	if s.Move != nil {
		return apierr.Invalid("", "the site is moving to another node; try again in a minute").With("status", s.Status)
	}
	if s.Status == state.SiteUnavailable {
		return apierr.Invalid("", "the site is unavailable: its node is down; try again when it is back").With("status", s.Status)
	}
	return apierr.Invalid("", "the site is %s; this needs a ready site", s.Status).With("status", s.Status)
}

// PHPRun is what a PHP script run in a site did.
type PHPRun struct {
	ExitCode int    `json:"exitCode" doc:"The PHP CLI's exit code; -1 when it was killed at its time bound."`
	Stdout   string `json:"stdout" doc:"Its first MiB (invalid UTF-8 replaced by U+FFFD)."`
	Stderr   string `json:"stderr" doc:"Its first 64 KiB: errors and warnings (display_errors goes here)."`
	// Truncated says stdout or stderr was longer than what is shown.
	Truncated bool `json:"truncated"`
	TimedOut  bool `json:"timedOut" doc:"It ran past its time bound (timeoutSeconds, default 30, at most 120) and was killed."`
}

// SQLRun is what one SQL statement run in a site's database did.
type SQLRun struct {
	Columns []string `json:"columns" doc:"The result's column names; empty for a statement that returns no rows."`
	// Rows hold each value as a string, or null.
	Rows         [][]*string `json:"rows" doc:"At most 1,000 rows and 1 MiB of values; each value a string or null."`
	AffectedRows int64       `json:"affectedRows" doc:"Rows an INSERT, UPDATE or DELETE changed."`
	Truncated    bool        `json:"truncated" doc:"The result had more rows than shown: the statement was cut off there."`
}

// ScreenshotRequest is what to take a picture of.
type ScreenshotRequest struct {
	Path     string `json:"path,omitempty" doc:"A path on the site, default /."`
	Width    int    `json:"width,omitempty" doc:"320..2560, default 1280."`
	Height   int    `json:"height,omitempty" doc:"240..2560, default 800: the viewport (a full page is taller)."`
	FullPage bool   `json:"fullPage,omitempty" doc:"The whole page, up to 8000 pixels tall."`
	SignedIn bool   `json:"signedIn,omitempty" doc:"Taken signed in as the site's administrator (a one-time login of its own)."`
}

// Screenshot is a picture of a site's page, kept a short while.
type Screenshot struct {
	URL       string    `json:"url" doc:"The PNG, for anyone holding this URL, until expiresAt."`
	Width     int       `json:"width"`
	Height    int       `json:"height"`
	Loaded    bool      `json:"loaded" doc:"false when the page had not finished loading at the shot's bound (10 s): it is shown as it was then."`
	ExpiresAt time.Time `json:"expiresAt"`
	// PNG is the picture itself, for an MCP answer (not in REST's).
	PNG []byte `json:"-"`
}
