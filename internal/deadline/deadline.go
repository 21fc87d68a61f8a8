// Package deadline bounds how long a client may stall one request on the
// wire, per request, with http.ResponseController: reading the request
// body and taking the response. A server-wide ReadTimeout or WriteTimeout
// would be wrong for us: it counts from the start of the request, so it
// cuts long uploads that keep moving, slow WordPress pages, long
// downloads and the control plane's Connect streams alike. Deadlines here
// are measured per operation (a body read that gets no bytes, a response
// write the client does not take), with an optional bound on the whole
// body, so only a client that stops sending or reading is cut.
package deadline

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Body makes reading r's body fail once a single read waits longer than
// stall for the client, or once total has passed since this call (zero:
// no total bound). A request without a body is left alone.
//
// The deadline is armed just before each read, so a handler that pauses
// between reads (a slow backend taking an upload) is never charged for
// its own pace. It is cleared at the end of the body, so nothing is left
// for net/http's background read, which would cancel the request's
// context. On HTTP/1 it is also armed at once and kept after an error:
// the server discards an unread body after the handler returns, and that
// must not wait forever on a stalled client either.
func Body(w http.ResponseWriter, r *http.Request, stall, total time.Duration) {
	if r.Body == nil || r.Body == http.NoBody || (stall <= 0 && total <= 0) {
		return
	}
	b := &body{ReadCloser: r.Body, rc: http.NewResponseController(w), stall: stall, h2: r.ProtoMajor >= 2}
	if total > 0 {
		b.end = time.Now().Add(total)
	}
	if !b.h2 {
		b.arm()
	}
	r.Body = b
}

type body struct {
	io.ReadCloser
	rc    *http.ResponseController
	stall time.Duration
	end   time.Time
	// h2 deadlines are stream timers that fire whether or not a read is
	// pending, so they are cleared after every read.
	h2   bool
	done bool
}

func (b *body) arm() {
	dl := b.end
	if b.stall > 0 {
		if next := time.Now().Add(b.stall); dl.IsZero() || next.Before(dl) {
			dl = next
		}
	}
	_ = b.rc.SetReadDeadline(dl)
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	b.arm()
	n, err := b.ReadCloser.Read(p)
	if b.h2 || errors.Is(err, io.EOF) {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	// After the end or an error (which net/http keeps returning) nothing
	// more is bounded: no deadline may be set once the server reads the
	// connection on its own.
	b.done = err != nil
	return n, err
}

// Writer returns w with every Write and Flush bounded by stall: a client
// that does not take the response for that long is cut. Time the handler
// spends between writes is not counted, so a slow page or a long
// download that keeps moving is never cut. Hijacking clears the deadlines
// (an upgraded connection, a WebSocket for instance, sets its own).
func Writer(w http.ResponseWriter, r *http.Request, stall time.Duration) http.ResponseWriter {
	if stall <= 0 {
		return w
	}
	// HTTP/2 deadlines are stream timers that fire whether or not a write
	// is pending, so they are cleared after each write; on HTTP/1 the
	// server clears the connection's deadline once the response is done,
	// and leaving it set bounds the final flush too.
	return &writer{ResponseWriter: w, rc: http.NewResponseController(w), stall: stall, clear: r.ProtoMajor >= 2}
}

type writer struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
	clear bool
}

func (w *writer) arm() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.stall)) }

func (w *writer) disarm() {
	if w.clear {
		_ = w.rc.SetWriteDeadline(time.Time{})
	}
}

func (w *writer) Write(p []byte) (int, error) {
	w.arm()
	defer w.disarm()
	return w.ResponseWriter.Write(p)
}

// FlushError lets http.ResponseController flush through the bound.
func (w *writer) FlushError() error {
	w.arm()
	defer w.disarm()
	return w.rc.Flush()
}

// Flush implements http.Flusher for handlers that assert it.
func (w *writer) Flush() { _ = w.FlushError() }

// Hijack hands the connection over without deadlines.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := w.rc.Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("hijack: clear deadlines: %w", err)
	}
	return conn, brw, nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
