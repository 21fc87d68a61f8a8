package toolbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/agent/sitefile"
	"github.com/sandboxd/sandboxd/agent/sites"
)

// DebugPatch changes some debug constants; nil fields stay.
type DebugPatch struct {
	WPDebug, WPDebugLog, WPDebugDisplay, ScriptDebug *bool
}

// GetDebug returns a site's debug constants.
func (b *Box) GetDebug(id string) (sites.Debug, error) {
	s := b.sites.Get(id)
	if s == nil {
		return sites.Debug{}, sites.ErrNotFound
	}
	return s.Debug, nil
}

// SetDebug changes a site's debug constants; WordPress sees them on its
// next request.
func (b *Box) SetDebug(id string, p DebugPatch) (sites.Debug, error) {
	s, err := b.sites.Configure(id, func(s *sites.Site) error {
		set := func(dst *bool, v *bool) {
			if v != nil {
				*dst = *v
			}
		}
		set(&s.Debug.WPDebug, p.WPDebug)
		set(&s.Debug.WPDebugLog, p.WPDebugLog)
		set(&s.Debug.WPDebugDisplay, p.WPDebugDisplay)
		set(&s.Debug.ScriptDebug, p.ScriptDebug)
		return nil
	})
	if err != nil {
		return sites.Debug{}, err
	}
	return s.Debug, nil
}

const debugLog = "/srv/site/wordpress/wp-content/debug.log"

// debugLogRel is debugLog beneath the site's WordPress root.
const debugLogRel = "wp-content/debug.log"

// MaxDebugLogBytes bounds how much of the end of debug.log a tail reads,
// and what it answers with.
const MaxDebugLogBytes = 1 << 20

// TailDebugLog returns up to n last lines of wp-content/debug.log, from
// its last MaxDebugLogBytes at most (truncated says the log holds more
// than the answer: the bytes before that window, or the start of a line
// longer than it). The site writes the log as it likes: it is read from
// the node without following any link (a link or anything but a regular
// file counts as no log), with one seek and one bounded read whatever
// its size — a 4 GiB sparse file without a newline answers its last
// MaxDebugLogBytes.
func (b *Box) TailDebugLog(_ context.Context, id string, n int) (exists bool, content string, truncated bool, err error) {
	if b.sites.Get(id) == nil {
		return false, "", false, sites.ErrNotFound
	}
	data, more, err := sitefile.Tail(filepath.Join(b.sites.Data(id), "wordpress"), debugLogRel, MaxDebugLogBytes)
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, sitefile.ErrUnsafePath), errors.Is(err, sitefile.ErrNotRegular):
		return false, "", false, nil
	case err != nil:
		return false, "", false, fmt.Errorf("read debug log: %w", err)
	}
	content, cut := lastLines(data, n, MaxDebugLogBytes)
	return true, content, more || cut, nil
}

// lastLines is what `tail -n n` prints of data (a line is what ends in a
// newline, or the end of data), as UTF-8 text (invalid bytes replaced)
// of at most max bytes; cut says the text lost its start to max.
func lastLines(data []byte, n, max int) (text string, cut bool) {
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end-- // the last line's own newline
	}
	start := 0
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			if n--; n == 0 {
				start = i + 1
				break
			}
		}
	}
	text = strings.ToValidUTF8(string(data[start:]), "\uFFFD")
	if len(text) <= max {
		return text, false
	}
	// Replacements made it longer: keep its end, from a rune's start.
	i := len(text) - max
	for i < len(text) && !utf8.RuneStart(text[i]) {
		i++
	}
	return text[i:], true
}

// TruncateDebugLog empties wp-content/debug.log; a missing log is fine.
func (b *Box) TruncateDebugLog(ctx context.Context, id string) error {
	res, err := b.sites.Exec(ctx, id, []string{"/bin/sh", "-c", `if [ -f "$1" ]; then : > "$1"; fi`, "sh", debugLog}, nil)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("truncate debug log: exit %d: %s", res.ExitCode, res.Stderr)
	}
	return nil
}
