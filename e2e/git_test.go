package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/gittest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

func gitPlugin(version string) map[string]string {
	return map[string]string{
		"hello-git.php":  "<?php\n/*\nPlugin Name: Hello Git\nVersion: " + version + "\n*/\nrequire __DIR__ . '/inc/footer.php';\n",
		"inc/footer.php": "<?php\nadd_action('wp_footer', function () { echo '<p id=\"hello-git\">hello-git " + version + "</p>'; });\n",
	}
}

// pushDelivery posts a GitHub push event for branch at after, signed with
// secret, to a repository's webhook URL.
func pushDelivery(t *testing.T, url, secret, delivery, branch, after string) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"ref": "refs/heads/" + branch, "before": strings.Repeat("0", 39) + "1", "after": after,
		"repository": map[string]any{"full_name": "acme/hello-git"}})
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
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

// TestGitDeployOnARealSite deploys a plugin from a real git server over
// HTTPS and a theme over SSH with the repository's deploy key, into a
// real WordPress: the first deploy activates them; a push signed with
// the webhook secret deploys the new commit; a bad signature, a push to
// another branch and a replayed delivery deploy nothing; repoUrl cannot
// be changed.
func TestGitDeployOnARealSite(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	srv := gittest.NewHTTPServer(t)
	plugin := gittest.NewRepo(t, srv.Root, "hello-git", gitPlugin("1.0"))
	sshd := gittest.NewSSHServer(t, nil)
	themeRoot := t.TempDir()
	theme := gittest.NewRepo(t, themeRoot, "git-theme", map[string]string{
		"style.css":     "/*\nTheme Name: Git Theme\nVersion: 1.0\n*/\n",
		"index.php":     "<?php\n?><!doctype html><html><body><h1 id=\"git-theme\">deployed over ssh</h1><?php wp_footer(); ?></body></html>\n",
		"functions.php": "<?php\n",
	})
	dir := devDataDir(t)
	d := startDev(t, dir, freeAddr(t), freeAddr(t), "--fetch-allow", "127.0.0.1/32", "--git-ca-file", srv.CAFile)
	made := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Git shop"}).Must(t, 202)
	id := made.Str("site.id")
	if job := d.waitJob(t, made.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("create: %v", job)
	}
	siteURL := d.owner.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200).Str("site.url")
	base := "/api/app/sites/" + id + "/repositories"
	deployed := func(repo string) string {
		for _, r := range d.owner.Do("GET", base, nil).Must(t, 200).List("repositories") {
			if r["id"] == repo {
				s, _ := r["lastDeployedSha"].(string)
				return s
			}
		}
		t.Fatalf("repository %s is gone", repo)
		return ""
	}
	pluginState := func() (bool, string) {
		for _, p := range d.owner.Do("GET", "/api/app/sites/"+id+"/plugins", nil).Must(t, 200).List("plugins") {
			if p["slug"] == "hello-git" {
				return p["active"] == true, p["version"].(string)
			}
		}
		return false, ""
	}

	// HTTPS: connect, deploy, active.
	c := d.owner.Do("POST", base, map[string]any{"repoUrl": srv.URL("127.0.0.1", "hello-git"), "destination": "plugin", "branch": "main"}).Must(t, 201)
	repo, hook, secret := c.Str("repository.id"), c.Str("webhookUrl"), c.Str("webhookSecret")
	job := d.owner.Do("POST", base+"/"+repo+"/deploy", nil).Must(t, 202).Str("jobId")
	if j := d.waitJob(t, job); j["status"] != "succeeded" {
		t.Fatalf("deploy: %v", j)
	}
	head1 := gittest.Git(t, plugin.Bare, "rev-parse", "refs/heads/main")
	if active, version := pluginState(); !active || version != "1.0" || deployed(repo) != head1 {
		t.Fatalf("after the first deploy: active %v version %q, deployed %s (head %s)", active, version, deployed(repo), head1)
	}
	if code, body := served(t, siteURL+"/"); code != 200 || !strings.Contains(body, "hello-git 1.0") {
		t.Fatalf("the plugin's output: %d", code)
	}
	if r := d.owner.Do("PATCH", base+"/"+repo, map[string]any{"repoUrl": "https://127.0.0.1/other.git"}); r.Status != 400 ||
		r.Code() != "invalid_request" || r.Details()["field"] != "repoUrl" {
		t.Fatalf("PATCH repoUrl: %d %s", r.Status, r.Raw)
	}

	// A push signed with the secret deploys the new commit.
	plugin.Commit("v2", gitPlugin("2.0"))
	head2 := plugin.Push("main")
	code, out := pushDelivery(t, hook, secret, "delivery-2", "main", head2)
	if code != 202 || out["jobId"] == nil {
		t.Fatalf("push: %d %v", code, out)
	}
	if j := d.waitJob(t, out["jobId"].(string)); j["status"] != "succeeded" {
		t.Fatalf("push deploy: %v", j)
	}
	if active, version := pluginState(); !active || version != "2.0" || deployed(repo) != head2 {
		t.Fatalf("after the push: active %v version %q deployed %s", active, version, deployed(repo))
	}
	if code, body := served(t, siteURL+"/"); code != 200 || !strings.Contains(body, "hello-git 2.0") {
		t.Fatalf("the new commit's output: %d", code)
	}

	// A bad signature, another branch and a replay do nothing.
	plugin.Commit("v3", gitPlugin("3.0"))
	head3 := plugin.Push("main")
	if code, _ := pushDelivery(t, hook, "whsec_not-the-secret", "delivery-3", "main", head3); code != 401 {
		t.Fatalf("bad signature: %d", code)
	}
	plugin.Push("feature")
	if code, out := pushDelivery(t, hook, secret, "delivery-4", "feature", head3); code != 200 || out["jobId"] != nil {
		t.Fatalf("another branch: %d %v", code, out)
	}
	if code, out := pushDelivery(t, hook, secret, "delivery-2", "main", head2); code != 200 || out["jobId"] != nil {
		t.Fatalf("replay: %d %v", code, out)
	}
	if _, version := pluginState(); version != "2.0" || deployed(repo) != head2 {
		t.Fatalf("something deployed: version %q deployed %s", version, deployed(repo))
	}

	// SSH with the repository's own deploy key: a theme, switched to on
	// its first deploy.
	sc := d.owner.Do("POST", base, map[string]any{"repoUrl": sshd.URL("127.0.0.1", theme.Bare), "destination": "theme", "authKind": "ssh"}).Must(t, 201)
	pub := sc.Str("repository.deployKeyPublic")
	if err := os.WriteFile(sshd.AuthorizedKeys, []byte(pub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	job = d.owner.Do("POST", base+"/"+sc.Str("repository.id")+"/deploy", nil).Must(t, 202).Str("jobId")
	if j := d.waitJob(t, job); j["status"] != "succeeded" {
		t.Fatalf("ssh deploy: %v", j)
	}
	st.WaitFor(t, 30*time.Second, "the theme to serve", func() bool {
		code, body := served(t, siteURL+"/")
		return code == 200 && strings.Contains(body, `id="git-theme"`) && strings.Contains(body, "hello-git 2.0")
	})
	// Without the key on the server, the deploy fails and says why.
	if err := os.WriteFile(sshd.AuthorizedKeys, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	job = d.owner.Do("POST", base+"/"+sc.Str("repository.id")+"/deploy", nil).Must(t, 202).Str("jobId")
	j := d.waitJob(t, job)
	if e, _ := j["error"].(map[string]any); j["status"] != "failed" || e["code"] != "git_auth_failed" || !strings.Contains(e["message"].(string), "deploy key") {
		t.Fatalf("deploy with the key removed: %v", j)
	}
}
