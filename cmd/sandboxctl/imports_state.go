package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// importsState is what an interrupted push keeps next to its archive so
// that the same command (or `imports resume`) goes on with the same
// import: the server holds the bytes so far and says how many.
type importsState struct {
	ImportID  string `json:"importId"`
	Server    string `json:"server"`
	Workspace string `json:"workspace,omitempty"`
	// Source is PATH, absolute.
	Source string `json:"source"`
	// Archive is the file uploaded: the cached pack of a directory, or
	// the user's own archive.
	Archive string `json:"archive"`
	// Cached marks an archive sandboxctl made, removed with the state.
	Cached    bool      `json:"cached"`
	SizeBytes int64     `json:"sizeBytes"`
	SHA256    string    `json:"sha256"`
	SourceURL string    `json:"sourceUrl"`
	SiteID    string    `json:"siteId,omitempty"`
	CreatedAt time.Time `json:"createdAt"`

	// path is where the state is kept.
	path string
}

// importsCacheDir holds packed archives and push states:
// $SANDBOXCTL_CACHE/imports, or sandboxctl/imports under the user's
// cache directory.
func importsCacheDir() (string, error) {
	base := os.Getenv("SANDBOXCTL_CACHE")
	if base == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory: %w (set SANDBOXCTL_CACHE)", err)
		}
		base = filepath.Join(dir, "sandboxctl")
	}
	dir := filepath.Join(base, "imports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("make the cache directory: %w", err)
	}
	return dir, nil
}

// importsKey names the files of one push: the same server, workspace and
// PATH give the same key.
func importsKey(server, workspace, source string) string {
	h := sha256.Sum256([]byte(strings.TrimRight(server, "/") + "\n" + workspace + "\n" + source))
	return hex.EncodeToString(h[:10])
}

// importsStatePath and importsArchivePath are a push's files in dir.
func importsStatePath(dir, key string) string   { return filepath.Join(dir, key+".json") }
func importsArchivePath(dir, key string) string { return filepath.Join(dir, key+".tar.gz") }

// importsLoadState reads a saved state; nil without error when there is
// none.
func importsLoadState(p string) (*importsState, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the saved upload state: %w", err)
	}
	var s importsState
	if err := json.Unmarshal(b, &s); err != nil || s.ImportID == "" {
		return nil, fmt.Errorf("the saved upload state %s is damaged (remove it, or push with --restart)", p)
	}
	s.path = p
	return &s, nil
}

// save writes the state readable by its owner only.
func (s *importsState) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := writePrivate(s.path, append(b, '\n')); err != nil {
		return fmt.Errorf("save the upload state: %w", err)
	}
	return nil
}

// dropArchive removes the archive if sandboxctl made it.
func (s *importsState) dropArchive() {
	if s.Cached && s.Archive != "" {
		_ = os.Remove(s.Archive)
	}
}

// remove deletes the state and the archive sandboxctl made.
func (s *importsState) remove() {
	s.dropArchive()
	_ = os.Remove(s.path)
}

// importsFindState is the saved state of an import, or nil.
func importsFindState(importID string) (*importsState, error) {
	dir, err := importsCacheDir()
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		s, err := importsLoadState(p)
		if err == nil && s != nil && s.ImportID == importID {
			return s, nil
		}
	}
	return nil, nil
}
