package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// sshClient is Debian's OpenSSH client with a key of its own and the
// gateway's host key pinned (no trust on first use).
type sshClient struct {
	key, knownHosts string
	host, port      string
}

func newSSHClient(t *testing.T, dir string) (*sshClient, string) {
	t.Helper()
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "e2e", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return &sshClient{key: key, knownHosts: filepath.Join(dir, "known_hosts")}, string(pub)
}

func (c *sshClient) opts() []string {
	return []string{"-F", "/dev/null", "-i", c.key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + c.knownHosts,
		"-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=20"}
}

// ssh runs a command in the site and returns its output and error.
func (c *sshClient) ssh(user, command string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append(c.opts(), "-p", c.port, user+"@"+c.host, command)
	out, err := exec.CommandContext(ctx, "ssh", args...).CombinedOutput()
	return string(out), err
}

// sftp runs a batch of sftp commands.
func (c *sshClient) sftp(user, batch string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append(c.opts(), "-P", c.port, "-b", "-", user+"@"+c.host)
	cmd := exec.CommandContext(ctx, "sftp", args...)
	cmd.Stdin = strings.NewReader(batch)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSSHIntoASite: a member's key opens a shell command and SFTP in the
// site with OpenSSH (inside the container, as the site's uid, SFTP
// confined to the WordPress root, checked on the host); a key of another
// workspace, a deleted key and a removed member are refused at their next
// connection.
func TestSSHIntoASite(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)
	dir := d.dir
	made := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "SSH shop"}).Must(t, 202)
	id := made.Str("site.id")
	if job := d.waitJob(t, made.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("create: %v", job)
	}
	var rec struct{ UID uint32 }
	if b, err := os.ReadFile(filepath.Join(dir, "agent", "sites", "records", id+".json")); err != nil || json.Unmarshal(b, &rec) != nil || rec.UID < agent.FirstSiteUID {
		t.Fatalf("site record: %v %+v", err, rec)
	}

	keys := t.TempDir()
	owner, pub := newSSHClient(t, filepath.Join(keys))
	added := d.owner.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "laptop", "publicKey": pub}).Must(t, 201)
	info := d.owner.Do("GET", "/api/app/sites/"+id+"/ssh", nil).Must(t, 200)
	owner.host, owner.port = info.Str("ssh.host"), strconv.Itoa(int(info.Get("ssh.port").(float64)))
	if info.Str("ssh.username") != id || !strings.HasPrefix(info.Str("ssh.hostKeyFingerprint"), "SHA256:") ||
		info.Str("ssh.command") != "ssh -p "+owner.port+" "+id+"@"+owner.host {
		t.Fatalf("ssh info: %s", info.Raw)
	}
	if err := os.WriteFile(owner.knownHosts, []byte(info.Str("ssh.knownHosts")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	out, err := owner.ssh(id, "id -u; pwd; test -f index.php && echo wp-root; grep -c DB_NAME ../wp-config.php; echo $TERM; exit 3")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("ssh command: %v\n%s", err, out)
	}
	lines := strings.Fields(out)
	if len(lines) < 4 || lines[0] != strconv.Itoa(int(rec.UID)) || lines[1] != "/srv/site/wordpress" || lines[2] != "wp-root" || lines[3] != "1" {
		t.Fatalf("inside the site: %q (site uid %d)", out, rec.UID)
	}
	// The key's use is recorded.
	st.WaitFor(t, 30*time.Second, "lastUsedAt", func() bool {
		for _, k := range d.owner.Do("GET", "/api/account/ssh-keys", nil).Must(t, 200).List("sshKeys") {
			if k["id"] == added.Str("sshKey.id") && k["lastUsedAt"] != nil {
				return true
			}
		}
		return false
	})

	// SFTP: put and get inside the root; nothing outside it.
	local := filepath.Join(keys, "upload.txt")
	if err := os.WriteFile(local, []byte("via sftp\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(keys, "back.txt")
	out, err = owner.sftp(id, "put "+local+" wp-content/uploaded.txt\nget wp-content/uploaded.txt "+back+"\n")
	if err != nil {
		t.Fatalf("sftp put/get: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(back); string(b) != "via sftp\n" {
		t.Fatalf("sftp read back %q", b)
	}
	hostFile := filepath.Join(dir, "agent", "sites", "fs", id, "disk", "wordpress", "wp-content", "uploaded.txt")
	if st, err := os.Stat(hostFile); err != nil || st.Sys().(*syscall.Stat_t).Uid != rec.UID {
		t.Fatalf("the uploaded file on the host: %v", err)
	}
	for _, escape := range []string{"get /etc/passwd " + filepath.Join(keys, "passwd"), "get ../wp-config.php " + filepath.Join(keys, "wpc"),
		"get ../../../../etc/shadow " + filepath.Join(keys, "shadow"), "put " + local + " /../../../tmp/sandboxd-sftp-escape"} {
		out, err := owner.sftp(id, escape+"\n")
		if err == nil {
			t.Errorf("%q succeeded:\n%s", escape, out)
		}
	}
	for _, f := range []string{"passwd", "wpc", "shadow"} {
		if _, err := os.Stat(filepath.Join(keys, f)); err == nil {
			t.Errorf("sftp fetched %s from outside the site root", f)
		}
	}
	if _, err := os.Stat("/tmp/sandboxd-sftp-escape"); err == nil {
		os.Remove("/tmp/sandboxd-sftp-escape")
		t.Error("sftp wrote outside the site root")
	}
	if out, err := owner.sftp(id, "cd ..\npwd\n"); err != nil || !strings.Contains(out, "Remote working directory: /\n") {
		t.Errorf("cd .. from the root: %v\n%s", err, out)
	}

	// Bob, of another workspace, with his own key: refused. Invited into
	// the site's workspace he gets in; removed again, he is refused at
	// his next connection. A deleted key is refused too.
	url := "http://" + d.api
	// A second person: an address of its own on the shared system.
	bobEmail := "bob-" + strings.ToLower(ids.Random(4)) + "@example.com"
	if out, err := run(t, nil, "admin", "create-account", "--data-dir", dir, "--email", bobEmail, "--plan", "free"); err != nil {
		t.Fatalf("create-account: %v %s", err, out)
	}
	out, err = run(t, nil, "admin", "create-token", "--server", url, "--data-dir", dir, "--email", bobEmail)
	if err != nil {
		t.Fatal(err)
	}
	bob := st.NewClient(t, url, lastLine(out))
	bobKey, bobPub := newSSHClient(t, t.TempDir())
	bobKey.host, bobKey.port, bobKey.knownHosts = owner.host, owner.port, owner.knownHosts
	bob.Do("POST", "/api/account/ssh-keys", map[string]any{"name": "bob", "publicKey": bobPub}).Must(t, 201)
	refused := func(c *sshClient, who string) {
		t.Helper()
		out, err := c.ssh(id, "echo inside")
		if err == nil || strings.Contains(out, "inside") || !strings.Contains(out, "Permission denied") {
			t.Fatalf("%s: %v\n%s", who, err, out)
		}
	}
	refused(bobKey, "a key of another workspace")
	if r := bob.Do("GET", "/api/app/sites/"+id+"/ssh", nil); r.Status != 404 {
		t.Fatalf("bob reads the site's ssh access: %d", r.Status)
	}
	ws := d.owner.Do("GET", "/api/account/me", nil).Must(t, 200).Str("user.personalWorkspaceId")
	inv := d.owner.Do("POST", "/api/app/workspaces/"+ws+"/members", map[string]string{"email": bobEmail}).Must(t, 201).Str("invitation.id")
	bob.Do("POST", "/api/account/invitations/"+inv+"/accept", nil).Must(t, 200)
	if out, err := bobKey.ssh(id, "echo inside"); err != nil || strings.TrimSpace(out) != "inside" {
		t.Fatalf("a member's key: %v\n%s", err, out)
	}
	me := bob.Do("GET", "/api/account/me", nil).Must(t, 200).Str("user.id")
	d.owner.Do("DELETE", "/api/app/workspaces/"+ws+"/members/"+me, nil).Must(t, 200)
	refused(bobKey, "a removed member")

	d.owner.Do("DELETE", "/api/account/ssh-keys/"+added.Str("sshKey.id"), nil).Must(t, 200)
	refused(owner, "a deleted key")
}
