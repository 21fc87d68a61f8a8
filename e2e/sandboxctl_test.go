package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// ctlRunner runs the built sandboxctl as a person's shell would, with a
// config file of its own and no SANDBOX_* variables unless given.
type ctlRunner struct {
	t    *testing.T
	home string
	env  []string
}

func newCtl(t *testing.T, extra ...string) *ctlRunner {
	t.Helper()
	home := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "SANDBOXCTL_CONFIG=" + filepath.Join(home, "sandboxctl.json"),
		"SANDBOXCTL_CACHE=" + filepath.Join(home, "cache"), "NO_COLOR=1"}
	return &ctlRunner{t: t, home: home, env: append(env, extra...)}
}

// run returns the exit code, stdout and stderr of one command line.
func (c *ctlRunner) run(stdin string, args ...string) (int, string, string) {
	c.t.Helper()
	cmd := exec.Command(ctlBinary, args...)
	cmd.Env = c.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	c.t.Fatalf("sandboxctl %v: %v", args, err)
	return 0, "", ""
}

// ok runs a command that must succeed and returns its stdout.
func (c *ctlRunner) ok(args ...string) string {
	c.t.Helper()
	code, out, errs := c.run("", args...)
	if code != 0 {
		c.t.Fatalf("sandboxctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// json runs a command with --json and decodes what it printed.
func (c *ctlRunner) json(args ...string) map[string]any {
	c.t.Helper()
	out := c.ok(append(args, "--json")...)
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		c.t.Fatalf("sandboxctl %s --json printed no JSON object: %v\n%s", strings.Join(args, " "), err, out)
	}
	return v
}

// TestSandboxctl: the customer's command line against a real `sandboxd
// dev` system. Login by PKCE with the consent clicked in headless
// Chromium, and by a token on stdin; a site made with --wait and served;
// --json parsed; a gallery Blueprint validated; API errors exit 1 with
// their code, wrong command lines exit 2.
func TestSandboxctl(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	d := sharedDev(t)

	t.Run("login in a browser", func(t *testing.T) {
		c := newCtl(t)
		cmd := exec.Command(ctlBinary, "login", "--server", d.owner.Base, "--no-browser")
		cmd.Env = c.env
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		authURL, loginCode := "", ""
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(l, d.owner.Base+"/connect/authorize?") {
				authURL = l
			}
			if _, c, ok := strings.Cut(l, "login code: "); ok {
				loginCode = c
				break
			}
		}
		go func() { _, _ = io.Copy(io.Discard, stderr) }()
		if authURL == "" {
			t.Fatal("login printed no consent page address")
		}
		ctx, cancel := browser(t)
		defer cancel()
		css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
		// The person signs in by pasting a personal token, reads what the
		// CLI asks for, approves; the browser lands on the CLI's loopback
		// page.
		if err := chromedp.Do(ctx, chromedp.Navigate(authURL),
			chromedp.WaitVisible(css("#signin-token")), chromedp.SetValue(css("#token"), d.owner.Token), chromedp.Click(css("#signin-token")),
			chromedp.WaitVisible(css("#approve"))); err != nil {
			t.Fatalf("sign in on the consent page: %v", err)
		}
		scopes, err := chromedp.Run(ctx, chromedp.Text(css("#scopes")))
		if err != nil || !strings.Contains(scopes, "Act as you everywhere") {
			t.Fatalf("consent page scopes: %q %v", scopes, err)
		}
		// The person checks the page shows the code the terminal shows.
		if shown, err := chromedp.Run(ctx, chromedp.Text(css("#login-code"))); err != nil || loginCode == "" || shown != loginCode {
			t.Fatalf("login code: page %q, terminal %q (%v)", shown, loginCode, err)
		}
		if err := chromedp.Do(ctx, chromedp.Click(css("#approve")), chromedp.WaitVisible(css("#result"))); err != nil {
			t.Fatalf("approve: %v", err)
		}
		result, _ := chromedp.Run(ctx, chromedp.Text(css("#result")))
		if err := cmd.Wait(); err != nil || result != "Logged in" || !strings.Contains(out.String(), "logged in to "+d.owner.Base) {
			t.Fatalf("login: %v, page %q, %s", err, result, out.String())
		}
		if me := c.json("whoami"); field(me, "user.email") != d.email {
			t.Fatalf("whoami after the browser login: %v", me)
		}
		// The token is listed as the browser login's, and works.
		var found bool
		for _, tok := range c.json("tokens", "list")["tokens"].([]any) {
			m := tok.(map[string]any)
			found = found || (m["current"] == true && m["kind"] == "oauth" && m["scope"] == "account")
		}
		if !found {
			t.Fatal("the browser login's token is not listed as such")
		}
		c.ok("sites", "list")
		if fi, err := os.Stat(filepath.Join(c.home, "sandboxctl.json")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("config file: %v %v", fi, err)
		}
	})

	c := newCtl(t)
	if code, _, errs := c.run("sbx_not_a_token\n", "login", "--server", d.owner.Base, "--with-token"); code != 1 || !strings.Contains(errs, "auth_required") {
		t.Fatalf("login with a bad token: %d %s", code, errs)
	}
	// Login with a token on stdin (the rest of the test uses it).
	if code, out, errs := c.run(d.owner.Token+"\n", "login", "--server", d.owner.Base, "--with-token"); code != 0 || !strings.Contains(out, "logged in") {
		t.Fatalf("login --with-token: %d %s %s", code, out, errs)
	}

	// A site with --wait: ready when the command returns, and served.
	site := c.json("sites", "create", "--name", "CLI demo", "--wait")["site"].(map[string]any)
	id, url := site["id"].(string), site["url"].(string)
	if site["status"] != "ready" {
		t.Fatalf("sites create --wait: %v", site)
	}
	if code, body := fetch(t, url+"/"); code != 200 || !strings.Contains(body, "CLI demo") {
		t.Fatalf("the site: %d %.200s", code, body)
	}
	if list := c.ok("sites", "list"); !strings.Contains(list, id) || !strings.Contains(list, "ready") {
		t.Fatalf("sites list: %s", list)
	}

	t.Run("blueprint validate of a gallery file", func(t *testing.T) {
		out := c.ok("blueprints", "validate", "../blueprint/testdata/gallery/admin-notice/blueprint.json")
		if !strings.Contains(out, "runs here") {
			t.Fatalf("validate: %s", out)
		}
	})

	t.Run("errors and exit codes", func(t *testing.T) {
		if code, _, errs := c.run("", "sites", "get", "site_doesnotexist"); code != 1 || !strings.Contains(errs, "site_not_found") {
			t.Fatalf("unknown site: %d %s", code, errs)
		}
		if code, _, errs := c.run("", "sites", "get"); code != 2 || !strings.Contains(errs, "accepts 1 arg") {
			t.Fatalf("missing argument: %d %s", code, errs)
		}
		if code, _, _ := c.run("", "sites", "frobnicate"); code != 2 {
			t.Fatalf("unknown command: %d", code)
		}
	})

	t.Run("in a terminal", func(t *testing.T) {
		long := c.json("sites", "create", "--name", "A site with a name far too long for one line of a terminal", "--wait")
		ctlInATerminal(t, c, field(long, "site.id"))
		ctlProgressInATerminal(t, c)
		c.ok("sites", "delete", field(long, "site.id"), "--wait")
	})
	t.Run("site toolbox", func(t *testing.T) { ctlToolbox(t, c, id, url) })
	t.Run("templates, launch links, restore", func(t *testing.T) { ctlTemplates(t, c, id) })
	t.Run("blueprints run, apply, bake, watch", func(t *testing.T) { ctlBlueprints(t, c, id) })
	t.Run("account and workspace", func(t *testing.T) {
		if out := c.ok("usage"); !strings.Contains(out, "sites") {
			t.Fatalf("usage: %s", out)
		}
		c.ok("roles", "create", "cli-reviewer", "--cap", "create")
		if out := c.ok("roles", "list"); !strings.Contains(out, "cli-reviewer") {
			t.Fatalf("roles list: %s", out)
		}
		c.ok("members", "list")
		c.ok("roles", "delete", "cli-reviewer")
	})

	start := time.Now()
	c.ok("sites", "delete", id, "--wait")
	t.Logf("sites delete --wait took %s", time.Since(start).Round(time.Millisecond))
	if code, _, errs := c.run("", "sites", "get", id); code != 1 || !strings.Contains(errs, "site_not_found") {
		t.Fatalf("after delete: %d %s", code, errs)
	}
}
