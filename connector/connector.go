// Package connector holds the Sandboxd Connector WordPress plugin, which a
// site owner installs on a live WordPress site to copy it into a sandbox
// through the imports API, and builds its installable ZIP.
package connector

import (
	"archive/zip"
	"bytes"
	"embed"
	"io/fs"
	"path"
	"time"
)

// Plugin is the plugin's source tree, rooted at plugin/sandboxd-connector.
//
//go:embed all:plugin
var Plugin embed.FS

// PluginSlug is the plugin's folder name, the top folder of its ZIP.
const PluginSlug = "sandboxd-connector"

// PluginZip builds the installable ZIP of the plugin (every entry under sandboxd-connector/).
func PluginZip() ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	root := path.Join("plugin", PluginSlug)
	mtime := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	err := fs.WalkDir(Plugin, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := PluginSlug + p[len(root):]
		if d.IsDir() {
			h := &zip.FileHeader{Name: rel + "/", Modified: mtime}
			h.SetMode(fs.ModeDir | 0o755)
			_, err := zw.CreateHeader(h)
			return err
		}
		b, err := Plugin.ReadFile(p)
		if err != nil {
			return err
		}
		h := &zip.FileHeader{Name: rel, Method: zip.Deflate, Modified: mtime}
		h.SetMode(0o644)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
