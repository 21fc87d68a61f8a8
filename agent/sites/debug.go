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

// MaxDebugLogBytes bounds how much of the end of debug.log a tail reads.
const MaxDebugLogBytes = 1 << 20

// TailDebugLog returns up to n last lines of wp-content/debug.log, from
// its last MaxDebugLogBytes at most (truncated says the log is longer).
// It is read inside the site's container as the site's user: whatever the
// site made of that path (a symlink, a FIFO, a 4 GiB sparse file) can
// only lead within the sandbox, and costs one seek.
func (m *Manager) TailDebugLog(ctx context.Context, id string, n int) (exists bool, content string, truncated bool, err error) {
	res, err := m.Exec(ctx, id, []string{"/bin/sh", "-c",
		`if [ -f "$1" ]; then echo "yes $(stat -c %s -- "$1")"; tail -c "$3" -- "$1" | tail -n "$2"; else echo no; fi`,
		"sh", debugLog, strconv.Itoa(n), strconv.Itoa(MaxDebugLogBytes)}, nil)
	if err != nil {
		return false, "", false, err
	}
	if res.ExitCode != 0 {
		return false, "", false, fmt.Errorf("read debug log: exit %d: %.300s", res.ExitCode, res.Stderr)
	}
	first, rest, _ := strings.Cut(string(res.Stdout), "\n")
	state, size, _ := strings.Cut(first, " ")
	bytes, _ := strconv.ParseInt(size, 10, 64)
	// The site writes what it likes; the answer travels as UTF-8 text.
	return state == "yes", strings.ToValidUTF8(rest, "\uFFFD"), bytes > MaxDebugLogBytes, nil
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
