package server_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// TestSecretsStaySecret creates tokens and then looks for their plaintext
// everywhere it must not be: every log line (debug level), every other
// response, and every byte under the data dir (Raft log and snapshots).
func TestSecretsStaySecret(t *testing.T) {
	var logs st.LogBuffer
	var dataDir string
	s := st.Single(t, st.Options{Logs: &logs, Configure: func(c *server.Config) { dataDir = c.DataDir }})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	secrets := []string{alice.Token}
	for _, name := range []string{"ci", "laptop", "agent"} {
		secrets = append(secrets, alice.Do("POST", "/api/account/tokens", map[string]string{"name": name}).Must(t, 201).Str("secret"))
	}
	// Use every token, including in a failing request, so they pass
	// through authentication, access logs and error paths.
	for _, sec := range secrets {
		alice.As(sec).Do("GET", "/api/account/me", nil).Must(t, 200)
		alice.As(sec).Do("POST", "/api/account/tokens", `{"bad json`).Must(t, 400)
	}
	alice.Do("DELETE", "/api/account/tokens/"+alice.Do("GET", "/api/account/tokens", nil).List("tokens")[1]["id"].(string), nil).Must(t, 200)

	op := st.NewClient(t, s.URL(), s.OperatorToken())
	var responses [][]byte
	for _, r := range []*st.Response{
		alice.Do("GET", "/api/account/tokens", nil), alice.Do("GET", "/api/account/me", nil),
		alice.Do("GET", "/api/account/usage", nil), alice.Do("GET", "/api/app/workspaces", nil),
		op.Do("GET", "/api/admin/accounts", nil), op.Do("GET", "/api/admin/outbox", nil),
		op.Do("GET", "/api/admin/cluster", nil), op.Do("GET", "/api/openapi.json", nil),
		op.Do("GET", "/metrics", nil), op.Do("GET", "/healthz", nil),
	} {
		responses = append(responses, r.Raw)
	}
	if err := s.Node().Snapshot(); err != nil {
		t.Fatal(err)
	}
	var files int
	err := filepath.Walk(filepath.Join(dataDir, "raft"), func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for _, sec := range secrets {
			if bytes.Contains(b, []byte(sec)) {
				t.Errorf("token plaintext found in %s", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 3 { // raft.db, snapshot state.bin and meta.json
		t.Fatalf("only %d files under the raft dir: snapshot missing?", files)
	}
	logText := logs.String()
	if !strings.Contains(logText, `"route":"GET /api/account/me"`) {
		t.Fatal("access log lines missing: the check below would prove nothing")
	}
	for _, sec := range secrets {
		if strings.Contains(logText, sec) {
			t.Error("token plaintext found in the logs")
		}
		for i, r := range responses {
			if bytes.Contains(r, []byte(sec)) {
				t.Errorf("token plaintext found in response %d", i)
			}
		}
	}
	if strings.Contains(logText, s.OperatorToken()) {
		t.Error("operator token found in the logs")
	}
}
