package deadline_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/deadline"
)

// result waits for what a handler reports, failing the test after a
// generous bound (the deadlines under test are milliseconds).
func result[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never finished")
		panic("unreachable")
	}
}

// rawRequest opens a connection and sends head (and nothing more), as a
// client that then stalls.
func rawRequest(t *testing.T, srv *httptest.Server, head string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestBody: a body that stops arriving fails the read once it stalls, and
// a whole-body bound holds even while bytes keep coming.
func TestBody(t *testing.T) {
	tests := []struct {
		name         string
		stall, total time.Duration
	}{
		{"stalled client", 50 * time.Millisecond, 0},
		{"total bound", time.Hour, 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := make(chan error, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				deadline.Body(w, r, tt.stall, tt.total)
				_, err := io.ReadAll(r.Body)
				errs <- err
			}))
			defer srv.Close()
			rawRequest(t, srv, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
			if err := result(t, errs); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read error %v, want a deadline", err)
			}
		})
	}
}

// TestBodyUnread: a handler that answers without reading the body still
// answers a client that stalls mid-body, because net/http discards the
// unread body before it writes the response, under the same bound.
func TestBodyUnread(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadline.Body(w, r, 50*time.Millisecond, 0)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	conn := rawRequest(t, srv, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled client: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// TestBodyDoneLeavesNoDeadline: once the body is read, the handler may
// take as long as it needs; a deadline left behind would make net/http's
// background read cancel the request. The wait is the point of the test:
// it can only pass wrongly (on a machine too slow to notice), never fail
// wrongly.
func TestBodyDoneLeavesNoDeadline(t *testing.T) {
	const stall = 20 * time.Millisecond
	errs := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadline.Body(w, r, stall, stall)
		if _, err := io.ReadAll(r.Body); err != nil {
			errs <- err
			return
		}
		select {
		case <-r.Context().Done():
			errs <- fmt.Errorf("request cancelled after its body: %w", r.Context().Err())
		case <-time.After(10 * stall):
			errs <- nil
		}
	}))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := result(t, errs); err != nil {
		t.Fatal(err)
	}
}

// TestWriter: a client that stops reading the response is cut once a
// write has waited for it longer than the stall bound.
func TestWriter(t *testing.T) {
	errs := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w = deadline.Writer(w, r, 50*time.Millisecond)
		chunk := make([]byte, 32<<10)
		for range 1 << 12 { // 128 MiB: more than any socket buffer holds
			if _, err := w.Write(chunk); err != nil {
				errs <- err
				return
			}
		}
		errs <- errors.New("the whole response was written to a client that reads nothing")
	}))
	defer srv.Close()
	rawRequest(t, srv, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if err := result(t, errs); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write error %v, want a deadline", err)
	}
}

// TestWriterHijack: an upgraded connection keeps no deadline from the
// bound. As above, the wait past the bound is the point of the test.
func TestWriterHijack(t *testing.T) {
	const stall = time.Millisecond
	errs := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w = deadline.Writer(w, r, stall)
		if _, err := w.Write([]byte("x")); err != nil { // arms the bound
			errs <- err
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			errs <- err
			return
		}
		defer conn.Close()
		<-time.After(5 * stall)
		_, err = conn.Write([]byte("upgraded\n"))
		errs <- err
	}))
	defer srv.Close()
	conn := rawRequest(t, srv, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if err := result(t, errs); err != nil {
		t.Fatalf("write on the hijacked connection: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("never read the upgraded write: %v", err)
		}
		if line == "upgraded\n" {
			return
		}
	}
}
