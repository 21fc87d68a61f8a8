package toolbox

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/internal/secret"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

//go:embed files/plugins.php
var pluginsScript string

// Plugin is a plugin or theme installed in a site.
type Plugin struct {
	Slug    string `json:"slug"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Active  bool   `json:"active"`
	Kind    string `json:"kind"`
}

func (b *Box) runPlugins(ctx context.Context, id string, req map[string]any, out any) error {
	s := b.sites.Get(id)
	if s == nil {
		return sites.ErrNotFound
	}
	req["url"] = s.URL
	in, err := json.Marshal(req)
	if err != nil {
		return err
	}
	code := strings.TrimPrefix(strings.TrimSpace(pluginsScript), "<?php")
	res, err := b.sites.Exec(ctx, id, []string{"php", "-d", "display_errors=stderr", "-r", code}, in)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("plugins: exit %d: %.500s", res.ExitCode, res.Stderr)
	}
	var e struct {
		Error *FileError `json:"error"`
	}
	if err := json.Unmarshal(res.Stdout, &e); err != nil {
		return fmt.Errorf("plugins: bad answer %.200q: %w", res.Stdout, err)
	}
	if e.Error != nil && e.Error.Code == "disk_full" {
		return b.sites.DiskFullError(id)
	}
	if e.Error != nil {
		return fmt.Errorf("%w: %s", sites.ErrInvalid, e.Error.Message)
	}
	return json.Unmarshal(res.Stdout, out)
}

// ListPlugins returns the site's plugins and themes as WordPress sees them.
func (b *Box) ListPlugins(ctx context.Context, id string) ([]Plugin, error) {
	var out struct {
		Plugins []Plugin `json:"plugins"`
	}
	if err := b.runPlugins(ctx, id, map[string]any{"op": "list"}, &out); err != nil {
		return nil, err
	}
	return out.Plugins, nil
}

// InstallPlugin checks a plugin or theme ZIP, unpacks it into the site in
// place of an older copy and optionally activates it. The ZIP is unpacked
// inside the site's container as www-data.
func (b *Box) InstallPlugin(ctx context.Context, id string, zip []byte, activate bool) (*Plugin, error) {
	if b.sites.Get(id) == nil {
		return nil, sites.ErrNotFound
	}
	info, err := wpzip.Inspect(zip, wpzip.DefaultLimits)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sites.ErrInvalid, err)
	}
	// The ZIP and what it unpacks to sit on the site's disk together.
	if err := b.sites.CheckDisk(id, int64(len(zip))+info.Bytes); err != nil {
		return nil, err
	}
	// Written from inside the container: the agent never writes into a
	// directory the site owns.
	path := "/srv/site/tmp/upload-" + secret.New("")[:16] + ".zip"
	res, err := b.sites.Exec(ctx, id, []string{"/bin/sh", "-c", `umask 077; cat > "$1"`, "sh", path}, zip)
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		_, _ = b.sites.Exec(context.WithoutCancel(ctx), id, []string{"rm", "-f", path}, nil)
		if err := b.sites.CheckDisk(id, int64(len(zip))); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("store zip: exit %d: %.500s", res.ExitCode, res.Stderr)
	}
	defer func() {
		_, _ = b.sites.Exec(context.WithoutCancel(ctx), id, []string{"rm", "-f", path}, nil)
	}()
	var out struct {
		Plugin Plugin `json:"plugin"`
	}
	err = b.runPlugins(ctx, id, map[string]any{"op": "install", "zip": path, "kind": info.Kind,
		"dir": info.Dir, "activate": activate}, &out)
	if err != nil {
		return nil, err
	}
	return &out.Plugin, nil
}

// Activate activates the plugin in wp-content/plugins/<dir>, or switches
// the site to the theme <dir>: what a Git deploy placed there.
func (b *Box) Activate(ctx context.Context, id, kind, dir string) (*Plugin, error) {
	var out struct {
		Plugin Plugin `json:"plugin"`
	}
	if err := b.runPlugins(ctx, id, map[string]any{"op": "activate", "kind": kind, "dir": dir}, &out); err != nil {
		return nil, err
	}
	return &out.Plugin, nil
}
