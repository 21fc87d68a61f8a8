package server_test

import (
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// TestSlowClientsAreCut: a client that sends its headers, or an API
// body, slower than the configured bounds is answered or disconnected
// instead of holding the connection; a prompt client is served.
func TestSlowClientsAreCut(t *testing.T) {
	s := st.Single(t, st.Options{Configure: func(c *server.Config) {
		c.ReadHeaderTimeout = 100 * time.Millisecond
		c.StallTimeout = 100 * time.Millisecond
	}})
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, sent string }{
		{"headers never finish", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "},
		{"API body stalls", "POST /api/admin/accounts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + s.OperatorToken() +
			"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"email\":"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tt.sent); err != nil {
				t.Fatal(err)
			}
			// Far beyond the bounds under test: only a server that never
			// lets go reaches it.
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadAll(conn); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the server kept the stalled connection open")
			}
		})
	}
	st.NewClient(t, s.URL(), "").Do("GET", "/healthz", nil).Must(t, 200)
}

// TestFailedNewReleasesWhatItStarted: when New fails after Raft started
// (here: the blob directory is a file), its ports and Raft's database
// are free again, so a fixed config can start at once on the same ones.
func TestFailedNewReleasesWhatItStarted(t *testing.T) {
	dir := t.TempDir()
	cfg := st.NodeConfig(t, dir, st.FreeAddr(t), st.FreeAddr(t), server.NewSealingKey(), true, nil, st.Options{})
	if err := os.WriteFile(dir+"/blobs", []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(cfg); err == nil {
		t.Fatal("New started with a file where its blob directory goes")
	}
	for _, addr := range []string{cfg.APIAddr, cfg.RaftAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s still taken after a failed New: %v", addr, err)
		}
		ln.Close()
	}
	if err := os.Remove(dir + "/blobs"); err != nil {
		t.Fatal(err)
	}
	s := st.Start(t, cfg) // raft.db would still be locked if Raft had been left running
	st.Leader(t, []*server.Server{s})
}
