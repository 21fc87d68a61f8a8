package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestForwardSaysWhetherAWriteMayHaveLanded: a leader that cannot be
// reached leaves nothing applied (service_unavailable); a leader that
// took the request and hung up may have applied a write
// (outcome_unknown), though a read is still just unavailable.
func TestForwardSaysWhetherAWriteMayHaveLanded(t *testing.T) {
	// hangUp reads the whole request, then drops the connection unanswered.
	hangUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(hangUp.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now

	for _, tc := range []struct {
		name, target, method, want string
	}{
		{"write to an unreachable leader", closed, "POST", "service_unavailable"},
		{"write the leader took and dropped", hangUp.URL, "POST", "outcome_unknown"},
		{"delete the leader took and dropped", hangUp.URL, "DELETE", "outcome_unknown"},
		{"read the leader took and dropped", hangUp.URL, "GET", "service_unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, _ := url.Parse(tc.target)
			h := leaderProxy(target, http.DefaultTransport, "server-test", func(*http.Request, http.Header) {}, slog.New(slog.DiscardHandler))
			var body io.Reader
			if tc.method != "GET" {
				body = strings.NewReader(`{"name":"x"}`)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, "/api/account/tokens", body))
			var env struct {
				Error struct{ Code string } `json:"error"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &env)
			if rec.Code != http.StatusServiceUnavailable || env.Error.Code != tc.want || rec.Header().Get("Retry-After") == "" {
				t.Fatalf("got %d %s, want 503 %s with Retry-After", rec.Code, rec.Body, tc.want)
			}
		})
	}
}

// cutOff is a leader that takes a request, starts a 201 answer and dies
// in the middle of its body, as a SIGKILLed leader does.
func cutOff(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(conn, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"token\":{\"name\":")
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestForwardHoldsAWritesAnswerWhole: a write's answer reaches the
// client whole or not at all. One the leader died in the middle of is a
// 503 outcome_unknown, not a dropped connection (which an HTTP client
// answers by resending the write, and the resend would then be told
// nothing was written); a whole answer passes unchanged, one past the
// bound too; an event stream is passed on as it comes, not held.
func TestForwardHoldsAWritesAnswerWhole(t *testing.T) {
	proxy := func(t *testing.T, leader string) *httptest.Server {
		target, _ := url.Parse(leader)
		front := httptest.NewServer(leaderProxy(target, http.DefaultTransport, "server-test", func(*http.Request, http.Header) {}, slog.New(slog.DiscardHandler)))
		t.Cleanup(front.Close)
		return front
	}
	post := func(t *testing.T, front *httptest.Server) (*http.Response, []byte) {
		t.Helper()
		resp, err := front.Client().Post(front.URL+"/api/account/tokens", "application/json", strings.NewReader(`{"name":"x"}`))
		if err != nil {
			t.Fatalf("the proxy dropped the connection: %v", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("the answer was cut off on the way to the client: %v", err)
		}
		return resp, body
	}

	t.Run("cut off", func(t *testing.T) {
		resp, body := post(t, proxy(t, cutOff(t)))
		var env struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(body, &env)
		if resp.StatusCode != http.StatusServiceUnavailable || env.Error.Code != "outcome_unknown" {
			t.Fatalf("got %d %s, want 503 outcome_unknown", resp.StatusCode, body)
		}
	})

	for _, size := range []int{0, 100, maxHeldAnswer + maxHeldAnswer/2} {
		t.Run(fmt.Sprintf("whole answer of %d bytes", size), func(t *testing.T) {
			want := bytes.Repeat([]byte("a"), size)
			leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Leader", "yes")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write(want)
			}))
			t.Cleanup(leader.Close)
			resp, body := post(t, proxy(t, leader.URL))
			if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Leader") != "yes" || !bytes.Equal(body, want) {
				t.Fatalf("got %d %v and %d bytes, want 201 with the leader's header and %d bytes", resp.StatusCode, resp.Header, len(body), size)
			}
		})
	}

	t.Run("event stream", func(t *testing.T) {
		release := make(chan struct{})
		leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			select { // the stream stays open until its first event was read
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(leader.Close)
		t.Cleanup(func() { close(release) })
		front := proxy(t, leader.URL)
		// Held, the first event would never come: bound the wait so that
		// fails rather than hangs.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", front.URL+"/mcp", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := front.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "data: first\n" {
			t.Fatalf("first event: %q, %v", line, err)
		}
	})
}
