// Package logwriter is the container logger containerd's shim runs for a
// site (its "binary" log driver): it copies the container's stdout and
// stderr into a file in a root-owned directory outside every mount of the
// container, and keeps at most two files of MaxBytes each, so a site that
// floods its output can neither fill the node's disk nor stall on a full
// pipe. The sandboxd binary (and a test binary, through its TestMain)
// becomes this logger when the shim starts it.
package logwriter

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
)

// FileArg and MaxArg are the arguments the shim passes (from the log URI).
const (
	FileArg = "--sandboxd-log-file"
	MaxArg  = "--sandboxd-log-max-bytes"
)

// DefaultMaxBytes bounds one log file; the previous one is kept as .1.
const DefaultMaxBytes = 4 << 20

// Args are what a runtime puts in the binary log URI for this logger.
func Args(file string, maxBytes int64) map[string]string {
	return map[string]string{FileArg: file, MaxArg: strconv.FormatInt(maxBytes, 10)}
}

// Invoked reports whether this process was started by a shim as the
// logger: the shim sets CONTAINER_ID and passes FileArg.
func Invoked() bool {
	if os.Getenv("CONTAINER_ID") == "" {
		return false
	}
	for _, a := range os.Args[1:] {
		if a == FileArg {
			return true
		}
	}
	return false
}

// Main runs the logger on fds 3 (stdout), 4 (stderr) and 5 (closed once
// ready), until both streams end. It returns the exit code.
func Main(args []string) int {
	fs := flag.NewFlagSet("log-writer", flag.ContinueOnError)
	file := fs.String(FileArg[2:], "", "log file")
	max := fs.Int64(MaxArg[2:], DefaultMaxBytes, "bytes per file")
	if err := fs.Parse(args); err != nil || *file == "" {
		fmt.Fprintln(os.Stderr, "log-writer: needs", FileArg)
		return 2
	}
	w, err := Open(*file, *max)
	ready := os.NewFile(5, "ready")
	if err != nil {
		fmt.Fprintln(os.Stderr, "log-writer:", err)
		ready.Close()
		return 1
	}
	defer w.Close()
	ready.Close()
	var wg sync.WaitGroup
	for _, fd := range []uintptr{3, 4} {
		wg.Add(1)
		go func(f *os.File) {
			defer wg.Done()
			defer f.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					_, _ = w.Write(buf[:n])
				}
				if err != nil {
					return
				}
			}
		}(os.NewFile(fd, "stream"))
	}
	wg.Wait()
	return 0
}

// Writer appends to a file and rotates it to path.1 when it would pass
// max bytes, so the two together never exceed 2×max.
type Writer struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File
	size int64
}

// Open appends to path (made 0600 if missing).
func Open(path string, max int64) (*Writer, error) {
	if max < 1024 {
		max = 1024
	}
	w := &Writer{path: path, max: max}
	return w, w.open()
}

func (w *Writer) open() error {
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	w.f, w.size = f, st.Size()
	return nil
}

// Write implements io.Writer; a chunk larger than max keeps its end.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if int64(len(p)) > w.max {
		p = p[int64(len(p))-w.max:]
	}
	if w.size+int64(len(p)) > w.max {
		w.f.Close()
		if err := os.Rename(w.path, w.path+".1"); err != nil && !os.IsNotExist(err) {
			return 0, err
		}
		if err := w.open(); err != nil {
			return 0, err
		}
	}
	m, err := w.f.Write(p)
	w.size += int64(m)
	if err != nil {
		return m, err
	}
	return n, nil
}

// Close closes the current file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}

var _ io.WriteCloser = (*Writer)(nil)
