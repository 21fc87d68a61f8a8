package gitdeploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// gitPath is the PATH git (and the ssh it starts) runs with: nothing of
// the agent's environment reaches it.
const gitPath = "/usr/local/bin:/usr/bin:/bin"

// invocation is how one git process runs: its environment is built here,
// never inherited, and secrets travel in it (never in argv, which any
// user of the node can read in ps).
type invocation struct {
	git     string // git binary
	dir     string // working directory (the bare repository)
	home    string // a fresh directory: HOME, so no user configuration is read
	config  [][2]string
	env     []string // more variables (GIT_SSH_COMMAND, GIT_ALLOW_PROTOCOL)
	maxFile int64    // ulimit -f, bytes: bounds the pack git writes
}

// environ is the process environment: git's configuration goes in
// GIT_CONFIG_COUNT/KEY/VALUE, which take precedence over every file.
func (in *invocation) environ() []string {
	env := []string{"PATH=" + gitPath, "HOME=" + in.home, "LC_ALL=C", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false",
		"SSH_ASKPASS=/bin/false", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_NO_REPLACE_OBJECTS=1"}
	env = append(env, in.env...)
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(in.config)))
	for i, kv := range in.config {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env
}

// command makes a git process in its own process group (ctx ending kills
// git and whatever it started: remote helpers, ssh), with its file size
// bounded by the shell's ulimit. SIGXFSZ is ignored, so a write past the
// bound fails with "File too large" (which git reports) instead of
// killing the writer without a word.
func (in *invocation) command(ctx context.Context, args ...string) *exec.Cmd {
	argv := append([]string{"-c", `trap '' XFSZ; ulimit -f "$1"; shift; exec "$@"`, "sh", strconv.FormatInt(in.maxFile/512, 10), in.git}, args...)
	cmd := exec.CommandContext(ctx, "/bin/sh", argv...)
	cmd.Dir, cmd.Env = in.dir, in.environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs git to the end and returns its output (up to max bytes: more
// is an error) and stderr (the last 4 KiB) with the error.
func (in *invocation) run(ctx context.Context, max int64, args ...string) ([]byte, string, error) {
	cmd := in.command(ctx, args...)
	out := &cappedBuffer{max: max}
	errb := &tailBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = out, errb
	err := cmd.Run()
	if out.over {
		return nil, errb.String(), fmt.Errorf("git %s: more than %d bytes of output", args[0], max)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, context.Cause(ctx))
		}
		return nil, errb.String(), fmt.Errorf("git %s: %w", args[0], err)
	}
	return out.Bytes(), errb.String(), nil
}

// cappedBuffer keeps up to max bytes and fails the write past them.
type cappedBuffer struct {
	bytes.Buffer
	max  int64
	over bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if int64(b.Len()+len(p)) > b.max {
		b.over = true
		return 0, errors.New("output too long")
	}
	return b.Buffer.Write(p)
}

// tailBuffer keeps the last max bytes written to it (git's last words
// are the ones that say what failed).
type tailBuffer struct {
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string { return string(b.buf) }

var _ io.Writer = (*tailBuffer)(nil)

// shellQuote quotes s for the shell git runs GIT_SSH_COMMAND with.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
