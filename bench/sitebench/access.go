package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/gitdeploy"
	"github.com/sandboxd/sandboxd/agent/toolbox"
	"github.com/sandboxd/sandboxd/controlplane/server"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/dnstest"
	"github.com/sandboxd/sandboxd/internal/gittest"
	"github.com/sandboxd/sandboxd/internal/pebbletest"
)

// benchT stands in for testing.TB for the test servers the access
// phases run: a failure ends the run, and what they leave is removed at
// its end.
type benchT struct {
	cleanups []func()
	dirs     []string
}

func (b *benchT) Helper()                           {}
func (b *benchT) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (b *benchT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (b *benchT) Cleanup(f func())                  { b.cleanups = append(b.cleanups, f) }
func (b *benchT) TempDir() string {
	d, err := os.MkdirTemp("", "sitebench-")
	if err != nil {
		panic(err)
	}
	b.dirs = append(b.dirs, d)
	return d
}

func (b *benchT) done() {
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		b.cleanups[i]()
	}
	for _, d := range b.dirs {
		_ = os.RemoveAll(d)
	}
}

// accessBench is what the access phases run besides the system: a DNS
// server, Pebble validating against the edge, and a git server.
type accessBench struct {
	t      *benchT
	dns    *dnstest.Server
	pebble *pebbletest.Pebble
	git    *gittest.HTTPServer
}

// access, when set, configures the system the access phases measure.
var access *accessBench

// setUpAccess starts the servers and says how the system uses them: the
// edge's ports are chosen here so Pebble can validate against them.
func setUpAccess(edgeAddr, tlsAddr string) (*accessBench, error) {
	b := &accessBench{t: &benchT{}}
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		b.dns = dnstest.Start(b.t)
		b.pebble = pebbletest.Start(b.t, pebbletest.Options{HTTPPort: portOf(edgeAddr), TLSPort: portOf(tlsAddr), DNSServer: b.dns.Addr})
		b.git = gittest.NewHTTPServer(b.t)
	}()
	if err != nil {
		b.t.done()
		return nil, err
	}
	return b, nil
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	var n int
	fmt.Sscan(p, &n)
	return n
}

func (b *accessBench) configure(cfg *server.Config, ac *agent.Config, ec *edge.Config) {
	cfg.DNSResolver = b.dns.Addr
	ac.SSHAddr, ac.GitCAFile = "127.0.0.1:0", b.git.CAFile
	ec.ACME = edge.ACMEConfig{CA: b.pebble.Directory, Roots: b.pebble.ServerRoots}
}

// accessPhases measures SSH sessions, Git deploys and custom domains,
// each next to the agent's own steps called directly, alternated.
func accessPhases(ctx context.Context, sys *system, n int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	mgr := sys.agent.Sites()
	newSite := func(name string) (string, string, error) {
		out, err := sys.api("POST", "/api/app/sites", `{"name":"`+name+`"}`)
		if err != nil {
			return "", "", err
		}
		site := out["site"].(map[string]any)
		if err := sys.waitJob(ctx, out["jobId"].(string)); err != nil {
			return "", "", err
		}
		return site["id"].(string), strings.Split(strings.TrimPrefix(site["url"].(string), "http://"), ":")[0], nil
	}
	subject, subjectHost, err := newSite("Access API")
	if err != nil {
		return err
	}
	baseline, _, err := newSite("Access baseline")
	if err != nil {
		return err
	}

	// SSH: a command through the gateway (TCP, handshake, the control
	// plane's AuthorizeSSH, exec in the container) next to the same exec
	// called on the agent.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	if _, err := sys.api("POST", "/api/account/ssh-keys", `{"name":"bench","publicKey":"`+pub+`"}`); err != nil {
		return err
	}
	cfg := &ssh.ClientConfig{User: subject, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		Timeout: 30 * time.Second}
	var sshBase, sshAPI []time.Duration
	for i := 0; i < 2*n; i++ {
		t0 := time.Now()
		if res, err := mgr.Exec(ctx, subject, []string{"true"}, nil); err != nil || res.ExitCode != 0 {
			return fmt.Errorf("exec: %v %v", res, err)
		}
		sshBase = append(sshBase, time.Since(t0))
		t0 = time.Now()
		c, err := ssh.Dial("tcp", sys.agent.SSHAddr(), cfg)
		if err != nil {
			return fmt.Errorf("ssh: %w", err)
		}
		sess, err := c.NewSession()
		if err == nil {
			err = sess.Run("true")
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("ssh run: %w", err)
		}
		sshAPI = append(sshAPI, time.Since(t0))
	}
	fmt.Printf("  command in the site: agent exec directly / ssh through the gateway (connect, authorize, exec), %d each, alternated:\n", 2*n)
	fmt.Printf("    p50 %s / %s, p95 %s / %s: %.2fx\n", ms(pct(sshBase, .5)), ms(pct(sshAPI, .5)), ms(pct(sshBase, .95)), ms(pct(sshAPI, .95)),
		float64(pct(sshAPI, .5))/float64(pct(sshBase, .5)))

	// Git: a new commit pushed, then deployed. Baseline: the agent's own
	// fetch and placement called directly on another site; subject: a
	// signed push webhook → job → node → fetch → placement.
	plugin := func(v int) map[string]string {
		return map[string]string{"bench-git.php": fmt.Sprintf("<?php\n/*\nPlugin Name: Bench Git\nVersion: %d\n*/\n", v),
			"inc/a.php": strings.Repeat("<?php // filler\n", 2000)}
	}
	repo := gittest.NewRepo(access.t, access.git.Root, "bench-git", plugin(0))
	out, err := sys.api("POST", "/api/app/sites/"+subject+"/repositories",
		`{"repoUrl":"`+access.git.URL("127.0.0.1", "bench-git")+`","destination":"plugin"}`)
	if err != nil {
		return err
	}
	hook, secret := out["webhookUrl"].(string), out["webhookSecret"].(string)
	fetcher := &gitdeploy.Fetcher{Dir: access.t.TempDir(), CAFile: access.git.CAFile}
	var gitBase, gitAPI []time.Duration
	for i := 1; i <= n; i++ {
		repo.Commit(fmt.Sprintf("base %d", i), plugin(2*i))
		repo.Push("main")
		t0 := time.Now()
		tree, err := fetcher.Fetch(ctx, gitdeploy.Source{RepoID: "bench", URL: access.git.URL("127.0.0.1", "bench-git"), Branch: "main"})
		if err != nil {
			return err
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tree.WriteTar(ctx, pw, "bench-git")) }()
		err = sys.agent.Toolbox().PlaceTree(ctx, baseline, toolbox.PlacePlugin, "bench-git", pr)
		pr.Close()
		if err != nil {
			return err
		}
		gitBase = append(gitBase, time.Since(t0))

		repo.Commit(fmt.Sprintf("api %d", i), plugin(2*i+1))
		sha := repo.Push("main")
		t0 = time.Now()
		job, err := pushHook(hook, secret, fmt.Sprintf("bench-%d", i), sha)
		if err != nil {
			return err
		}
		if err := sys.waitJob(ctx, job); err != nil {
			return err
		}
		gitAPI = append(gitAPI, time.Since(t0))
	}
	fmt.Printf("  new commit placed in the site: gitdeploy fetch + PlaceTree called directly / signed push webhook → job → node, %d each, alternated:\n", n)
	fmt.Printf("    p50 %s / %s, p95 %s / %s: %.2fx\n", ms(pct(gitBase, .5)), ms(pct(gitAPI, .5)), ms(pct(gitBase, .95)), ms(pct(gitAPI, .95)),
		float64(pct(gitAPI, .5))/float64(pct(gitBase, .5)))

	// Custom domains: WordPress moved to a name. Baseline: the agent's
	// SetURL called directly; subject: connect + check → active through
	// the API (DNS check, Raft, job, node). Then the first HTTPS answer at
	// the name (the certificate ordered from Pebble on that handshake)
	// next to the second (the certificate cached).
	access.dns.Set(access.t, subjectHost, "A 127.0.0.1")
	var domBase, domAPI, first, second []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := mgr.SetURL(ctx, baseline, fmt.Sprintf("https://base%d.example.com", i)); err != nil {
			return err
		}
		domBase = append(domBase, time.Since(t0))

		host := fmt.Sprintf("shop%d.example.com", i)
		access.dns.Set(access.t, host, "CNAME "+subjectHost+".")
		t0 = time.Now()
		if _, err := sys.api("PUT", "/api/app/sites/"+subject+"/domain", `{"hostname":"`+host+`"}`); err != nil {
			return err
		}
		chk, err := sys.api("POST", "/api/app/sites/"+subject+"/domain/check", "")
		if err != nil {
			return err
		}
		if err := sys.waitJob(ctx, chk["jobId"].(string)); err != nil {
			return err
		}
		domAPI = append(domAPI, time.Since(t0))
		for _, list := range []*[]time.Duration{&first, &second} {
			t0 = time.Now()
			if err := httpsOK(ctx, sys.edge.TLSAddr(), host); err != nil {
				return err
			}
			*list = append(*list, time.Since(t0))
		}
		del, err := sys.api("DELETE", "/api/app/sites/"+subject+"/domain", "")
		if err != nil {
			return err
		}
		if err := sys.waitJob(ctx, del["jobId"].(string)); err != nil {
			return err
		}
	}
	fmt.Printf("  WordPress moved to a custom domain: agent SetURL directly / PUT + check → active through the API, %d each, alternated:\n", n)
	fmt.Printf("    p50 %s / %s: %.2fx\n", ms(pct(domBase, .5)), ms(pct(domAPI, .5)), float64(pct(domAPI, .5))/float64(pct(domBase, .5)))
	fmt.Printf("  first HTTPS answer at the name (certificate ordered from Pebble on the handshake) / the next one: p50 %s / %s\n",
		ms(pct(first, .5)), ms(pct(second, .5)))
	return nil
}

// pushHook posts a signed GitHub push of main at sha and returns the job.
func pushHook(url, secret, delivery, sha string) (string, error) {
	body, _ := json.Marshal(map[string]any{"ref": "refs/heads/main", "after": sha, "before": strings.Repeat("0", 40)})
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		JobID   string `json:"jobId"`
		Ignored string `json:"ignored"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.JobID == "" {
		return "", fmt.Errorf("push webhook: %d %v %s", resp.StatusCode, err, out.Ignored)
	}
	return out.JobID, nil
}

// httpsOK fetches https://host/ through the edge, trusting Pebble's root.
func httpsOK(ctx context.Context, addr, host string) error {
	c := &http.Client{Timeout: 2 * time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: access.pebble.IssuerRoots(access.t)}, DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}}}
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+host+"/", nil)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("https://%s/: %d", host, resp.StatusCode)
	}
	return nil
}
