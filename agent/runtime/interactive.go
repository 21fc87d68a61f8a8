package runtime

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxd/sandboxd/internal/ids"
)

// WindowSize is a terminal's size in character cells.
type WindowSize struct {
	Cols, Rows uint16
}

// InteractiveProcess is a process run inside a running container with its
// streams attached to the caller (an SSH session): nothing it reads or
// writes is collected in memory.
type InteractiveProcess struct {
	// Argv is the command; Argv[0] is looked up in the container's PATH.
	Argv []string
	// Env is added to the container's own environment.
	Env []string
	// UID and GID the process runs as (no supplementary groups).
	UID, GID uint32
	// Cwd is the working directory inside the container; the container's
	// own when empty.
	Cwd string
	// TTY gives the process a terminal: stdout and stderr are then one
	// stream (written to Stdout) and Size and Resize apply.
	TTY bool
	// Size is the terminal's size at start; zero leaves runc's default.
	Size WindowSize
	// Resize delivers window changes while the process runs, or nil.
	Resize <-chan WindowSize
	// Stdin is read until EOF, after which the process's stdin is closed
	// (without a TTY; a terminal's input just stops, as with sshd); nil
	// gives the process no stdin. It may still be read from after
	// ExecInteractive returns, until the caller closes it.
	Stdin io.Reader
	// Stdout and Stderr receive the process's output as it comes; nil
	// discards it. A writer that blocks holds the process back.
	Stdout, Stderr io.Writer
}

// killGrace bounds how long a cancelled exec may take to be reaped and
// deleted: the caller's context is gone by then.
const killGrace = 10 * time.Second

// ExecInteractive runs p in the container's running task and returns its
// exit code once it has exited and all its output has been written. When
// ctx ends first, the process and what it started are killed (SIGKILL),
// the process is deleted, and the error wraps ctx.Err().
func (r *Runtime) ExecInteractive(ctx context.Context, id string, p InteractiveProcess) (int, error) {
	if len(p.Argv) == 0 {
		return -1, fmt.Errorf("exec in %s: no command", id)
	}
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, r.cid(id))
	if err != nil {
		return -1, fmt.Errorf("container %s: %w", id, err)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return -1, fmt.Errorf("task %s: %w", id, err)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return -1, fmt.Errorf("spec of %s: %w", id, err)
	}
	ps := *spec.Process
	ps.Args = p.Argv
	ps.Env = append(append([]string{}, spec.Process.Env...), p.Env...)
	ps.User = specs.User{UID: p.UID, GID: p.GID}
	ps.Cwd = orDefault(p.Cwd, spec.Process.Cwd)
	ps.Terminal = p.TTY
	ps.ConsoleSize = nil
	if p.TTY && p.Size.Cols > 0 && p.Size.Rows > 0 {
		// runc sizes the console before the process starts, so even a
		// first `stty size` sees it; Resize below covers runtimes that
		// ignore it.
		ps.ConsoleSize = &specs.Box{Width: uint(p.Size.Cols), Height: uint(p.Size.Rows)}
	}

	var in *eofReader
	opts := []cio.Opt{cio.WithStreams(nil, orDiscard(p.Stdout), orDiscard(p.Stderr))}
	if p.Stdin != nil {
		in = &eofReader{r: p.Stdin, eof: make(chan struct{})}
		opts[0] = cio.WithStreams(in, orDiscard(p.Stdout), orDiscard(p.Stderr))
	}
	if p.TTY {
		opts = append(opts, cio.WithTerminal)
	}
	proc, err := task.Exec(ctx, "sh-"+ids.Random(8), &ps, cio.NewCreator(opts...))
	if err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	// The process is deleted whatever happens, with a context of its own:
	// ctx may be the reason we are leaving.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace)
		defer cancel()
		_, _ = proc.Delete(dctx, containerd.WithProcessKill)
	}()
	exited, err := proc.Wait(ctx)
	if err != nil {
		return -1, fmt.Errorf("wait exec in %s: %w", id, err)
	}
	if err := proc.Start(ctx); err != nil {
		return -1, fmt.Errorf("start exec in %s: %w", id, err)
	}
	// done ends the helper goroutines below when this call returns.
	done := make(chan struct{})
	defer close(done)
	if p.TTY && p.Size.Cols > 0 && p.Size.Rows > 0 {
		// A process that already ended has no terminal to size: not an
		// error.
		_ = proc.Resize(ctx, uint32(p.Size.Cols), uint32(p.Size.Rows))
	}
	if p.TTY && p.Resize != nil {
		// Owned by this call; stops when it returns or Resize closes.
		go func() {
			for {
				select {
				case ws, ok := <-p.Resize:
					if !ok {
						return
					}
					if ws.Cols > 0 && ws.Rows > 0 {
						_ = proc.Resize(ctx, uint32(ws.Cols), uint32(ws.Rows))
					}
				case <-done:
					return
				}
			}
		}()
	}
	if in != nil && !p.TTY {
		// Once all of stdin is handed over, close the process's stdin so
		// a command that reads to EOF can finish. A terminal has no end
		// of input (closing it would hang the process up, as when the
		// line drops); its user types ^D, as with sshd.
		go func() {
			select {
			case <-in.eof:
				_ = proc.CloseIO(context.WithoutCancel(ctx), containerd.WithStdinCloser)
			case <-done:
			}
		}()
	}
	select {
	case st := <-exited:
		code, _, err := st.Result()
		if err != nil {
			return -1, fmt.Errorf("exec in %s: %w", id, err)
		}
		// All output is written before the exit code is reported; a
		// process left behind holding the streams open is ended when ctx
		// is.
		copied := make(chan struct{})
		go func() {
			if pio := proc.IO(); pio != nil {
				pio.Wait()
			}
			close(copied)
		}()
		select {
		case <-copied:
			return int(code), nil
		case <-ctx.Done():
			kill(ctx, proc)
			return -1, fmt.Errorf("exec in %s: %w", id, ctx.Err())
		}
	case <-ctx.Done():
		kill(ctx, proc)
		select {
		case <-exited:
		case <-time.After(killGrace):
		}
		return -1, fmt.Errorf("exec in %s: %w", id, ctx.Err())
	}
}

// kill ends everything in the exec's session, then the process through
// the runtime (which is all there is to do under gVisor): without a terminal nothing else would end a child the
// process started (a shell's pipeline or a background job would be left
// running in the site).
func kill(ctx context.Context, proc containerd.Process) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace)
	defer cancel()
	if pid := proc.Pid(); pid != 0 {
		_ = killSession(int(pid))
	}
	_ = proc.Kill(kctx, syscall.SIGKILL)
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// ExecStream runs argv in the container's running task as uid:gid with
// its stdout written to stdout as it comes, for output too large to hold
// (Exec keeps at most MaxExecOutput): a site's files as a tar. stdin is
// read to EOF (nil: no stdin); stderr is kept up to MaxExecStderr. When
// ctx ends, or a write to stdout fails, the process and what it started
// are killed (as ExecInteractive does) and the error says which.
func (r *Runtime) ExecStream(ctx context.Context, id string, argv, env []string, uid, gid uint32, stdin io.Reader, stdout io.Writer) (*ExecResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := &failWriter{w: stdout, fail: cancel}
	stderr := &capped{max: MaxExecStderr}
	code, err := r.ExecInteractive(ctx, id, InteractiveProcess{Argv: argv, Env: env, UID: uid, GID: gid,
		Stdin: stdin, Stdout: out, Stderr: stderr})
	// A failed write ends the process (through ctx) or, at its very end,
	// loses output: either way the write's error is the answer.
	if werr := out.failed(); werr != nil {
		return nil, fmt.Errorf("exec in %s: write its output: %w", id, werr)
	}
	if err != nil {
		return nil, err
	}
	return &ExecResult{ExitCode: code, Stderr: stderr.buf.Bytes(), Truncated: stderr.dropped}, nil
}

// failWriter passes writes on until one fails; then it keeps the error
// and calls fail, and refuses every later write.
type failWriter struct {
	w    io.Writer
	fail func()
	mu   sync.Mutex
	err  error
}

func (f *failWriter) Write(p []byte) (int, error) {
	if err := f.failed(); err != nil {
		return 0, err
	}
	n, err := f.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		f.mu.Lock()
		f.err = err
		f.mu.Unlock()
		f.fail()
	}
	return n, err
}

func (f *failWriter) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
