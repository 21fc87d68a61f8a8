// Package libraryspec is what the API says of the workspace Library: its
// limits, entry sources and error code. It holds no Raft command.
package libraryspec

import "github.com/sandboxd/sandboxd/internal/wpzip"

// CodeEntryNotFound is the contract's code for an unknown entry.
const CodeEntryNotFound = "plugin_library_entry_not_found"

// Limits of the Library.
const (
	// MaxZipBytes bounds a plugin or theme ZIP (upload, release or URL).
	MaxZipBytes = wpzip.MaxZipBytes
	// MaxLicenseKey bounds a license key.
	MaxLicenseKey = 1024
)

// Entry sources.
const (
	SourceUpload = "upload"
	SourceGitHub = "github_release"
)
