package edge

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	edgev1 "github.com/sandboxd/sandboxd/protocol/edge/v1"
)

const stall = 50 * time.Millisecond

// boundedEdge serves one site, slow.localhost, from backend, with short
// bounds; no control plane is needed.
func boundedEdge(t *testing.T, backend http.Handler) *Edge {
	t.Helper()
	site := httptest.NewServer(backend)
	t.Cleanup(site.Close)
	e, err := New(Config{Addr: "127.0.0.1:0", ReadHeaderTimeout: stall, StallTimeout: stall})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	e.apply(&edgev1.RouteEvent{Snapshot: true, Upserts: []*edgev1.Route{{Host: "slow.localhost",
		Backend: strings.TrimPrefix(site.URL, "http://"), SiteId: "site_slow", Status: edgev1.RouteStatus_ROUTE_STATUS_READY}}})
	return e
}

// TestEdgeDoesNotCutSlowSites: a page the site takes long to answer, and
// a download with pauses longer than the stall bound between its parts,
// both arrive whole. (The site's delays are the scenario: the edge must
// not count time the site spends.)
func TestEdgeDoesNotCutSlowSites(t *testing.T) {
	e := boundedEdge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := 1
		if r.URL.Path == "/download" {
			parts = 3
		}
		for i := range parts {
			<-time.After(4 * stall)
			io.WriteString(w, strings.Repeat("x", 1000))
			if i < parts-1 {
				http.NewResponseController(w).Flush()
			}
		}
	}))
	for _, tt := range []struct {
		path string
		size int
	}{{"/slow-page", 1000}, {"/download", 3000}} {
		req, _ := http.NewRequest("GET", "http://"+e.Addr()+tt.path, nil)
		req.Host = "slow.localhost"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(body) != tt.size {
			t.Fatalf("%s: %d, %d bytes, %v", tt.path, resp.StatusCode, len(body), err)
		}
	}
}

// TestEdgeCutsStalledClients: a visitor that never finishes its headers,
// or stops sending an upload, is answered or disconnected instead of
// holding the connection.
func TestEdgeCutsStalledClients(t *testing.T) {
	e := boundedEdge(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	for _, sent := range []string{
		"GET / HTTP/1.1\r\nHost: slow.localhost\r\nX-Slow: ",
		"POST /wp-admin/async-upload.php HTTP/1.1\r\nHost: slow.localhost\r\nContent-Length: 100\r\n\r\n0123456789",
	} {
		conn, err := net.Dial("tcp", e.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, sent); err != nil {
			t.Fatal(err)
		}
		// Far beyond the bounds: only an edge that never lets go reaches it.
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadAll(conn)
		conn.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%q: the edge kept the stalled connection open", sent)
		}
	}
}
