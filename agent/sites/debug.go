package sites

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

func (m *Manager) writeDebug(s *Site) error {
	b, err := json.Marshal(s.Debug)
	if err != nil {
		return err
	}
	return writeOwned(filepath.Join(m.FS(s.ID), "conf", "debug.json"), b, 0o644, 0, 0)
}

// DebugPatch changes some debug constants; nil fields stay.
type DebugPatch struct {
	WPDebug, WPDebugLog, WPDebugDisplay, ScriptDebug *bool
}

// GetDebug returns a site's debug constants.
func (m *Manager) GetDebug(id string) (Debug, error) {
	s := m.get(id)
	if s == nil {
		return Debug{}, ErrNotFound
	}
	return s.Debug, nil
}

// SetDebug changes a site's debug constants; WordPress sees them on its
// next request.
func (m *Manager) SetDebug(id string, p DebugPatch) (Debug, error) {
	defer m.lock(id)()
	s := m.get(id)
	if s == nil {
		return Debug{}, ErrNotFound
	}
	set := func(dst *bool, v *bool) {
		if v != nil {
			*dst = *v
		}
	}
	set(&s.Debug.WPDebug, p.WPDebug)
	set(&s.Debug.WPDebugLog, p.WPDebugLog)
	set(&s.Debug.WPDebugDisplay, p.WPDebugDisplay)
	set(&s.Debug.ScriptDebug, p.ScriptDebug)
	if err := m.writeDebug(s); err != nil {
		return Debug{}, err
	}
	return s.Debug, m.save(s)
}

const debugLog = "/srv/site/wordpress/wp-content/debug.log"

// TailDebugLog returns up to n last lines of wp-content/debug.log. It is
// read inside the site's container as www-data: whatever the site made of
// that path (a symlink, say) can only lead within the sandbox.
func (m *Manager) TailDebugLog(ctx context.Context, id string, n int) (exists bool, content string, err error) {
	res, err := m.Exec(ctx, id, []string{"/bin/sh", "-c",
		`if [ -f "$1" ]; then echo yes; tail -n "$2" "$1"; else echo no; fi`, "sh", debugLog, strconv.Itoa(n)}, nil)
	if err != nil {
		return false, "", err
	}
	if res.ExitCode != 0 {
		return false, "", fmt.Errorf("read debug log: exit %d: %s", res.ExitCode, res.Stderr)
	}
	first, rest, _ := strings.Cut(string(res.Stdout), "\n")
	return first == "yes", rest, nil
}

// TruncateDebugLog empties wp-content/debug.log; a missing log is fine.
func (m *Manager) TruncateDebugLog(ctx context.Context, id string) error {
	res, err := m.Exec(ctx, id, []string{"/bin/sh", "-c", `if [ -f "$1" ]; then : > "$1"; fi`, "sh", debugLog}, nil)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("truncate debug log: exit %d: %s", res.ExitCode, res.Stderr)
	}
	return nil
}
