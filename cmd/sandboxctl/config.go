package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// profile is one server the CLI talks to, with the credential it holds.
type profile struct {
	Server    string `json:"server"`
	Token     string `json:"token"`
	Workspace string `json:"workspace,omitempty"`
	// User is who the token speaks for, as whoami last said.
	User string `json:"user,omitempty"`
	// Origin is originBrowser when a browser login made the token (logout
	// revokes it); empty for a token given with --with-token.
	Origin string `json:"origin,omitempty"`
}

// config is what `sandboxctl login` keeps: profiles by name and the one
// used when none is named.
type config struct {
	Current  string              `json:"current"`
	Profiles map[string]*profile `json:"profiles"`
	path     string
}

// configPath is the file under the user's config directory
// (SANDBOXCTL_CONFIG overrides it).
func configPath() (string, error) {
	if p := os.Getenv("SANDBOXCTL_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory: %w (set SANDBOXCTL_CONFIG)", err)
	}
	return filepath.Join(dir, "sandboxctl", "config.json"), nil
}

func loadConfig() (*config, error) {
	p, err := configPath()
	if err != nil {
		return nil, err
	}
	c := &config{Profiles: map[string]*profile{}, path: p}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if c.Profiles == nil {
		c.Profiles = map[string]*profile{}
	}
	return c, nil
}

// save writes the config readable by its owner only (it holds tokens).
func (c *config) save() error {
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return fmt.Errorf("save %s: %w", c.path, err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := writePrivate(c.path, append(b, '\n')); err != nil {
		return fmt.Errorf("save %s: %w", c.path, err)
	}
	return nil
}

// names lists the profiles, sorted.
func (c *config) names() []string {
	out := make([]string, 0, len(c.Profiles))
	for n := range c.Profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// writePrivate replaces path with data, readable by its owner only: a
// new temporary file (CreateTemp makes it 0600, whatever was there
// before) renamed over it, so a reader never sees half a file.
func writePrivate(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
	}
	return werr
}
