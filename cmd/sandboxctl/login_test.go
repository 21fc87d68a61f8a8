package main

import (
	"bufio"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// TestLoginInBrowser: `login` without --with-token prints the consent
// page's address and waits; a browser (here an HTTP client with cookies)
// signs in there, approves, and follows the redirect to the CLI's
// loopback listener; the CLI exchanges the code and keeps a profile whose
// token acts as the account (listed as an oauth token of scope account).
// A refusal on the consent page ends the login with exit 1.
func TestLoginInBrowser(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	t.Setenv("SANDBOXCTL_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	t.Setenv("SANDBOX_URL", "")
	t.Setenv("SANDBOX_TOKEN", "")

	for _, approve := range []bool{true, false} {
		pr, pw := io.Pipe()
		done := make(chan [2]string, 1)
		var out strings.Builder
		go func() {
			code := run([]string{"login", "--server", s.URL(), "--no-browser", "--name", "web"}, strings.NewReader(""), &out, pw)
			pw.Close()
			done <- [2]string{string(rune('0' + code)), out.String()}
		}()
		authURL, code := "", ""
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(l, "http") {
				authURL = l
			}
			if _, c, ok := strings.Cut(l, "login code: "); ok {
				code = c
				break
			}
		}
		go io.Copy(io.Discard, pr)
		if authURL == "" {
			t.Fatal("login printed no address to open")
		}
		to := consent(t, s.URL(), authURL, alice.Token, approve, code)
		if !strings.HasPrefix(to, "http://127.0.0.1:") {
			t.Fatalf("consent sent the browser to %s", to)
		}
		// A page that found the loopback port cannot feed the CLI a code
		// of its own: without the flow's state it is refused, and the
		// real answer still completes the login.
		forged, _ := url.Parse(to)
		q := forged.Query()
		q.Set("state", "guessed")
		q.Set("code", "attacker-code")
		forged.RawQuery = q.Encode()
		if resp, err := http.Get(forged.String()); err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a forged callback: %v %v", resp, err)
		}
		resp, err := http.Get(to)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res := <-done
		if !approve {
			if res[0] != "1" || !strings.Contains(string(page), "Login failed") {
				t.Fatalf("denied login: exit %s, page %s", res[0], page)
			}
			continue
		}
		if res[0] != "0" || !strings.Contains(res[1], "alice@example.com") || !strings.Contains(string(page), "Logged in") {
			t.Fatalf("login: exit %s, %s; page %s", res[0], res[1], page)
		}
		exit, list, errs := ctl(t, "", "tokens", "list", "--json")
		if exit != 0 || !strings.Contains(list, `"scope": "account"`) || !strings.Contains(list, "sandboxctl on ") {
			t.Fatalf("tokens list after a browser login: %d %s %s", exit, list, errs)
		}
		if code, _, errs := ctl(t, "", "sites", "list"); code != 0 {
			t.Fatalf("sites list with the browser login's token: %d %s", code, errs)
		}
		// logout revokes the token the browser login made.
		raw, _ := os.ReadFile(os.Getenv("SANDBOXCTL_CONFIG"))
		var cfg struct {
			Profiles map[string]struct{ Token, Origin string }
		}
		if err := json.Unmarshal(raw, &cfg); err != nil || cfg.Profiles["web"].Origin != "browser" {
			t.Fatalf("config after a browser login: %s", raw)
		}
		if code, out, errs := ctl(t, "", "logout", "--profile", "web"); code != 0 || !strings.Contains(out, "revoked") {
			t.Fatalf("logout: %d %s %s", code, out, errs)
		}
		st.NewClient(t, s.URL(), cfg.Profiles["web"].Token).Do("GET", "/api/account/me", nil).Must(t, 401)
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// consent plays the person at the consent page: sign in by pasting a
// personal token, check the page shows the terminal's login code, then
// approve or deny; it returns where the page sends the browser.
func consent(t *testing.T, base, authURL, token string, approve bool, code string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	u, _ := url.Parse(authURL)
	do := func(method, path string, form url.Values) (*http.Response, string) {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, base+path, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp, string(raw)
	}
	resp, _ := do("POST", "/connect/authorize", url.Values{"request": {u.RawQuery}, "action": {"token"}, "token": {token}})
	if resp.StatusCode != 303 {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	_, page := do("GET", resp.Header.Get("Location"), nil)
	m := csrfField.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, "Act as you everywhere") || code == "" || !strings.Contains(page, `id="login-code">`+code+"<") {
		t.Fatalf("consent page: %s", page)
	}
	action := "deny"
	if approve {
		action = "approve"
	}
	resp, _ = do("POST", "/connect/authorize", url.Values{"request": {u.RawQuery}, "action": {action}, "csrf": {html.UnescapeString(m[1])}})
	if resp.StatusCode != 303 {
		t.Fatalf("%s: %d", action, resp.StatusCode)
	}
	return resp.Header.Get("Location")
}
