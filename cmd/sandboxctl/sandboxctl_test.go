package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// ctl runs one sandboxctl command line against the test's config and
// returns its exit code, stdout and stderr.
func ctl(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, bytes.NewBufferString(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// TestLoginWhoamiSites: login with a token keeps a profile only its
// owner can read; whoami and sites list answer in JSON (the API's
// objects) and as text; a bad token, an unknown site and a wrong command
// line get exit codes 1 (with the API's error code) and 2.
func TestLoginWhoamiSites(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	cfg := filepath.Join(t.TempDir(), "config.json")
	t.Setenv("SANDBOXCTL_CONFIG", cfg)
	t.Setenv("SANDBOX_URL", "")
	t.Setenv("SANDBOX_TOKEN", "")

	if code, _, errs := ctl(t, "", "whoami"); code != 2 || !strings.Contains(errs, "not logged in") {
		t.Fatalf("whoami before login: %d %s", code, errs)
	}
	if code, _, errs := ctl(t, "sbx_wrong\n", "login", "--server", s.URL(), "--with-token"); code != 1 || !strings.Contains(errs, "auth_required") {
		t.Fatalf("login with a bad token: %d %s", code, errs)
	}
	if _, err := os.Stat(cfg); !os.IsNotExist(err) {
		t.Fatal("a refused login kept a profile")
	}
	code, out, errs := ctl(t, alice.Token+"\n", "login", "--server", s.URL(), "--with-token")
	if code != 0 || !strings.Contains(out, "alice@example.com") {
		t.Fatalf("login: %d %s %s", code, out, errs)
	}
	if fi, err := os.Stat(cfg); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config file mode: %v %v", fi.Mode(), err)
	}
	code, out, _ = ctl(t, "", "whoami", "--json")
	var me struct{ User struct{ Email string } }
	if code != 0 || json.Unmarshal([]byte(out), &me) != nil || me.User.Email != "alice@example.com" {
		t.Fatalf("whoami --json: %d %s", code, out)
	}
	code, out, _ = ctl(t, "", "sites", "list", "--json")
	var list struct{ Sites []any }
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || list.Sites == nil {
		t.Fatalf("sites list --json: %d %s", code, out)
	}
	if code, out, _ = ctl(t, "", "sites", "list"); code != 0 || !strings.HasPrefix(out, "ID") {
		t.Fatalf("sites list: %d %s", code, out)
	}
	if code, _, errs := ctl(t, "", "sites", "get", "site_nope"); code != 1 || !strings.Contains(errs, "site_not_found") {
		t.Fatalf("an unknown site: %d %s", code, errs)
	}
	for _, args := range [][]string{{"sites", "get"}, {"sites", "frobnicate"}, {"nonsense"}, {"sites", "list", "--bogus"}} {
		if code, _, errs := ctl(t, "", args...); code != 2 {
			t.Errorf("%v: exit %d %s", args, code, errs)
		}
	}
	// Tokens: made (the secret once), listed, revoked; workspaces listed.
	code, out, _ = ctl(t, "", "tokens", "create", "--name", "ci", "--json")
	var made struct {
		Token  struct{ ID string }
		Secret string
	}
	if code != 0 || json.Unmarshal([]byte(out), &made) != nil || made.Secret == "" {
		t.Fatalf("tokens create: %d %s", code, out)
	}
	if code, out, _ = ctl(t, "", "tokens", "list"); code != 0 || !strings.Contains(out, made.Token.ID) || strings.Contains(out, made.Secret) {
		t.Fatalf("tokens list: %d %s", code, out)
	}
	if code, _, _ = ctl(t, "", "tokens", "delete", made.Token.ID); code != 0 {
		t.Fatalf("tokens delete: %d", code)
	}
	if code, out, _ = ctl(t, "", "workspaces", "list"); code != 0 || !strings.Contains(out, alice.Personal) {
		t.Fatalf("workspaces list: %d %s", code, out)
	}
	// A gallery Blueprint is checked (nothing saved); a file that is not
	// JSON is a usage error.
	gallery := "../../blueprint/testdata/gallery/admin-notice/blueprint.json"
	if code, out, errs := ctl(t, "", "blueprints", "validate", gallery, "--json"); code != 0 || !strings.Contains(out, "compatReport") {
		t.Fatalf("blueprints validate: %d %s %s", code, out, errs)
	}
	notJSON := filepath.Join(t.TempDir(), "x.json")
	os.WriteFile(notJSON, []byte("{nope"), 0o600)
	if code, _, _ := ctl(t, "", "blueprints", "validate", notJSON); code != 2 {
		t.Fatalf("validate a file that is not JSON: %d", code)
	}
	// The environment wins over the profile.
	t.Setenv("SANDBOX_TOKEN", "sbx_other")
	if code, _, errs := ctl(t, "", "whoami"); code != 1 || !strings.Contains(errs, "auth_required") {
		t.Fatalf("SANDBOX_TOKEN ignored: %d %s", code, errs)
	}
	t.Setenv("SANDBOX_TOKEN", "")
	if code, out, _ := ctl(t, "", "logout"); code != 0 || !strings.Contains(out, "logged out") {
		t.Fatalf("logout: %d %s", code, out)
	}
	if code, _, _ := ctl(t, "", "whoami"); code != 2 {
		t.Fatalf("whoami after logout: %d", code)
	}
}

// TestFitColumns: on a terminal, a table wider than it loses characters
// from its widest columns (ending in an ellipsis), never below 8.
func TestFitColumns(t *testing.T) {
	header := []string{"ID", "NAME", "URL"}
	row := []string{"site_0123456789abcdef", "demo", "http://a-very-long-slug-for-a-demo-site.sandbox.example.com"}
	for _, tc := range []struct {
		width int
		want  []string
	}{
		{0, row},
		{200, row},
		{60, []string{"site_0123456789abcdef", "demo", "http://a-very-long-slug-for-a-…"}},
		{40, []string{"site_0123456789abcdef", "demo", "http://a-v…"}},
	} {
		got := fitColumns(header, [][]string{header, row}, tc.width)
		if strings.Join(got[1], "|") != strings.Join(tc.want, "|") {
			t.Errorf("width %d: %q", tc.width, got[1])
		}
		if tc.width > 0 {
			if n := len([]rune(strings.Join(got[1], "  "))); n > tc.width {
				t.Errorf("width %d: %d runes", tc.width, n)
			}
		}
	}
}

// TestEveryCommandHasExamples: `--help` shows examples on every command
// (groups included), and every runnable command says what it does.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() == "help" {
			return
		}
		if strings.TrimSpace(c.Example) == "" && c.Runnable() && !c.HasSubCommands() {
			t.Errorf("%q has no examples", c.CommandPath())
		}
		if strings.TrimSpace(c.Short) == "" {
			t.Errorf("%q has no short description", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&env{}))
	code, out, _ := ctl(t, "", "completion", "zsh")
	if code != 0 || !strings.Contains(out, "#compdef sandboxctl") {
		t.Fatalf("zsh completion: %d %.100s", code, out)
	}
}

// TestCompleteSiteIDs: the shell's completion of a SITE argument offers
// the workspace's sites, with their names as descriptions (a fake API:
// the test server has no node to make sites on).
func TestCompleteSiteIDs(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/app/sites" || r.Header.Get("Authorization") != "Bearer sbx_test" {
			http.Error(w, `{"error":{"code":"auth_required","message":"no"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"sites":[{"id":"site_1","name":"completion-demo"},{"id":"site_2","name":"other"}]}`)
	}))
	defer api.Close()
	t.Setenv("SANDBOXCTL_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	t.Setenv("SANDBOX_URL", api.URL)
	t.Setenv("SANDBOX_TOKEN", "sbx_test")
	for _, args := range [][]string{{"sites", "get", ""}, {"sites", "delete", "s"}, {"sites", "open", ""}, {"sites", "php", "set-version", ""}, {"sites", "files", "ls", ""}} {
		code, out, errs := ctl(t, "", append([]string{"__complete"}, args...)...)
		if code != 0 || !strings.Contains(out, "site_1\tcompletion-demo") || !strings.Contains(out, "site_2\tother") {
			t.Fatalf("complete %v: %d %q %s", args, code, out, errs)
		}
	}
	if _, out, _ := ctl(t, "", "__complete", "sites", "get", "site_1", ""); strings.Contains(out, "site_2") {
		t.Fatalf("a second argument was completed as a site: %q", out)
	}
}

// TestTokenStaysWithItsServer: a profile's token is sent to its own
// server only; naming another server (flag or SANDBOX_URL) uses the
// profile kept for that one, or asks for a login, and never leaks it.
func TestTokenStaysWithItsServer(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	t.Setenv("SANDBOXCTL_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	t.Setenv("SANDBOX_URL", "")
	t.Setenv("SANDBOX_TOKEN", "")
	if code, _, errs := ctl(t, alice.Token+"\n", "login", "--server", s.URL(), "--with-token"); code != 0 {
		t.Fatalf("login: %s", errs)
	}
	var got []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		http.Error(w, `{"error":{"code":"auth_required","message":"no"}}`, http.StatusUnauthorized)
	}))
	defer other.Close()
	if code, _, errs := ctl(t, "", "--server", other.URL, "sites", "list"); code != 2 || !strings.Contains(errs, "no token for "+other.URL) {
		t.Fatalf("--server elsewhere: %d %s", code, errs)
	}
	t.Setenv("SANDBOX_URL", other.URL)
	if code, _, errs := ctl(t, "", "whoami"); code != 2 || !strings.Contains(errs, "no token for") {
		t.Fatalf("SANDBOX_URL elsewhere: %d %s", code, errs)
	}
	if code, _, errs := ctl(t, "", "--profile", "default", "whoami"); code != 2 || !strings.Contains(errs, "is for "+s.URL()) {
		t.Fatalf("a profile named for another server: %d %s", code, errs)
	}
	if len(got) != 0 {
		t.Fatalf("requests reached the other server: %q", got)
	}
	// The profile's own server (even written with a trailing slash) works.
	t.Setenv("SANDBOX_URL", s.URL()+"/")
	if code, _, errs := ctl(t, "", "whoami"); code != 0 {
		t.Fatalf("the profile's server: %d %s", code, errs)
	}
}

// TestJSONIsTheAPIsBytes: --json prints what the API sent (indented):
// key order, escapes and numbers as they came.
func TestJSONIsTheAPIsBytes(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"user":{"email":"a@example.com","zeta":1,"alpha":"x&y<z>","big":12345678901234567890}}`)
	}))
	defer api.Close()
	t.Setenv("SANDBOXCTL_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	t.Setenv("SANDBOX_URL", api.URL)
	t.Setenv("SANDBOX_TOKEN", "sbx_test")
	code, out, errs := ctl(t, "", "whoami", "--json")
	want := "{\n  \"user\": {\n    \"email\": \"a@example.com\",\n    \"zeta\": 1,\n    \"alpha\": \"x&y<z>\",\n    \"big\": 12345678901234567890\n  }\n}\n"
	if code != 0 || out != want {
		t.Fatalf("whoami --json: %d %q %s", code, out, errs)
	}
}
