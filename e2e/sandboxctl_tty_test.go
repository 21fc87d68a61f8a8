package e2e

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// terminal is a tmux session of 80 columns: a real terminal that
// sandboxctl draws into, read back with capture-pane.
type terminal struct {
	t      *testing.T
	socket string
	name   string
}

// newTerminal starts a detached 80x30 tmux server of the test's own
// (its own socket, so it never touches a person's tmux) running a shell
// command, then the line EXIT-<its exit code>, and waiting.
func newTerminal(t *testing.T, env []string, command string) *terminal {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is not installed (deploy/dev/install-deps.sh installs it)")
	}
	term := &terminal{t: t, socket: t.TempDir() + "/tmux.sock", name: "ctl"}
	args := []string{"-S", term.socket, "-f", "/dev/null", "new-session", "-d", "-s", term.name, "-x", "80", "-y", "30"}
	for _, kv := range env {
		args = append(args, "-e", kv)
	}
	// The shell traps Ctrl-C (so it lives on to print the exit code);
	// the command gets it with the default disposition.
	args = append(args, "/bin/sh", "-c", "trap : INT; "+command+"; echo EXIT-$?; sleep 600")
	if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", term.socket, "kill-server").Run() })
	return term
}

// key presses a key (tmux's names: C-c is Ctrl-C) in the terminal.
func (term *terminal) key(k string) {
	term.t.Helper()
	if out, err := exec.Command("tmux", "-S", term.socket, "send-keys", "-t", term.name, k).CombinedOutput(); err != nil {
		term.t.Fatalf("tmux send-keys: %v %s", err, out)
	}
}

// screen is what the terminal shows now: with escapes (colours) and
// with wrapped lines joined, so a line wider than 80 columns shows as
// one long line.
func (term *terminal) screen() string {
	term.t.Helper()
	out, err := exec.Command("tmux", "-S", term.socket, "capture-pane", "-p", "-e", "-J", "-t", term.name).Output()
	if err != nil {
		term.t.Fatalf("tmux capture-pane: %v", err)
	}
	return string(out)
}

// waitFor polls the screen until cond holds; every screen seen is kept.
func (term *terminal) waitFor(what string, limit time.Duration, cond func(string) bool) (string, []string) {
	term.t.Helper()
	var frames []string
	deadline := time.Now().Add(limit)
	for {
		s := term.screen()
		frames = append(frames, s)
		if cond(s) {
			return s, frames
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("the terminal never showed %s:\n%s", what, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exitLine is the line newTerminal's command ends with.
var exitLine = regexp.MustCompile(`EXIT-\d+`)

// plain drops the escape sequences of a captured screen.
func plain(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ctlInATerminal: in an 80-column terminal, `sites list` of a site with
// a name too long for one line fits (cells shortened with an ellipsis,
// the id whole), with the status in colour; piped, it is neither
// shortened nor coloured.
func ctlInATerminal(t *testing.T, c *ctlRunner, id string) {
	var env []string
	for _, kv := range c.env {
		if !strings.HasPrefix(kv, "NO_COLOR=") {
			env = append(env, kv)
		}
	}
	term := newTerminal(t, append(env, "TERM=screen"), ctlBinary+" sites list")
	screen, _ := term.waitFor("the table", 30*time.Second, func(s string) bool { return exitLine.MatchString(s) })
	text := plain(screen)
	if !strings.Contains(text, "EXIT-0") {
		t.Fatalf("sites list in a terminal:\n%s", text)
	}
	for _, l := range strings.Split(text, "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("a line of %d columns in an 80-column terminal: %q", n, l)
		}
	}
	if !strings.Contains(text, id) || !strings.Contains(text, "…") || !strings.Contains(text, "STATUS") {
		t.Fatalf("the table in a terminal:\n%s", text)
	}
	if !strings.Contains(screen, "\x1b[32mready") {
		t.Fatalf("no colour on the status in a terminal:\n%q", screen)
	}
	piped := c.ok("sites", "list")
	if strings.Contains(piped, "\x1b[") || !strings.Contains(piped, "A site with a name far too long for one line of a terminal") {
		t.Fatalf("piped output was shortened or coloured:\n%s", piped)
	}
}

// ctlProgressInATerminal: `imports push` draws its progress bar in an
// 80-column terminal (redrawn in place, never wider than the terminal),
// Ctrl-C typed there stops it with 130 and says how to resume; then the
// paused import is cancelled.
func ctlProgressInATerminal(t *testing.T, c *ctlRunner) {
	dir := t.TempDir()
	wp := filepath.Join(dir, "wordpress")
	if err := os.MkdirAll(filepath.Join(wp, "wp-content", "uploads"), 0o755); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		"wp-content/uploads/noise.bin": big,
		"database.sql":                 []byte("CREATE TABLE wp_options (option_id int, option_name varchar(191), option_value longtext);\n"),
	} {
		if err := os.WriteFile(filepath.Join(wp, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	for _, kv := range c.env {
		if !strings.HasPrefix(kv, "NO_COLOR=") {
			env = append(env, kv)
		}
	}
	term := newTerminal(t, append(env, "TERM=screen"),
		fmt.Sprintf("%s imports push %s --source-url https://old.example.com --limit-rate 512K", ctlBinary, wp))
	bar := regexp.MustCompile(`uploading\s+(\d+)%\s*\|[█ ]+\|`)
	screen, frames := term.waitFor("a progress bar", 60*time.Second, func(s string) bool {
		m := bar.FindStringSubmatch(plain(s))
		return m != nil && m[1] != "0"
	})
	first := bar.FindStringSubmatch(plain(screen))[1]
	term.key("C-c")
	screen, more := term.waitFor("the interrupted push", 30*time.Second, func(s string) bool { return exitLine.MatchString(s) })
	frames = append(frames, more...)
	text := plain(screen)
	if !strings.Contains(text, "EXIT-130") || !strings.Contains(text, "sandboxctl imports resume") {
		t.Fatalf("Ctrl-C in the terminal:\n%s", text)
	}
	// The bar was redrawn in place (one line of it on the screen) and
	// never wider than the terminal.
	if n := len(bar.FindAllString(text, -1)); n != 1 {
		t.Errorf("the bar is on %d lines, not redrawn in place:\n%s", n, text)
	}
	for _, f := range frames {
		for _, l := range strings.Split(plain(f), "\n") {
			if n := utf8.RuneCountInString(l); bar.MatchString(l) && n > 80 {
				t.Fatalf("a bar of %d columns in an 80-column terminal: %q", n, l)
			}
		}
	}
	t.Logf("the bar first showed %s%%; %d frames", first, len(frames))
	for _, imp := range c.json("imports", "list")["imports"].([]any) {
		if m := imp.(map[string]any); m["status"] == "uploading" || m["status"] == "awaiting_upload" {
			c.ok("imports", "cancel", m["id"].(string))
		}
	}
}
