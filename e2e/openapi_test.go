package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// prismBin is Stoplight Prism as deploy/dev/install-deps.sh installs it.
func prismBin(t *testing.T) string {
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(cache, "sandboxd", "prism", "node_modules", ".bin", "prism")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Prism is not installed (deploy/dev/install-deps.sh installs it): %v", err)
	}
	return bin
}

// TestAnswersMatchTheOpenAPIDocument runs a `sandboxd server` behind
// Stoplight Prism, a third-party validator, as a proxy that checks every
// answer against the served OpenAPI document: status declared, body of
// the declared schema, enums respected. The requests walk the routes a
// control plane without nodes can answer, successes and errors alike.
func TestAnswersMatchTheOpenAPIDocument(t *testing.T) {
	api, dataDir := freeAddr(t), filepath.Join(t.TempDir(), "s")
	start(t, nil, "server", "--data-dir", dataDir, "--api-addr", api, "--cluster-addr", freeAddr(t), "--raft-addr", freeAddr(t))
	direct := st.NewClient(t, "http://"+api, "")
	st.WaitFor(t, 30*time.Second, "the server to lead", func() bool {
		r, err := direct.DoErr("GET", "/healthz", nil)
		return err == nil && r.Status == 200
	})
	docPath := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(docPath, direct.Do("GET", "/api/openapi.json", nil).Must(t, 200).Raw, 0o600); err != nil {
		t.Fatal(err)
	}

	proxyAddr := freeAddr(t)
	host, port, _ := strings.Cut(proxyAddr, ":")
	prism := exec.Command(prismBin(t), "proxy", "--errors", "--validate-request=false", "-h", host, "-p", port, docPath, "http://"+api)
	prism.Env = append(os.Environ(), "SCARF_ANALYTICS=false", "NO_COLOR=1")
	out, err := prism.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	prism.Stderr = prism.Stdout
	if err := prism.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prism.Process.Kill(); _ = prism.Wait() })
	var mu sync.Mutex
	var violations []string
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "Prism is listening") {
				once.Do(func() { close(listening) })
			}
			if strings.Contains(line, "Violation") || strings.Contains(line, "✖") {
				mu.Lock()
				violations = append(violations, line)
				mu.Unlock()
			}
		}
	}()
	select {
	case <-listening:
	case <-time.After(2 * time.Minute):
		t.Fatal("Prism did not start")
	}

	base := "http://" + proxyAddr
	op := st.NewClient(t, base, readKey(t, filepath.Join(dataDir, "operator-token")))
	var answers []*st.Response
	do := func(c *st.Client, method, path string, body any, status int, header ...string) *st.Response {
		t.Helper()
		r := c.Do(method, path, body, header...)
		answers = append(answers, r)
		if r.Status != status {
			t.Errorf("%s %s: %d, want %d: %s", method, path, r.Status, status, r.Raw)
		}
		return r
	}
	do(op, "POST", "/api/admin/accounts", map[string]string{"email": "p@example.com", "plan": "paid"}, 201)
	do(op, "POST", "/api/admin/accounts", map[string]string{"email": "p@example.com", "plan": "paid"}, 409)
	do(op, "PUT", "/api/admin/accounts/nobody@example.com/plan", map[string]string{"plan": "free"}, 404)
	do(op, "PUT", "/api/admin/accounts/p@example.com/plan", map[string]string{"plan": "paid"}, 200)
	do(op, "GET", "/api/admin/accounts", nil, 200)
	do(op, "GET", "/api/admin/cluster", nil, 200)
	do(op, "GET", "/api/admin/outbox", nil, 200)
	secret := do(op, "POST", "/api/admin/tokens", map[string]string{"email": "p@example.com"}, 201).Str("secret")
	u := st.NewClient(t, base, secret)
	me := do(u, "GET", "/api/account/me", nil, 200)
	ws := me.Str("user.personalWorkspaceId")
	do(u, "GET", "/api/account/usage", nil, 200)
	do(u, "GET", "/api/account/tokens", nil, 200)
	tok := do(u, "POST", "/api/account/tokens", map[string]string{"name": "ci"}, 201, "Idempotency-Key", "p-1").Str("token.id")
	do(u, "POST", "/api/account/tokens", map[string]string{"name": "ci"}, 201, "Idempotency-Key", "p-1")
	do(u, "POST", "/api/account/tokens", map[string]string{"name": "other"}, 409, "Idempotency-Key", "p-1")
	do(u, "POST", "/api/account/tokens", map[string]string{"name": ""}, 400)
	do(u, "DELETE", "/api/account/tokens/"+tok, nil, 200)
	do(u, "DELETE", "/api/account/tokens/"+tok, nil, 404)
	do(u, "GET", "/api/account/invitations", nil, 200)
	do(u, "POST", "/api/account/invitations/inv_nope/accept", nil, 404)
	do(u, "GET", "/api/app/workspaces", nil, 200)
	team := do(u, "POST", "/api/app/workspaces", map[string]string{"name": "Team"}, 201).Str("workspace.id")
	do(u, "GET", "/api/app/workspaces/"+team, nil, 200, "X-Service-Workspace", team)
	do(u, "GET", "/api/app/workspaces/ws_nope", nil, 404, "X-Service-Workspace", "ws_nope")
	role := do(u, "POST", "/api/app/workspaces/"+ws+"/roles", map[string]any{"name": "viewer", "capabilities": []string{}}, 201).Str("role.id")
	do(u, "GET", "/api/app/workspaces/"+ws+"/roles", nil, 200)
	do(u, "PATCH", "/api/app/workspaces/"+ws+"/roles/"+role, map[string]string{"name": "reader"}, 200)
	inv := do(u, "POST", "/api/app/workspaces/"+ws+"/members", map[string]string{"email": "q@example.com"}, 201).Str("invitation.id")
	do(u, "GET", "/api/app/workspaces/"+ws+"/members", nil, 200)
	do(u, "GET", "/api/app/workspaces/"+ws+"/invitations", nil, 200)
	do(u, "DELETE", "/api/app/workspaces/"+ws+"/invitations/"+inv, nil, 200)
	do(u, "DELETE", "/api/app/workspaces/"+ws+"/roles/"+role, nil, 200)
	do(u, "GET", "/api/app/jobs/job_nope", nil, 404)
	do(u, "GET", "/api/app/sites", nil, 200)
	do(u, "POST", "/api/app/sites", map[string]string{"name": "no node yet"}, 503)
	do(u, "GET", "/api/app/sites/site_nope", nil, 404)
	do(u, "GET", "/api/app/sites/site_nope/debug", nil, 404)
	do(u, "GET", "/api/app/sites/site_nope/domain", nil, 404)
	do(u, "PUT", "/api/app/sites/site_nope/domain", map[string]string{"hostname": "shop.example.com"}, 404)
	do(u, "PUT", "/api/app/sites/site_nope/domain", map[string]any{"hostname": 7}, 400)
	do(u, "POST", "/api/app/sites/site_nope/domain/check", nil, 404)
	do(u, "DELETE", "/api/app/sites/site_nope/domain", nil, 404)
	do(u, "GET", "/api/app/sites/site_nope/ssh", nil, 404)
	do(u, "GET", "/api/app/sites/site_nope/repositories", nil, 404)
	do(u, "POST", "/api/app/sites/site_nope/repositories", map[string]string{"repoUrl": "https://git.example.com/a/b.git", "destination": "plugin"}, 404)
	do(u, "POST", "/api/app/sites/site_nope/repositories", map[string]string{"repoUrl": "https://git.example.com/a/b.git", "destination": "x", "more": "y"}, 400)
	do(u, "PATCH", "/api/app/sites/site_nope/repositories/repo_nope", map[string]string{"repoUrl": "x"}, 400)
	do(u, "PATCH", "/api/app/sites/site_nope/repositories/repo_nope", map[string]any{"autoDeploy": false}, 404)
	do(u, "POST", "/api/app/sites/site_nope/repositories/repo_nope/deploy", nil, 404)
	do(u, "DELETE", "/api/app/sites/site_nope/repositories/repo_nope", nil, 404)
	key := do(u, "POST", "/api/account/ssh-keys", map[string]string{"name": "prism",
		"publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII1v/zhA6DnYhabld1Co4wy0M8q0vKBv8ZVZql+JBbRp prism"}, 201).Str("sshKey.id")
	do(u, "POST", "/api/account/ssh-keys", map[string]string{"name": "bad", "publicKey": "ssh-dss AAAA"}, 400)
	do(u, "GET", "/api/account/ssh-keys", nil, 200)
	do(u, "DELETE", "/api/account/ssh-keys/"+key, nil, 200)
	do(u, "DELETE", "/api/account/ssh-keys/"+key, nil, 404)
	do(u, "POST", "/api/app/sites/site_nope/plugins", map[string]string{"libraryPlugin": "x"}, 404)
	do(u, "GET", "/api/app/plugin-library", nil, 200)
	body, ct := st.Multipart(map[string]string{"licenseKey": "PRISM-KEY-0001"}, "file", "p.zip", wpzip.BuildPlugin("prism-check", "Prism Check", "1.0", ""))
	// Prism's proxy re-encodes multipart bodies and breaks a ZIP in them:
	// the upload goes to the server directly.
	lib := direct.As(secret).Do("POST", "/api/app/plugin-library", body, "Content-Type", ct).Must(t, 201).Str("plugin.id")
	do(u, "GET", "/api/app/plugin-library/"+lib, nil, 200)
	do(u, "PUT", "/api/app/plugin-library/"+lib+"/license-key", map[string]string{"licenseKey": "PRISM-KEY-0002"}, 200)
	do(u, "DELETE", "/api/app/plugin-library/"+lib+"/license-key", nil, 200)
	do(u, "POST", "/api/app/plugin-library/"+lib+"/refresh", nil, 400)
	do(u, "DELETE", "/api/app/plugin-library/"+lib, nil, 200)
	do(u, "GET", "/api/app/plugin-library/"+lib, nil, 404)

	// Imports: the chunked protocol and its refusals (no node: the
	// restore is not reached), multipart in local mode.
	imp := do(u, "POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 8}, 201).Str("import.id")
	do(u, "POST", "/api/app/imports", map[string]any{"sourceUrl": "ftp://x", "sizeBytes": 8}, 400)
	do(u, "GET", "/api/app/imports", nil, 200)
	do(u, "GET", "/api/app/imports/imp_nope", nil, 404)
	do(u, "PUT", "/api/app/imports/"+imp+"/upload", []byte("abcd"), 200, "Content-Type", "application/octet-stream", "X-Service-Offset", "0")
	do(u, "PUT", "/api/app/imports/"+imp+"/upload", []byte("efgh"), 409, "Content-Type", "application/octet-stream", "X-Service-Offset", "2")
	do(u, "POST", "/api/app/imports/"+imp+"/complete", nil, 400)
	do(u, "GET", "/api/app/imports/"+imp, nil, 200)
	do(u, "POST", "/api/app/imports/"+imp+"/multipart/init", map[string]any{"objects": []map[string]any{{"key": "a.tar", "sizeBytes": 8}}}, 400)
	do(u, "DELETE", "/api/app/imports/"+imp, nil, 200)
	do(u, "DELETE", "/api/app/imports/"+imp, nil, 409)
	imp2 := do(u, "POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 8}, 201).Str("import.id")
	do(u, "POST", "/api/app/imports/"+imp2+"/multipart/init", map[string]any{"objects": []map[string]any{{"key": "a.tar", "sizeBytes": 8}}}, 200)
	do(u, "POST", "/api/app/imports/"+imp2+"/multipart/abort", nil, 200)
	do(u, "DELETE", "/api/app/imports/"+imp2+"?action=delete", nil, 200)
	// The connector's OAuth endpoints.
	anon := st.NewClient(t, base, "")
	do(anon, "POST", "/api/connect/register", map[string]any{"redirect_uris": []string{"https://live.example.com/cb"}, "client_name": "Prism"}, 201)
	do(anon, "POST", "/api/connect/register", map[string]any{"redirect_uris": []string{"http://live.example.com/cb"}}, 400)
	do(anon, "POST", "/api/connect/token", map[string]any{"grant_type": "authorization_code", "code": "x", "client_id": "y",
		"redirect_uri": "https://live.example.com/cb", "code_verifier": strings.Repeat("v", 43)}, 400)
	do(anon, "POST", "/api/connect/token", map[string]any{"grant_type": "client_credentials"}, 400)

	for _, r := range answers {
		if strings.Contains(string(r.Raw), "stoplight.io/prism/errors") {
			t.Errorf("Prism refused an answer: %s", r.Raw)
		}
	}
	time.Sleep(200 * time.Millisecond) // let the last log lines through
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Errorf("Prism: %s", v)
	}
	t.Logf("%d answers checked by Prism against the document", len(answers))
}
