package server_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// gitAgent is a fake node that records the deploys it is asked for and
// answers with a SHA per branch.
type gitAgent struct {
	fakeAgent
	mu      sync.Mutex
	deploys []*agentv1.DeployRepositoryRequest
	sha     string
}

func (f *gitAgent) DeployRepository(_ context.Context, req *connect.Request[agentv1.DeployRepositoryRequest]) (*connect.Response[agentv1.DeployRepositoryResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deploys = append(f.deploys, req.Msg)
	return connect.NewResponse(&agentv1.DeployRepositoryResponse{Sha: f.sha, Files: 3, Bytes: 100}), nil
}

func (f *gitAgent) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.deploys)
}

func (f *gitAgent) last() *agentv1.DeployRepositoryRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deploys[len(f.deploys)-1]
}

// hook posts a push delivery to a webhook URL with a provider's headers.
func hook(t *testing.T, url string, header map[string]string, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

func githubHeaders(secret string, body []byte, delivery string) map[string]string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + hex.EncodeToString(mac.Sum(nil))}
}

func pushBody(branch, after string) []byte {
	b, _ := json.Marshal(map[string]any{"ref": "refs/heads/" + branch, "before": strings.Repeat("1", 40), "after": after,
		"repository": map[string]any{"full_name": "acme/hello"}, "commits": []any{}})
	return b
}

func TestGitRepositories(t *testing.T) {
	logs := &st.LogBuffer{}
	s := st.Single(t, st.Options{Logs: logs, Configure: func(c *server.Config) {
		c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}})
	agent := &gitAgent{sha: strings.Repeat("a", 40)}
	agent.url = serveAgent(t, agent)
	n := state.Node{ID: "node-fake", Address: agent.url, BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}, Status: state.NodeReady,
		MemoryMB: 64 << 10, MaxSites: 100}
	if _, err := s.Node().Apply(context.Background(), fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	bob := st.NewAccount(t, s, "bob@example.com", "paid")
	made := alice.Do("POST", "/api/app/sites", map[string]any{"name": "Git"}).Must(t, 202)
	waitJob(t, alice, made.Str("jobId"), "succeeded")
	site := made.Str("site.id")
	base := "/api/app/sites/" + site + "/repositories"

	t.Run("a retry under one Idempotency-Key connects once and shows the same secret", func(t *testing.T) {
		body := map[string]any{"repoUrl": "https://127.0.0.1/keyed/once.git", "destination": "plugin", "folderName": "once"}
		first := alice.Do("POST", base, body, "Idempotency-Key", "repo-1").Must(t, 201)
		again := alice.Do("POST", base, body, "Idempotency-Key", "repo-1").Must(t, 201)
		if !bytes.Equal(first.Raw, again.Raw) || first.Str("webhookSecret") == "" ||
			!strings.HasSuffix(first.Str("webhookUrl"), "/"+first.Str("repository.id")+"/"+first.Str("webhookSecret")) {
			t.Fatalf("the retry is not the first answer:\n first %s\n again %s", first.Raw, again.Raw)
		}
		alice.Do("DELETE", base+"/"+first.Str("repository.id"), nil).Must(t, 200)
	})

	t.Run("bad input is refused and nothing is kept", func(t *testing.T) {
		for _, c := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"repoUrl": "ftp://127.0.0.1/a/b.git", "destination": "plugin"}, "repoUrl"},
			{map[string]any{"repoUrl": "http://127.0.0.1/a/b.git", "destination": "plugin"}, "repoUrl"},
			{map[string]any{"repoUrl": "https://user:pw@127.0.0.1/a/b.git", "destination": "plugin"}, "repoUrl"},
			{map[string]any{"repoUrl": "https://10.1.2.3/a/b.git", "destination": "plugin"}, "repoUrl"},
			{map[string]any{"repoUrl": "https://169.254.169.254/a/b.git", "destination": "plugin"}, "repoUrl"},
			{map[string]any{"repoUrl": "-uhttps://127.0.0.1/a/b.git", "destination": "plugin"}, "repoUrl"},
			{map[string]any{"repoUrl": "https://127.0.0.1/a/b.git", "destination": "plugin", "authKind": "ssh"}, "repoUrl"},
			{map[string]any{"repoUrl": "git@127.0.0.1:a/b.git", "destination": "plugin"}, "repoUrl"},
			{map[string]any{"repoUrl": "https://127.0.0.1/a/b.git"}, "destination"},
			{map[string]any{"repoUrl": "https://127.0.0.1/a/b.git", "destination": "mu-plugin"}, "destination"},
			{map[string]any{"repoUrl": "https://127.0.0.1/a/b.git", "destination": "plugin", "folderName": "../x"}, "folderName"},
			{map[string]any{"repoUrl": "https://127.0.0.1/a/b.git", "destination": "wp-content", "folderName": "x"}, "folderName"},
			{map[string]any{"repoUrl": "https://127.0.0.1/a/b.git", "destination": "plugin", "branch": "--upload-pack=x"}, "branch"},
			{map[string]any{"repoUrl": "https://127.0.0.1/a/b.git", "destination": "plugin", "authKind": "ftp"}, "authKind"},
			{map[string]any{"repoUrl": "git@127.0.0.1:a/b.git", "destination": "plugin", "authKind": "ssh", "token": "t0k"}, "token"},
			{map[string]any{"repoUrl": "https://127.0.0.1/a/b.git", "destination": "plugin", "webhookSecret": "x"}, "webhookSecret"},
		} {
			if r := alice.Do("POST", base, c.body); r.Status != 400 || r.Code() != "invalid_request" || r.Details()["field"] != c.field {
				t.Errorf("%v: %d %s", c.body, r.Status, r.Raw)
			}
		}
		if got := alice.Do("GET", base, nil).Must(t, 200).List("repositories"); len(got) != 0 {
			t.Fatalf("kept: %v", got)
		}
	})

	token := "ghp_s3cret-token-never-shown"
	r := alice.Do("POST", base, map[string]any{"repoUrl": "https://127.0.0.1/acme/hello-git.git", "destination": "plugin", "token": token}).Must(t, 201)
	repo := r.Str("repository.id")
	webhook, whsec := r.Str("webhookUrl"), r.Str("webhookSecret")
	if !strings.HasPrefix(repo, "repo_") || r.Str("repository.folderName") != "hello-git" || r.Str("repository.branch") != "main" ||
		r.Get("repository.autoDeploy") != true || r.Get("repository.hasToken") != true || r.Get("repository.deployKeyPublic") != nil ||
		!strings.HasSuffix(webhook, "/hooks/git/"+repo+"/"+whsec) || strings.Contains(string(r.Raw), token) {
		t.Fatalf("connect: %s", r.Raw)
	}
	sshRepo := alice.Do("POST", base, map[string]any{"repoUrl": "git@127.0.0.1:acme/theme.git", "destination": "theme", "authKind": "ssh",
		"branch": "release", "autoDeploy": false}).Must(t, 201)
	if pub := sshRepo.Str("repository.deployKeyPublic"); !strings.HasPrefix(pub, "ssh-ed25519 ") || strings.Contains(string(sshRepo.Raw), "PRIVATE") {
		t.Fatalf("ssh connect: %s", sshRepo.Raw)
	}
	list := alice.Do("GET", base, nil).Must(t, 200)
	if len(list.List("repositories")) != 2 || strings.Contains(string(list.Raw), "webhook") || strings.Contains(string(list.Raw), whsec) {
		t.Fatalf("list: %s", list.Raw)
	}

	t.Run("PATCH takes branch, folderName and autoDeploy only", func(t *testing.T) {
		for _, f := range []string{"repoUrl", "destination", "authKind", "token", "id"} {
			if r := alice.Do("PATCH", base+"/"+repo, map[string]any{f: "x"}); r.Status != 400 || r.Code() != "invalid_request" || r.Details()["field"] != f {
				t.Errorf("PATCH %s: %d %s", f, r.Status, r.Raw)
			}
		}
		if r := alice.Do("PATCH", base+"/"+repo, map[string]any{"branch": "a..b"}); r.Status != 400 || r.Details()["field"] != "branch" {
			t.Errorf("PATCH bad branch: %d %s", r.Status, r.Raw)
		}
		p := alice.Do("PATCH", base+"/"+repo, map[string]any{"folderName": "hello", "autoDeploy": true}).Must(t, 200)
		if p.Str("repository.folderName") != "hello" || p.Str("repository.repoUrl") != "https://127.0.0.1/acme/hello-git.git" {
			t.Fatalf("PATCH: %s", p.Raw)
		}
	})

	t.Run("another workspace reaches none of it", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{"GET", base}, {"PATCH", base + "/" + repo}, {"DELETE", base + "/" + repo}, {"POST", base + "/" + repo + "/deploy"},
		} {
			var body any
			if c.method == "PATCH" {
				body = map[string]any{"branch": "x"}
			}
			if r := bob.Do(c.method, c.path, body); r.Status != 404 {
				t.Errorf("bob %s %s: %d %s", c.method, c.path, r.Status, r.Raw)
			}
		}
		other := bob.Do("POST", "/api/app/sites", map[string]any{"name": "Bob's"}).Must(t, 202).Str("site.id")
		if r := bob.Do("POST", "/api/app/sites/"+other+"/repositories/"+repo+"/deploy", nil); r.Status != 404 || r.Code() != "repository_not_found" {
			t.Errorf("bob deploys alice's repository through his site: %d %s", r.Status, r.Raw)
		}
	})

	t.Run("a deploy by hand", func(t *testing.T) {
		job := alice.Do("POST", base+"/"+repo+"/deploy", nil).Must(t, 202).Str("jobId")
		j := waitJob(t, alice, job, "succeeded")
		if j.Str("job.type") != "git_deploy" {
			t.Fatalf("job: %s", j.Raw)
		}
		d := agent.last()
		if d.Url != "https://127.0.0.1/acme/hello-git.git" || d.Branch != "main" || d.Token != token || d.Pin != "127.0.0.1" ||
			d.Destination != "plugin" || d.FolderName != "hello" || d.RepositoryId != repo || len(d.SshKey) != 0 {
			t.Fatalf("deploy request: %+v", d)
		}
		got := alice.Do("GET", base, nil).Must(t, 200).List("repositories")
		for _, g := range got {
			if g["id"] == repo && g["lastDeployedSha"] != agent.sha {
				t.Fatalf("lastDeployedSha: %v", g)
			}
		}
		sj := alice.Do("POST", base+"/"+sshRepo.Str("repository.id")+"/deploy", nil).Must(t, 202).Str("jobId")
		waitJob(t, alice, sj, "succeeded")
		if d := agent.last(); !strings.Contains(string(d.SshKey), "OPENSSH PRIVATE KEY") || d.Token != "" || d.Branch != "release" {
			t.Fatalf("ssh deploy request: url %s branch %s key %d bytes", d.Url, d.Branch, len(d.SshKey))
		}
	})

	t.Run("push webhooks", func(t *testing.T) {
		before := agent.count()
		agent.mu.Lock()
		agent.sha = strings.Repeat("b", 40)
		agent.mu.Unlock()
		body := pushBody("main", strings.Repeat("b", 40))
		// A wrong signature, a wrong secret in the URL, an unknown repository: nothing.
		bad := githubHeaders("whsec_wrong", body, "d-bad")
		if code, _ := hook(t, webhook, bad, body); code != 401 {
			t.Fatalf("bad signature: %d", code)
		}
		if code, _ := hook(t, strings.TrimSuffix(webhook, whsec)+"whsec_guess", githubHeaders(whsec, body, "d0"), body); code != 404 {
			t.Fatalf("wrong secret in the URL: %d", code)
		}
		if code, _ := hook(t, s.URL()+"/hooks/git/repo_nope/"+whsec, githubHeaders(whsec, body, "d0"), body); code != 404 {
			t.Fatalf("unknown repository: %d", code)
		}
		// Another branch: nothing.
		other := pushBody("feature", strings.Repeat("c", 40))
		if code, out := hook(t, webhook, githubHeaders(whsec, other, "d1"), other); code != 200 || !strings.Contains(out["ignored"].(string), "feature") {
			t.Fatalf("another branch: %d %v", code, out)
		}
		// A signed push to the branch deploys, once.
		code, out := hook(t, webhook, githubHeaders(whsec, body, "d2"), body)
		if code != 202 || out["jobId"] == nil {
			t.Fatalf("push: %d %v", code, out)
		}
		waitJob(t, alice, out["jobId"].(string), "succeeded")
		if code, out := hook(t, webhook, githubHeaders(whsec, body, "d2"), body); code != 200 || out["jobId"] != nil {
			t.Fatalf("replayed delivery: %d %v", code, out)
		}
		// The same commit again, under a new delivery: deployed already.
		if code, out := hook(t, webhook, githubHeaders(whsec, body, "d3"), body); code != 200 || !strings.Contains(out["ignored"].(string), "deployed already") {
			t.Fatalf("the same commit again: %d %v", code, out)
		}
		// GitLab (token) and Gitea (hex signature) formats.
		lab := pushBody("main", strings.Repeat("d", 40))
		if code, out := hook(t, webhook, map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": whsec, "X-Gitlab-Event-UUID": "u1"}, lab); code != 202 {
			t.Fatalf("gitlab: %d %v", code, out)
		} else {
			waitJob(t, alice, out["jobId"].(string), "succeeded")
		}
		if code, _ := hook(t, webhook, map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "wrong", "X-Gitlab-Event-UUID": "u2"}, lab); code != 401 {
			t.Fatalf("gitlab wrong token: %d", code)
		}
		tea := pushBody("main", strings.Repeat("e", 40))
		mac := hmac.New(sha256.New, []byte(whsec))
		mac.Write(tea)
		if code, out := hook(t, webhook, map[string]string{"X-Gitea-Event": "push", "X-Gitea-Delivery": "g1", "X-Gitea-Signature": hex.EncodeToString(mac.Sum(nil))}, tea); code != 202 {
			t.Fatalf("gitea: %d %v", code, out)
		} else {
			waitJob(t, alice, out["jobId"].(string), "succeeded")
		}
		if got := agent.count() - before; got != 3 {
			t.Fatalf("%d deploys from webhooks, want 3", got)
		}
		// autoDeploy off: verified pushes deploy nothing.
		alice.Do("PATCH", base+"/"+repo, map[string]any{"autoDeploy": false}).Must(t, 200)
		off := pushBody("main", strings.Repeat("f", 40))
		if code, out := hook(t, webhook, githubHeaders(whsec, off, "d9"), off); code != 200 || !strings.Contains(out["ignored"].(string), "autoDeploy") {
			t.Fatalf("autoDeploy off: %d %v", code, out)
		}
		// Too big a body is cut.
		huge := bytes.Repeat([]byte("x"), 2<<20)
		if code, _ := hook(t, webhook, githubHeaders(whsec, huge, "d10"), huge); code != 413 {
			t.Fatalf("huge delivery: %d", code)
		}
	})

	t.Run("secrets stay out of logs", func(t *testing.T) {
		l := logs.String()
		for _, secret := range []string{whsec, token} {
			if strings.Contains(l, secret) {
				t.Fatalf("a secret reached the logs")
			}
		}
	})

	t.Run("disconnect and site deletion", func(t *testing.T) {
		alice.Do("DELETE", base+"/"+repo, nil).Must(t, 200)
		body := pushBody("main", strings.Repeat("9", 40))
		if code, _ := hook(t, webhook, githubHeaders(whsec, body, "z1"), body); code != 404 {
			t.Fatalf("webhook of a disconnected repository: %d", code)
		}
		if r := alice.Do("DELETE", base+"/"+repo, nil); r.Status != 404 || r.Code() != "repository_not_found" {
			t.Fatalf("delete twice: %d %s", r.Status, r.Raw)
		}
		del := alice.Do("DELETE", "/api/app/sites/"+site, nil).Must(t, 202)
		waitJob(t, alice, del.Str("jobId"), "succeeded")
		if rp, _ := s.Node().Store().Repository(sshRepo.Str("repository.id")); rp != nil {
			t.Fatal("a deleted site's repository is kept")
		}
	})
	_ = time.Second
}
