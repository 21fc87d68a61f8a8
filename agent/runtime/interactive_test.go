package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/agenttest"
	"github.com/sandboxd/sandboxd/agent/runtime"
)

const siteUID = 2000321

// siteContainer starts a confined PHP container that only sleeps, as a
// site's would, and returns the runtime and its id.
func siteContainer(t *testing.T, id string) *runtime.Runtime {
	t.Helper()
	socket, _ := agenttest.Containerd(t)
	rt := agenttest.Runtime(t, socket)
	ctx := context.Background()
	ref, err := agenttest.Catalog(t).PHP(ctx, rt, "8.2")
	if err != nil {
		t.Fatal(err)
	}
	spec := runtime.Spec{ID: id, Image: ref, UID: siteUID, GID: siteUID, Confined: true, MemoryBytes: 64 << 20, Pids: 64,
		Args: []string{"sleep", "infinity"}}
	if err := rt.Run(ctx, spec); err != nil {
		t.Fatal(err)
	}
	return rt
}

// syncBuffer is a bytes.Buffer the test polls while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExecInteractive runs interactive processes in one site container
// under the real containerd.
func TestExecInteractive(t *testing.T) {
	rt := siteContainer(t, "site")
	t.Run("tty", func(t *testing.T) { testExecInteractiveTTY(t, rt) })
	t.Run("pipes", func(t *testing.T) { testExecInteractivePipes(t, rt) })
	t.Run("resize", func(t *testing.T) { testExecInteractiveResize(t, rt) })
	t.Run("cancel", func(t *testing.T) { testExecInteractiveCancel(t, rt) })
	t.Run("stream", func(t *testing.T) { testExecStream(t, rt) })
}

// testExecInteractiveTTY: a terminal of the requested size from the first
// instruction on, and the process runs as the given uid.
func testExecInteractiveTTY(t *testing.T, rt *runtime.Runtime) {
	var out bytes.Buffer
	code, err := rt.ExecInteractive(context.Background(), "site", runtime.InteractiveProcess{
		Argv: []string{"sh", "-c", "stty size; id -u; tty; exit 7"}, UID: siteUID, GID: siteUID,
		TTY: true, Size: runtime.WindowSize{Cols: 100, Rows: 40}, Stdout: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.ReplaceAll(out.String(), "\r", "")
	if code != 7 {
		t.Errorf("exit code %d, want 7", code)
	}
	for _, want := range []string{"40 100\n", "2000321\n", "/dev/pts/"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// testExecInteractivePipes: without a terminal stdin is streamed to the
// process and closed at its end, stdout and stderr stay apart, and the
// exit code comes back.
func testExecInteractivePipes(t *testing.T, rt *runtime.Runtime) {
	// More than any pipe buffer, so it has to be streamed both ways.
	in := strings.Repeat("0123456789abcdef", 1<<16)
	var out, errOut bytes.Buffer
	code, err := rt.ExecInteractive(context.Background(), "site", runtime.InteractiveProcess{
		Argv: []string{"sh", "-c", "cat; echo err >&2; pwd; exit 3"}, UID: siteUID, GID: siteUID, Cwd: "/tmp",
		Env: []string{"LANG=C"}, Stdin: strings.NewReader(in), Stdout: &out, Stderr: &errOut,
	})
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 || errOut.String() != "err\n" || out.String() != in+"/tmp\n" {
		t.Fatalf("exit %d, stderr %q, stdout of %d bytes (want %d)", code, errOut.String(), out.Len(), len(in)+5)
	}
}

// testExecInteractiveResize: a window change reaches the terminal while
// the process runs.
func testExecInteractiveResize(t *testing.T, rt *runtime.Runtime) {
	stdinR, stdinW := io.Pipe()
	t.Cleanup(func() { stdinW.Close() })
	resize := make(chan runtime.WindowSize, 1)
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := rt.ExecInteractive(context.Background(), "site", runtime.InteractiveProcess{
			Argv: []string{"sh", "-c", "while read x; do stty size; done"}, UID: siteUID, GID: siteUID,
			TTY: true, Size: runtime.WindowSize{Cols: 80, Rows: 24}, Resize: resize, Stdin: stdinR, Stdout: out,
		})
		done <- err
	}()
	// Each line typed prints the size; type until the new one shows.
	poke := func() { _, _ = stdinW.Write([]byte("\n")) }
	poke()
	waitFor(t, "the first size", func() bool { return strings.Contains(out.String(), "24 80") })
	resize <- runtime.WindowSize{Cols: 132, Rows: 50}
	waitFor(t, "the new size", func() bool { poke(); return strings.Contains(out.String(), "50 132") })
	// EOF on stdin: with a terminal, the process sees it as its input
	// closing (^D ends the loop).
	_, _ = stdinW.Write([]byte{4})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the shell did not end on ^D")
	}
}

// testExecInteractiveCancel: a cancelled context kills the process and
// everything it started, with or without a terminal, and returns.
func testExecInteractiveCancel(t *testing.T, rt *runtime.Runtime) {
	ctx := context.Background()
	procs := func() string {
		res, err := rt.Exec(ctx, "site", []string{"sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done`}, nil, siteUID, siteUID, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}
	// The kill relies on runc making the exec a session leader even
	// without a terminal.
	code, err := rt.ExecInteractive(ctx, "site", runtime.InteractiveProcess{
		Argv: []string{"sh", "-c", `set -- $(cut -d' ' -f1,6 /proc/$$/stat); [ "$1" = "$2" ]`}, UID: siteUID, GID: siteUID,
	})
	if err != nil || code != 0 {
		t.Fatalf("an exec without a terminal does not lead its session: exit %d, %v", code, err)
	}
	for _, tc := range []struct {
		name string
		tty  bool
		// Sleep durations that name this case's processes.
		bg, fg string
	}{{"pipes", false, "4242", "4343"}, {"tty", true, "4244", "4345"}} {
		t.Run(tc.name, func(t *testing.T) {
			// A background job, a foreground child and a stdin nobody
			// closes: nothing but the kill ends them.
			stdinR, stdinW := io.Pipe()
			t.Cleanup(func() { stdinW.Close() })
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := rt.ExecInteractive(cctx, "site", runtime.InteractiveProcess{
					Argv: []string{"sh", "-c", "sleep " + tc.bg + " & sleep " + tc.fg + "; echo never"}, UID: siteUID, GID: siteUID,
					TTY: tc.tty, Stdin: stdinR, Stdout: io.Discard,
				})
				done <- err
			}()
			waitFor(t, "the processes to start", func() bool {
				p := procs()
				return strings.Contains(p, "sleep "+tc.bg) && strings.Contains(p, "sleep "+tc.fg)
			})
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("err = %v, want context.Canceled", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("ExecInteractive did not return after cancel")
			}
			if p := procs(); strings.Contains(p, "sleep "+tc.bg) || strings.Contains(p, "sleep "+tc.fg) {
				t.Fatalf("processes left behind:\n%s", p)
			}
		})
	}
}

// countWriter counts what it is given and fails once it has had fail
// bytes (never, when fail is 0).
type countWriter struct {
	n, fail int64
}

var errWriterFull = errors.New("the writer is full")

func (c *countWriter) Write(p []byte) (int, error) {
	if c.fail > 0 && c.n+int64(len(p)) > c.fail {
		return 0, errWriterFull
	}
	c.n += int64(len(p))
	return len(p), nil
}

// testExecStream: ExecStream hands on more output than Exec keeps, keeps
// stderr apart; a writer that fails, or a cancelled context, ends the
// process and what it started, and the error says which.
func testExecStream(t *testing.T, rt *runtime.Runtime) {
	procs := func() string {
		res, err := rt.Exec(context.Background(), "site", []string{"sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done`}, nil, siteUID, siteUID, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Stdout)
	}
	for _, tc := range []struct {
		name     string
		script   string
		fail     int64
		cancel   bool
		want     error
		wantOut  int64
		code     int
		stderr   string
		leftover string
	}{
		{name: "more than Exec keeps", script: "head -c 80000000 /dev/zero; echo end >&2; exit 2", wantOut: 80000000, code: 2, stderr: "end\n"},
		{name: "stdin", script: "cat; cat /dev/null", wantOut: 5},
		{name: "writer fails", script: "sleep 4747 & yes", fail: 1 << 20, want: errWriterFull, leftover: "sleep 4747"},
		{name: "cancelled", script: "sleep 4848 & yes", cancel: true, want: context.Canceled, leftover: "sleep 4848"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &countWriter{fail: tc.fail}
			var out io.Writer = w
			if tc.cancel {
				out = writerFunc(func(p []byte) (int, error) {
					if w.n > 1<<20 {
						cancel()
					}
					return w.Write(p)
				})
			}
			res, err := rt.ExecStream(ctx, "site", []string{"sh", "-c", tc.script}, nil, siteUID, siteUID, strings.NewReader("hello"), out)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				if p := procs(); strings.Contains(p, tc.leftover) || strings.Contains(p, "yes") {
					t.Fatalf("processes left behind:\n%s", p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.n != tc.wantOut || res.ExitCode != tc.code || string(res.Stderr) != tc.stderr || res.Truncated || res.Stdout != nil {
				t.Fatalf("%d bytes out (want %d), exit %d, stderr %q, result %+v", w.n, tc.wantOut, res.ExitCode, res.Stderr, res)
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
