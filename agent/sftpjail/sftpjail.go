// Package sftpjail serves SFTP for one site from a child process that is
// confined to the site's WordPress root and runs as the site's user. The
// agent runs as root and must never work in a tree the tenant can write
// as root: a planted symlink would then reach the host. So the agent
// starts its own binary again (Command); before it reads a byte from the
// client, the child chroots to the root, drops to the site's uid and gid
// with no supplementary groups and no_new_privs, checks that it holds no
// privilege any more, and only then serves SFTP on stdin and stdout. The
// kernel then resolves every path the client names, symlinks included,
// inside the root and with the site's own permissions.
package sftpjail

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/sys/unix"
)

// Flag is argv[1] of a jail child: Invoked looks for it.
const Flag = "--sandboxd-sftp-jail"

// MaxOpenFiles is the child's RLIMIT_NOFILE: it bounds the files a client
// can hold open at once (pkg/sftp keeps a handle per open file).
const MaxOpenFiles = 256

// Invoked reports whether this process was started by Command as a jail
// child; main calls it first thing and then runs Main.
func Invoked() bool {
	return len(os.Args) > 1 && os.Args[1] == Flag
}

// Command returns the command that serves SFTP for root as uid:gid on
// its stdin and stdout; the caller connects them to the client (an SSH
// channel) and waits. self is this binary ("/proc/self/exe"). root must be
// a directory that no tenant can replace or rename: a name inside a
// root-owned directory. The child gets no environment and its arguments
// carry no secret; it exits when stdin closes, or is killed when ctx ends.
func Command(ctx context.Context, self, root string, uid, gid int) *exec.Cmd {
	cmd := exec.CommandContext(ctx, self, Flag,
		"--root="+root, "--uid="+strconv.Itoa(uid), "--gid="+strconv.Itoa(gid))
	cmd.Env = []string{}
	cmd.Dir = "/"
	// Once killed, its pipes are not waited on for long.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Main runs a jail child: args are os.Args[1:] (Flag first). It returns
// the exit code: 0 once the client closed stdin, 2 for bad arguments, 1
// when confinement or serving failed. It refuses to serve anything unless
// every step of the confinement succeeded.
func Main(args []string) int {
	if len(args) > 0 && args[0] == Flag {
		args = args[1:]
	}
	fs := flag.NewFlagSet("sftp-jail", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	root := fs.String("root", "", "directory to serve (becomes /)")
	uid := fs.Int("uid", -1, "user to serve as")
	gid := fs.Int("gid", -1, "group to serve as")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *root == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "sftp-jail: usage: --root DIR --uid N --gid N")
		return 2
	}
	if err := ensureNoNewPrivs(); err != nil {
		fmt.Fprintln(os.Stderr, "sftp-jail:", err)
		return 1
	}
	if err := confine(*root, *uid, *gid); err != nil {
		fmt.Fprintln(os.Stderr, "sftp-jail: refusing to serve:", err)
		return 1
	}
	srv, err := sftp.NewServer(stdio{}, sftp.WithServerWorkingDirectory("/"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "sftp-jail:", err)
		return 1
	}
	if err := srv.Serve(); err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(os.Stderr, "sftp-jail: serve:", err)
		return 1
	}
	return 0
}

// ensureNoNewPrivs returns once every thread of this process has
// no_new_privs. The flag is per thread and Go has started several, so a
// process without it sets it on one thread and executes itself again:
// every thread of the new image descends from that one. (Setting it on
// all threads at once needs a cgo-free build.)
func ensureNoNewPrivs() error {
	if v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err == nil && v == 1 {
		return nil
	}
	goruntime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	err := syscall.Exec("/proc/self/exe", os.Args, os.Environ())
	return fmt.Errorf("re-execute with no_new_privs: %w", err)
}

// stdio is the child's end of the SFTP stream.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error {
	return errors.Join(os.Stdin.Close(), os.Stdout.Close())
}
