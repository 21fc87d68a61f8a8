package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
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
