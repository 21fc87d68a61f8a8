package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// TestDevFirstStartRestartAndAdmin is the dev walk-through of docs/operating.md and docs/operator.md: start
// `sandboxd dev`, use the printed token, create an account and a token
// with `sandboxd admin`, invite it, read the invitation from the outbox,
// accept it, restart, and find everything (and the same token) again.
func TestDevFirstStartRestartAndAdmin(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	dir := devDataDir(t)
	addr := freeAddr(t)
	edgeAddr := freeAddr(t)
	dev := start(t, nil, append([]string{"dev", "--data-dir", dir, "--api-addr", addr, "--edge-addr", edgeAddr}, sharedContainerd(t)...)...)
	url := dev.waitLine(t, "SANDBOX_URL=")
	token := dev.waitLine(t, "SANDBOX_TOKEN=")
	if url != "http://"+addr || !strings.HasPrefix(token, "sbx_") {
		t.Fatalf("printed %q %q", url, token)
	}
	env, err := os.ReadFile(filepath.Join(dir, "dev.env"))
	if err != nil {
		t.Fatal(err)
	}
	if string(env) != "SANDBOX_URL="+url+"\nSANDBOX_TOKEN="+token+"\n" {
		t.Fatalf("dev.env: %q", env)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "dev.env")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("dev.env mode %v", fi.Mode())
	}

	owner := st.NewClient(t, url, token)
	me := owner.Do("GET", "/api/account/me", nil).Must(t, 200)
	if me.Str("user.email") != "owner@localhost" || me.Str("user.plan") != "paid" {
		t.Fatalf("me: %s", me.Raw)
	}

	out, err := run(t, nil, "admin", "create-account", "--data-dir", dir, "--email", "bob@example.com", "--plan", "free")
	if err != nil || !strings.Contains(out, "bob@example.com") {
		t.Fatalf("create-account: %v %s", err, out)
	}
	if _, err := run(t, nil, "admin", "create-account", "--data-dir", dir, "--email", "bob@example.com", "--plan", "free"); err == nil || !strings.Contains(err.Error(), "conflict") {
		t.Fatalf("duplicate account: %v", err)
	}
	if _, err := run(t, nil, "admin", "create-account", "--data-dir", dir, "--email", "x@example.com", "--plan", "gold"); err == nil {
		t.Fatal("plan gold accepted")
	}
	out, err = run(t, nil, "admin", "create-token", "--server", url, "--data-dir", dir, "--email", "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	bob := st.NewClient(t, url, lastLine(out))
	bob.Do("GET", "/api/account/me", nil).Must(t, 200)

	inv := owner.Do("POST", "/api/app/workspaces/"+me.Str("user.personalWorkspaceId")+"/members",
		map[string]string{"email": "bob@example.com"}).Must(t, 201).Str("invitation.id")
	out, err = run(t, nil, "admin", "outbox", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "To: bob@example.com") || !strings.Contains(out, inv) {
		t.Fatalf("outbox: %v\n%s", err, out)
	}
	bob.Do("POST", "/api/account/invitations/"+inv+"/accept", nil).Must(t, 200)

	if _, err := run(t, []string{"SANDBOXD_OPERATOR_TOKEN=sbxo_wrong"}, "admin", "outbox", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "auth_required") {
		t.Fatalf("wrong operator token: %v", err)
	}

	// Restart: same URL, same token, same data. dev.env is there only
	// while a site can be created: gone once stopped, and back only when
	// the agent has registered again.
	dev.stop(t)
	if _, err := os.Stat(filepath.Join(dir, "dev.env")); !os.IsNotExist(err) {
		t.Fatalf("dev.env left behind by a stopped system: %v", err)
	}
	dev2 := start(t, nil, append([]string{"dev", "--data-dir", dir, "--api-addr", addr, "--edge-addr", edgeAddr}, sharedContainerd(t)...)...)
	st.WaitFor(t, 2*time.Minute, "dev.env", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "dev.env"))
		return err == nil && string(b) == string(env)
	})
	owner.Do("POST", "/api/app/sites", map[string]string{"name": "at once"}).Must(t, 202)
	if dev2.waitLine(t, "SANDBOX_URL=") != url || dev2.waitLine(t, "SANDBOX_TOKEN=") != token {
		t.Fatal("restart printed a different URL or token")
	}
	members := owner.Do("GET", "/api/app/workspaces/"+me.Str("user.personalWorkspaceId")+"/members", nil).Must(t, 200).List("members")
	if len(members) != 2 {
		t.Fatalf("members after restart: %v", members)
	}
	bob.Do("GET", "/api/account/me", nil).Must(t, 200)
	if n := len(owner.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens")); n != 1 {
		t.Fatalf("restart minted another token: %d", n)
	}
}

// TestThreeServerProcesses runs `sandboxd server` three times, the
// second and third joined with --join and a join token each (sharing the
// sealing key), and writes through a follower.
func TestThreeServerProcesses(t *testing.T) {
	t.Parallel()
	key, err := run(t, nil, "admin", "sealing-key", "new")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"SANDBOXD_SEALING_KEY=" + strings.TrimSpace(key)}
	var urls, dirs, clusters []string
	for i := 0; i < 3; i++ {
		dir := filepath.Join(t.TempDir(), "s")
		api, cluster := freeAddr(t), freeAddr(t)
		name := "s" + string(rune('1'+i))
		args := []string{"server", "--data-dir", dir, "--api-addr", api, "--cluster-addr", cluster, "--raft-addr", freeAddr(t), "--node-id", name}
		penv := env
		if i > 0 {
			args = append(args, "--join", clusters[0])
			penv = append(penv, "SANDBOXD_JOIN_TOKEN="+joinToken(t, dirs[0], "server", name))
		}
		start(t, penv, args...)
		urls = append(urls, "http://"+api)
		dirs = append(dirs, dir)
		clusters = append(clusters, "https://"+cluster)
	}
	token := readKey(t, filepath.Join(dirs[0], "operator-token"))
	env = append(env, "SANDBOXD_OPERATOR_TOKEN="+token)
	op := st.NewClient(t, urls[2], token)
	st.WaitFor(t, 60*time.Second, "three voters", func() bool {
		r, err := op.DoErr("GET", "/api/admin/cluster", nil)
		if err != nil || r.Status != 200 {
			return false
		}
		servers, _ := r.Get("cluster.servers").([]any)
		return len(servers) == 3
	})
	// The operator's table: three voters, one leader, each server's own
	// view (a follower's last contact with the leader), whichever server
	// is asked (the leader answers).
	var table string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("admin cluster printed:\n%s", table)
		}
	})
	st.WaitFor(t, 30*time.Second, "every follower to have heard the leader", func() bool {
		out, err := run(t, env, "admin", "cluster", "--server", urls[1])
		table = out
		if err != nil {
			t.Fatalf("admin cluster: %v", err)
		}
		leaders, followers := 0, 0
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) < 7 || !slices.Contains([]string{"s1", "s2", "s3"}, f[0]) {
				continue
			}
			if f[3] != "yes" {
				t.Fatalf("%s is not a voter:\n%s", f[0], out)
			}
			switch {
			case f[4] == "yes" && f[5] == "Leader":
				leaders++
			case f[4] == "no" && f[5] == "Follower" && strings.HasSuffix(l, " ago"):
				followers++
			}
		}
		return leaders == 1 && followers == 2
	})
	if out, err := run(t, env, "admin", "cluster", "--server", urls[0], "--json"); err != nil || !json.Valid([]byte(out)) || !strings.Contains(out, `"raftAddr"`) {
		t.Fatalf("admin cluster --json: %v %s", err, out)
	}
	out, err := run(t, env, "admin", "create-account", "--data-dir", dirs[1], "--email", "c@example.com", "--plan", "paid")
	if err != nil {
		t.Fatalf("create-account through a member: %v %s", err, out)
	}
	out, err = run(t, env, "admin", "create-token", "--server", urls[2], "--email", "c@example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range urls {
		st.NewClient(t, u, lastLine(out)).Do("GET", "/api/account/me", nil).Must(t, 200)
	}
}
