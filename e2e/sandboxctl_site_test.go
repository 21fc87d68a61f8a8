package e2e

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mailPHP sends one mail through WordPress, which the site captures.
const mailPHP = `<?php require __DIR__ . '/wp-load.php'; wp_mail('someone@example.com', 'Sent from the CLI test', 'Body of the CLI mail'); echo 'sent';`

// ctlToolbox drives a ready site's toolbox through sandboxctl: files,
// debug log (followed while it grows), captured mail, PHP settings and
// version, the database (a query through the mysql client), SSH with a
// key from an agent and the host key the API vouched for, Library
// plugins, a login link.
func ctlToolbox(t *testing.T, c *ctlRunner, id, url string) {
	dir := t.TempDir()
	local := filepath.Join(dir, "hello.txt")
	if err := os.WriteFile(local, []byte("hello from the CLI\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("sites", "files", "put", id, local, "wp-content/uploads/hello.txt")
	if ls := c.ok("sites", "files", "ls", id, "wp-content/uploads"); !strings.Contains(ls, "hello.txt") {
		t.Fatalf("files ls: %s", ls)
	}
	got := filepath.Join(dir, "got.txt")
	c.ok("sites", "files", "get", id, "wp-content/uploads/hello.txt", "-o", got)
	if b, _ := os.ReadFile(got); string(b) != "hello from the CLI\n" {
		t.Fatalf("files get: %q", b)
	}
	c.ok("sites", "files", "mkdir", id, "wp-content/cli-dir")
	c.ok("sites", "files", "mv", id, "wp-content/uploads/hello.txt", "wp-content/cli-dir/hello.txt")
	if code, _, errs := c.run("", "sites", "files", "rm", id, "wp-content/cli-dir"); code != 2 {
		t.Fatalf("rm of a directory without -r: %d %s", code, errs)
	}
	c.ok("sites", "files", "rm", "-r", id, "wp-content/cli-dir")
	if code, _, errs := c.run("", "sites", "files", "get", id, "../wp-config.php"); code != 1 {
		t.Fatalf("a path out of the root: %d %s", code, errs)
	}

	// The debug log, followed while it grows: each line once.
	c.ok("sites", "debug", "on", id)
	if dbg := c.json("sites", "debug", id); !strings.Contains(mustJSON(t, dbg), `"wpDebugLog":true`) {
		t.Fatalf("debug: %v", dbg)
	}
	put := func(path, content string) {
		t.Helper()
		if code, out, errs := c.run(content, "sites", "files", "put", id, "-", path); code != 0 {
			t.Fatalf("files put - %s: %d %s %s", path, code, out, errs)
		}
	}
	put("wp-content/debug.log", "alpha line\n")
	follow := exec.Command(ctlBinary, "sites", "debug", "log", id, "--follow")
	follow.Env = c.env
	pipe, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen []string
	waitLine := func(want string) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("debug log --follow ended before %q: %v", want, seen)
				}
				seen = append(seen, l)
				if l == want {
					return
				}
			case <-deadline:
				t.Fatalf("debug log --follow: no %q in %v", want, seen)
			}
		}
	}
	waitLine("alpha line")
	put("wp-content/debug.log", "alpha line\nbeta line\n")
	waitLine("beta line")
	_ = follow.Process.Signal(syscall.SIGINT)
	_ = follow.Wait()
	for l := range lines {
		seen = append(seen, l)
	}
	if strings.Count(strings.Join(seen, "\n"), "alpha line") != 1 {
		t.Fatalf("debug log --follow printed a line twice: %v", seen)
	}
	c.ok("sites", "debug", "log", id, "--clear")
	c.ok("sites", "debug", "off", id)

	// Mail the site sends is captured.
	put("cli-mail.php", mailPHP)
	if code, body := fetch(t, url+"/cli-mail.php"); code != 200 || !strings.Contains(body, "sent") {
		t.Fatalf("send mail: %d %.200s", code, body)
	}
	if out := c.ok("sites", "mail", id); !strings.Contains(out, "Sent from the CLI test") {
		t.Fatalf("mail: %s", out)
	}
	if out := c.ok("sites", "mail", id, "1"); !strings.Contains(out, "Body of the CLI mail") {
		t.Fatalf("mail 1: %s", out)
	}
	c.ok("sites", "mail", id, "--clear")

	// PHP settings, then the version.
	c.ok("sites", "php", "config", id, "memory_limit=384M", "--wait")
	if cfg := mustJSON(t, c.json("sites", "php", "config", id)); !strings.Contains(cfg, "384M") {
		t.Fatalf("php config: %s", cfg)
	}
	c.ok("sites", "php", "set-version", id, "8.4", "--wait")
	if php := mustJSON(t, c.json("sites", "php", id)); !strings.Contains(php, `"phpVersion":"8.4"`) {
		t.Fatalf("php: %s", php)
	}
	if code, _, errs := c.run("", "sites", "php", "set-version", id, "5.6"); code != 1 || !strings.Contains(errs, "invalid_request") {
		t.Fatalf("an unknown PHP version: %d %s", code, errs)
	}

	// The database: masked unless asked, and a query through the client.
	pw := field(c.json("sites", "db", id), "database.password")
	if out := c.ok("sites", "db", id); pw == "" || strings.Contains(out, pw) {
		t.Fatalf("db shows the password unasked (or has none): %s", out)
	}
	if out := c.ok("sites", "db", id, "--show-password"); !strings.Contains(out, pw) {
		t.Fatalf("db --show-password: %s", out)
	}
	code, out, errs := c.run("SELECT option_value FROM wp_options WHERE option_name = 'blogname';\n", "sites", "db", id, "--shell")
	if code != 0 || !strings.Contains(out, "CLI demo") {
		t.Fatalf("db --shell: %d %s %s", code, out, errs)
	}

	// SSH with a key held by an agent; the host key is the API's.
	ctlSSH(t, c, id)

	// A plugin from the Library, deployed and active.
	zipPath := filepath.Join(dir, "cli-hello.zip")
	writePluginZip(t, zipPath, "cli-hello", "<?php\n/* Plugin Name: CLI hello */\nadd_action('wp_footer', function () { echo '<!-- cli-hello -->'; });\n")
	c.ok("library", "add", zipPath)
	c.ok("sites", "plugins", "add", id, "cli-hello", "--activate", "--wait")
	if out := c.ok("sites", "plugins", id); !strings.Contains(out, "cli-hello") {
		t.Fatalf("plugins: %s", out)
	}
	if code, body := fetch(t, url+"/"); code != 200 || !strings.Contains(body, "<!-- cli-hello -->") {
		t.Fatalf("the deployed plugin does not run: %d", code)
	}

	// A one-time login link.
	link := strings.TrimSpace(c.ok("sites", "open", id, "--print"))
	if !strings.HasPrefix(link, "http") {
		t.Fatalf("open --print: %q", link)
	}
}

// ctlSSH runs a command in the site over SSH through sandboxctl, with the
// key in an ssh-agent of the test's own.
func ctlSSH(t *testing.T, c *ctlRunner, id string) {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	sock := filepath.Join(dir, "agent.sock")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Process.Kill(); _ = agent.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	add := exec.Command("ssh-add", key)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v %s", err, out)
	}
	c.ok("ssh-keys", "add", key+".pub", "--name", "cli-test")
	withAgent := &ctlRunner{t: t, home: c.home, env: append(append([]string{}, c.env...), "SSH_AUTH_SOCK="+sock)}
	code, out, errs := withAgent.run("", "sites", "ssh", id, "--", "test -f index.php && echo in-the-wordpress-root")
	if code != 0 || !strings.Contains(out, "in-the-wordpress-root") {
		t.Fatalf("sites ssh -- cat: %d %q %s", code, out, errs)
	}
	if kh, err := os.ReadFile(filepath.Join(c.home, "known_hosts")); err != nil || !strings.Contains(string(kh), "ssh-ed25519") {
		t.Fatalf("the pinned host key: %q %v", kh, err)
	}
}

// writePluginZip writes a plugin ZIP holding slug/slug.php.
func writePluginZip(t *testing.T, path, slug, php string) {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, _ := zw.Create(slug + "/" + slug + ".php")
	_, _ = io.WriteString(w, php)
	_ = zw.Close()
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mustJSON is v as compact JSON.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// field reads a dotted path out of a decoded JSON object.
func field(v map[string]any, path string) string {
	var cur any = v
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[k]
	}
	s, _ := cur.(string)
	return s
}

// ctlTemplates: a template from the site, a site launched from it, its
// public launch link, and the site restored from the template.
func ctlTemplates(t *testing.T, c *ctlRunner, id string) {
	tpl := c.json("templates", "create", id, "--name", "CLI shop", "--wait")
	tplID := field(tpl, "template.id")
	if field(tpl, "template.status") != "ready" {
		t.Fatalf("templates create --wait: %v", tpl)
	}
	launched := c.json("templates", "launch", tplID, "--name", "from the template", "--wait")
	if field(launched, "site.status") != "ready" || field(launched, "site.templateId") != tplID {
		t.Fatalf("templates launch --wait: %v", launched)
	}
	c.ok("launch", "set", tplID, "--enabled")
	link := strings.TrimSpace(c.ok("launch", "url", tplID))
	if code, body := fetch(t, link); code != 200 {
		t.Fatalf("launch url %s: %d %.200s", link, code, body)
	}
	if out := c.ok("templates", "list"); !strings.Contains(out, tplID) {
		t.Fatalf("templates list: %s", out)
	}
	if r := c.json("sites", "restore", id, "--template", tplID, "--wait"); field(r, "site.status") != "ready" {
		t.Fatalf("sites restore --wait: %v", r)
	}
	c.ok("sites", "delete", field(launched, "site.id"), "--wait")
}

// failingBlueprint passes validation and fails when it runs.
const failingBlueprint = `{"steps":[{"step":"activatePlugin","pluginPath":"no-such-plugin/no-such-plugin.php"}]}`

// ctlBlueprints: a gallery Blueprint saved, run into a new site and
// applied to the ready one with its steps watched, a failing one applied
// (exit 1 with the run's code), baked into a template, its runs listed.
func ctlBlueprints(t *testing.T, c *ctlRunner, id string) {
	bp := c.json("blueprints", "save", "../blueprint/testdata/gallery/admin-notice/blueprint.json")
	bpID := field(bp, "blueprint.id")
	if bpID == "" {
		t.Fatalf("blueprints save: %v", bp)
	}
	code, out, errs := c.run("", "blueprints", "run", bpID, "--name", "bp-demo", "--watch")
	if code != 0 || !strings.Contains(out+errs, "succeeded") || !strings.Contains(out+errs, "done (") {
		t.Fatalf("blueprints run --watch: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := c.run("", "blueprints", "apply", id, bpID, "--watch"); code != 0 {
		t.Fatalf("blueprints apply --watch: %d\n%s%s", code, out, errs)
	}
	bad := filepath.Join(t.TempDir(), "fail.json")
	if err := os.WriteFile(bad, []byte(failingBlueprint), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = c.run("", "blueprints", "apply", id, "--file", bad, "--watch")
	if code != 1 || !strings.Contains(errs, "blueprint_run_failed") || !strings.Contains(out, "failed") {
		t.Fatalf("a failing apply: %d\n%s%s", code, out, errs)
	}
	if code, out, errs := c.run("", "blueprints", "bake", bpID, "--name", "Admin notice", "--watch"); code != 0 || !strings.Contains(out, "ready") {
		t.Fatalf("blueprints bake --watch: %d\n%s%s", code, out, errs)
	}
	if out := c.ok("blueprints", "runs", bpID); strings.Count(out, "succeeded") < 3 {
		t.Fatalf("blueprints runs: %s", out)
	}
	// The run's site goes.
	for _, s := range c.json("sites", "list")["sites"].([]any) {
		if m := s.(map[string]any); m["name"] == "bp-demo" {
			c.ok("sites", "delete", m["id"].(string), "--wait")
		}
	}
}
