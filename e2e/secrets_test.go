package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// TestSecretsCanary runs `sandboxd dev` through every kind of secret it
// handles (API tokens, with and without an Idempotency-Key, the cluster
// token, a license key, magic-login and Adminer tokens, a site's
// database password, the SMTP password), then looks for each one in
// every file under the data dir, every log line and every response that
// is not the one meant to carry it. A secret may rest only where it must
// (the dev token files, the cluster token file, the site's own
// configuration for its database password).
func TestSecretsCanary(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	began := time.Now()
	smtpAddr, _ := startSMTP(t)
	const smtpPassword = "canary-smtp-Pa55word-7d1e"
	// Its own containerd, under the data dir the canary walks: container
	// specs and containerd's metadata are places a secret could leak to.
	dir := devDataDir(t)
	p := start(t, []string{"SANDBOXD_SMTP_PASSWORD=" + smtpPassword}, "dev", "--data-dir", dir,
		"--api-addr", freeAddr(t), "--edge-addr", freeAddr(t), "--log-format", "json", "--log-level", "debug", "--php-versions", "8.2",
		"--smtp-addr", smtpAddr, "--smtp-from", "sandboxd@example.test", "--smtp-username", "canary")
	apiURL := p.waitLine(t, "SANDBOX_URL=")
	ownerToken := p.waitLine(t, "SANDBOX_TOKEN=")
	owner := st.NewClient(t, apiURL, ownerToken)
	d := &devSystem{dir: dir, proc: p, owner: owner}
	operatorToken := readKey(t, filepath.Join(dir, "operator-token"))
	// The cluster's keys: the sealing key and each member's private key
	// (their PEM bodies, one line of base64 each).
	pemBody := func(rel string) string {
		rest := []byte(readKey(t, filepath.Join(dir, rel)))
		for {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				t.Fatalf("no private key in %s", rel)
			}
			if b.Type == "PRIVATE KEY" {
				return base64.StdEncoding.EncodeToString(b.Bytes)[:64]
			}
		}
	}
	secrets := map[string]string{"owner token": ownerToken, "operator token": operatorToken, "SMTP password": smtpPassword,
		"sealing key": readKey(t, filepath.Join(dir, "sealing-key")), "server key": pemBody("tls/member.pem"),
		"agent key": pemBody("agent/tls/member.pem"), "edge key": pemBody("edge/tls/member.pem")}
	// A join token made and spent.
	joinTok := joinToken(t, dir, "edge", "")
	secrets["join token"] = joinTok[strings.LastIndex(joinTok, ".")+1:]
	var responses []*st.Response
	keep := func(r *st.Response) *st.Response { responses = append(responses, r); return r }

	// API tokens; one made under an Idempotency-Key, whose answer (with
	// the secret) is kept sealed for replays, and replayed.
	secrets["API token"] = owner.Do("POST", "/api/account/tokens", map[string]string{"name": "plain"}).Must(t, 201).Str("secret")
	secrets["keyed API token"] = owner.Do("POST", "/api/account/tokens", map[string]string{"name": "keyed"}, "Idempotency-Key", "canary-1").Must(t, 201).Str("secret")
	owner.Do("POST", "/api/account/tokens", map[string]string{"name": "keyed"}, "Idempotency-Key", "canary-1").Must(t, 201)
	for _, name := range []string{"API token", "keyed API token"} {
		keep(owner.As(secrets[name]).Do("GET", "/api/account/me", nil).Must(t, 200))
		keep(owner.As(secrets[name]).Do("POST", "/api/account/tokens", `{"bad json`).Must(t, 400))
	}
	op := st.NewClient(t, apiURL, operatorToken)
	keep(op.Do("GET", "/api/admin/accounts", nil).Must(t, 200))
	keep(op.Do("GET", "/api/admin/cluster", nil).Must(t, 200))
	keep(op.Do("GET", "/api/admin/members", nil).Must(t, 200))
	keep(op.Do("GET", "/api/admin/join-tokens", nil).Must(t, 200))
	keep(st.NewClient(t, apiURL, operatorToken+"x").Do("GET", "/api/admin/accounts", nil).Must(t, 401))
	secrets["operator token made by the API"] = op.Do("POST", "/api/admin/operator-tokens", map[string]string{"name": "canary"}).Must(t, 201).Str("token")

	// A license key, set on upload and again by PUT.
	secrets["license key"] = "CANARY-LICENSE-5b9e-0c7a"
	body, ct := st.Multipart(map[string]string{"licenseKey": secrets["license key"]}, "file", "canary.zip",
		wpzip.BuildPlugin("canary", "Canary", "1.0.0", ""))
	keep(owner.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct).Must(t, 201))
	keep(owner.Do("PUT", "/api/app/plugin-library/canary/license-key", map[string]string{"licenseKey": secrets["license key"]}).Must(t, 200))
	keep(owner.Do("GET", "/api/app/plugin-library", nil).Must(t, 200))

	// A demo webhook's signing secret, set and rotated (paused: nothing is
	// dialed), sealed at rest and shown only in those two answers.
	secrets["webhook secret"] = owner.Do("PUT", "/api/account/webhooks/demo-launches",
		map[string]any{"url": "https://hooks.example.test/sandboxd", "sendEvents": false}).Must(t, 200).Str("signingSecret")
	secrets["rotated webhook secret"] = owner.Do("POST", "/api/account/webhooks/demo-launches/rotate-secret", nil).Must(t, 200).Str("signingSecret")
	keep(owner.Do("GET", "/api/account/webhooks/demo-launches", nil).Must(t, 200))
	keep(owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": "https://hooks.example.test/v2", "sendEvents": false}).Must(t, 200))

	// A site, signed in to with a magic link, its database opened in Adminer.
	created := owner.Do("POST", "/api/app/sites", map[string]string{"name": "Canary"}).Must(t, 202)
	id, siteURL := created.Str("site.id"), created.Str("site.url")
	if job := d.waitJob(t, created.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("create: %v", job)
	}
	link := owner.Do("POST", "/api/sites/"+id+"/magic-login", nil).Must(t, 200)
	secrets["magic-login token"] = link.Str("token")
	if code, _ := fetch(t, link.Str("url")); code != 200 {
		t.Fatalf("magic link: %d", code)
	}
	db := owner.Do("GET", "/api/app/sites/"+id+"/database", nil).Must(t, 200)
	secrets["database password"] = db.Str("database.password")
	adminer, err := url.Parse(db.Str("database.adminerUrl"))
	if err != nil {
		t.Fatal(err)
	}
	secrets["Adminer token"] = adminer.Query().Get("sandbox_token")
	jar, _ := cookiejar.New(nil)
	browserLike := &http.Client{Transport: localhostClient.Transport, Jar: jar, Timeout: 30 * time.Second}
	resp, err := browserLike.Get(adminer.String())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "wp_options") {
		t.Fatalf("Adminer link: %d %.300s", resp.StatusCode, page)
	}
	// A Git repository with a token, its webhook secret (shown once) and
	// a delivery to its URL, which holds that secret, with a wrong
	// signature: the access log must not keep the URL whole.
	secrets["git token"] = "canary-git-token-2f8a-91cd"
	repo := owner.Do("POST", "/api/app/sites/"+id+"/repositories", map[string]any{"repoUrl": "https://git.example.test/acme/canary.git",
		"destination": "plugin", "token": secrets["git token"]}).Must(t, 201)
	secrets["git webhook secret"] = repo.Str("webhookSecret")
	if !strings.Contains(repo.Str("webhookUrl"), secrets["git webhook secret"]) {
		t.Fatalf("webhook URL: %s", repo.Raw)
	}
	hookReq, _ := http.NewRequest("POST", repo.Str("webhookUrl"), strings.NewReader(`{"ref":"refs/heads/main"}`))
	hookReq.Header.Set("X-GitHub-Event", "push")
	hookReq.Header.Set("X-Hub-Signature-256", "sha256=00")
	if resp, err := http.DefaultClient.Do(hookReq); err != nil || resp.StatusCode != 401 {
		t.Fatalf("a badly signed delivery: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	keep(owner.Do("GET", "/api/app/sites/"+id+"/repositories", nil).Must(t, 200))
	keep(owner.Do("PATCH", "/api/app/sites/"+id+"/repositories/"+repo.Str("repository.id"), map[string]any{"branch": "dev"}).Must(t, 200))
	// Mail goes out through SMTP with its password.
	ws := keep(owner.Do("GET", "/api/account/me", nil).Must(t, 200)).Str("user.personalWorkspaceId")
	keep(owner.Do("POST", "/api/app/workspaces/"+ws+"/members", map[string]string{"email": "canary@example.com"}).Must(t, 201))
	for name, v := range secrets {
		if len(v) < 12 {
			t.Fatalf("%s %q is too short to be a canary", name, v)
		}
	}

	for _, path := range []string{"/api/account/tokens", "/api/account/usage", "/api/app/workspaces", "/api/app/sites",
		"/api/app/sites/" + id, "/api/app/sites/" + id + "/debug/log", "/api/app/sites/" + id + "/plugins",
		"/api/app/sites/" + id + "/email", "/api/app/plugin-library/canary", "/api/openapi.json"} {
		keep(owner.Do("GET", path, nil))
	}
	for _, path := range []string{"/metrics", "/healthz", "/api/admin/outbox"} {
		keep(op.Do("GET", path, nil))
	}
	_, home := fetch(t, siteURL+"/")

	// Everything is written: stop the system (sites keep running).
	p.stop(t)

	for i, r := range responses {
		for name, v := range secrets {
			if bytes.Contains(r.Raw, []byte(v)) {
				t.Errorf("%s in response %d: %.200s", name, i, r.Raw)
			}
		}
	}
	for name, v := range secrets {
		if strings.Contains(home, v) {
			t.Errorf("%s in the site's home page", name)
		}
	}
	// The log, less the lines that print the owner's token on purpose.
	var logged []string
	for _, line := range strings.Split(p.output(), "\n") {
		if strings.HasPrefix(line, "SANDBOX_TOKEN=") || strings.Contains(line, "Authorization: Bearer "+ownerToken) {
			continue
		}
		logged = append(logged, line)
	}
	logText := strings.Join(logged, "\n")
	if !strings.Contains(logText, `"route":"GET /api/account/me"`) {
		t.Fatal("no access log lines: the check below would prove nothing")
	}
	if !strings.Contains(logText, `"path":"/hooks/git/`+repo.Str("repository.id")+`/…"`) {
		t.Error("the webhook delivery is not in the access log (cut): the check below would prove nothing for it")
	}
	for name, v := range secrets {
		if strings.Contains(logText, v) {
			t.Errorf("%s in the log", name)
		}
	}

	scanStart := time.Now()
	// Every byte under the data dir.
	allowed := map[string]func(rel string) bool{
		"owner token":       func(rel string) bool { return rel == "dev-token" },
		"operator token":    func(rel string) bool { return rel == "operator-token" },
		"sealing key":       func(rel string) bool { return rel == "sealing-key" },
		"server key":        func(rel string) bool { return rel == "tls/member.pem" },
		"agent key":         func(rel string) bool { return rel == "agent/tls/member.pem" },
		"edge key":          func(rel string) bool { return rel == "edge/tls/member.pem" },
		"database password": func(rel string) bool { return siteOwnConfig(rel, id) },
	}
	seenAllowed := map[string][]string{}
	var files, skipped int
	var scanned int64
	err = filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		// containerd's content store holds the compressed image layers,
		// imported from the image cache before the run and addressed by
		// their hash (a changed byte would not verify): nothing of the run
		// is written there. Their unpacked snapshots are scanned.
		if strings.Contains(rel, "io.containerd.content.v1.content/blobs/") {
			return nil
		}
		// The XFS image the sites' files and disks lie in (where the data
		// dir cannot clone by reference) is mounted at agent/sites/fs:
		// its files are scanned one by one through the mount.
		if rel == "agent/sites/fs.xfs" {
			return nil
		}
		// A file last written before the run began cannot hold a secret
		// made in it (files unpacked from images keep their archive times).
		if info, err := e.Info(); err == nil && info.ModTime().Before(began) {
			skipped++
			return nil
		}
		var sfs unix.Statfs_t
		if unix.Statfs(path, &sfs) == nil && sfs.Type == unix.NSFS_MAGIC {
			return nil // a pinned network namespace: a handle, no bytes
		}
		files++
		n, found, err := scanFile(path, secrets)
		scanned += n
		if err != nil {
			return err
		}
		for _, name := range found {
			if ok := allowed[name]; ok == nil || !ok(rel) {
				t.Errorf("%s at rest in %s", name, rel)
			} else {
				seenAllowed[name] = append(seenAllowed[name], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Positive control: the scan finds each secret where it must rest.
	for name := range allowed {
		if len(seenAllowed[name]) == 0 {
			t.Errorf("the %s was not found where it must rest: the scan misses files", name)
		}
	}
	t.Logf("allowed places: %v", seenAllowed)
	t.Logf("%d secrets looked for in %d responses, %d log lines and %d files written in the run (%d MiB, %v; %d older files left out)",
		len(secrets), len(responses), len(logged), files, scanned>>20, time.Since(scanStart).Round(time.Second), skipped)
}

// siteOwnConfig reports whether rel is where the site's own database
// password must be: the root-owned secrets mounted into the site, and the
// agent's record of the site. Not the site's own files.
func siteOwnConfig(rel, siteID string) bool {
	return strings.HasPrefix(rel, filepath.Join("agent", "sites", "fs", siteID, "secrets")+"/") ||
		rel == filepath.Join("agent", "sites", "records", siteID+".json")
}

// readKey reads a one-line key file.
func readKey(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// scanFile reports which secrets occur in a file. Only its data is read
// (a sparse site disk is mostly holes), in chunks that overlap by the
// longest secret.
func scanFile(path string, secrets map[string]string) (int64, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	longest := 0
	for _, v := range secrets {
		longest = max(longest, len(v))
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, nil, err
	}
	buf := make([]byte, 8<<20)
	var total int64
	found := map[string]bool{}
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if err != nil {
			break // ENXIO: no data after off
		}
		hole, err := unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			hole = fi.Size()
		}
		// Back up by the longest secret so one across a boundary is seen.
		start := max(0, data-int64(longest))
		for pos := start; pos < hole; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-pos)], pos)
			total += int64(n)
			for name, v := range secrets {
				if !found[name] && bytes.Contains(buf[:n], []byte(v)) {
					found[name] = true
				}
			}
			if err != nil && err != io.EOF {
				return total, nil, err
			}
			if n == 0 {
				break
			}
			if pos+int64(n) >= hole {
				break
			}
			pos += int64(n) - int64(longest)
		}
		off = hole
	}
	var names []string
	for name := range found {
		names = append(names, name)
	}
	return total, names, nil
}
