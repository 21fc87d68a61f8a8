package server_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/launcher"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// cookieClient sends exactly the Cookie header it is given and follows
// no redirect: a browser holding a planted cookie beside (or instead of)
// its own, which a cookie jar keyed by name cannot hold.
type cookieClient struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newCookieClient(t *testing.T, base string) *cookieClient {
	return &cookieClient{t: t, base: base, c: &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *cookieClient) do(method, path, cookie string, form url.Values) (*http.Response, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

// launchDemo submits the launch form with cookie and follows the
// launcher to the demo's one-time login, which it returns.
func (c *cookieClient) launchDemo(token, cookie string) string {
	c.t.Helper()
	resp, body := c.do("POST", "/launch/"+token, cookie, url.Values{})
	for i := 0; ; i++ {
		loc := resp.Header.Get("Location")
		switch {
		case resp.StatusCode == http.StatusSeeOther && strings.Contains(loc, "sandbox_login="):
			return loc
		case resp.StatusCode == http.StatusSeeOther && strings.HasPrefix(loc, "/launch/"+token+"/demos/"):
			resp, body = c.do("GET", loc, cookie, nil)
		case resp.StatusCode == http.StatusOK && strings.Contains(body, "Preparing your demo") && i < 200:
			time.Sleep(50 * time.Millisecond)
			resp, body = c.do("GET", resp.Request.URL.Path, cookie, nil)
		default:
			c.t.Fatalf("launch: %d %s\n%s", resp.StatusCode, loc, body)
		}
	}
}

// TestLaunchVisitorCookiePlanted: a visitor cookie the service did not
// sign is no visitor. A site under a shared parent domain plants a
// value it knows in a victim's browser: the victim is given a new,
// signed cookie and launches with it; the planted value then reaches
// nothing (no "return to your demo", no entry, no status), nor does a
// cookie carrying the victim's MAC on another value. The victim's own
// cookie, sent after the planted one, still finds their demo.
func TestLaunchVisitorCookiePlanted(t *testing.T) {
	s := st.Single(t, st.Options{Configure: func(c *server.Config) { c.DemoInterval = 50 * time.Millisecond }})
	f := startFakeAgent(t)
	owner := st.NewAccount(t, s, "owner@example.com", "paid")
	_, token := launchable(t, s, f, owner, nil)
	c := newCookieClient(t, s.URL())
	const planted = launcher.VisitorCookie + "=planted-by-a-site-under-the-parent-domain"

	resp, _ := c.do("GET", "/launch/"+token, planted, nil)
	mine := st.SetCookie(resp, launcher.VisitorCookie)
	if resp.StatusCode != 200 || mine == nil || strings.Contains(planted, mine.Value) {
		t.Fatalf("a planted cookie was taken as the visitor's: %d, new cookie %v", resp.StatusCode, mine)
	}
	victim := planted + "; " + launcher.VisitorCookie + "=" + mine.Value // the planted one is sent first
	if login := c.launchDemo(token, victim); !strings.Contains(login, "sandbox_login=") {
		t.Fatalf("login %s", login)
	}
	if _, page := c.do("GET", "/launch/"+token, victim, nil); !strings.Contains(page, `id="returning"`) {
		t.Fatal("the victim's own signed cookie does not find their demo")
	}

	id, _, _ := strings.Cut(mine.Value, ".")
	_, mac, _ := strings.Cut(mine.Value, ".")
	forged := launcher.VisitorCookie + "=" + strings.Repeat("A", len(id)) + "." + mac
	for _, attacker := range []struct{ name, cookie string }{{"planted value", planted}, {"the victim's MAC on another value", forged},
		{"the victim's id unsigned", launcher.VisitorCookie + "=" + id}} {
		t.Run(attacker.name, func(t *testing.T) {
			resp, page := c.do("GET", "/launch/"+token, attacker.cookie, nil)
			if strings.Contains(page, `id="returning"`) || st.SetCookie(resp, launcher.VisitorCookie) == nil {
				t.Fatalf("the page treats %q as the victim (%d):\n%s", attacker.cookie, resp.StatusCode, page)
			}
			// The form with that cookie alone starts over at the page: it
			// is not handed the victim's demo.
			resp, _ = c.do("POST", "/launch/"+token, attacker.cookie, url.Values{})
			if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/launch/"+token {
				t.Fatalf("the form with %q: %d %s", attacker.cookie, resp.StatusCode, loc)
			}
		})
	}
}

// TestHostCookies: over https (the public URL's scheme; TLS ends at a
// proxy in front of the server) the visitor, consent session and
// sign-in cookies are __Host- prefixed, Secure, on Path=/ without a
// Domain, so no other host can set them; the same value under the plain
// name, which a site under a shared parent domain can set, is not read.
// Over http they keep their plain names and a __Host- one is not read.
func TestHostCookies(t *testing.T) {
	for _, scheme := range []string{"https", "http"} {
		t.Run(scheme, func(t *testing.T) {
			addr := st.FreeAddr(t)
			s := st.Single(t, st.Options{Configure: func(c *server.Config) {
				c.APIAddr, c.AdvertiseAPI = addr, scheme+"://"+addr
			}})
			base := "http://" + addr
			prefix, other := "__Host-", "__Host-"
			if scheme == "https" {
				other = ""
			} else {
				prefix = ""
			}
			op := st.NewClient(t, base, s.OperatorToken())
			u := op.Do("POST", "/api/admin/accounts", map[string]string{"email": "owner@example.com", "plan": "paid"}).Must(t, 201)
			tok := op.Do("POST", "/api/admin/tokens", map[string]string{"email": "owner@example.com"}).Must(t, 201).Str("secret")
			c := newCookieClient(t, base)
			check := func(what string, got *http.Cookie, path string) {
				t.Helper()
				if scheme == "https" {
					path = "/"
				}
				if got == nil || got.Secure != (scheme == "https") || got.Path != path || got.Domain != "" || !got.HttpOnly ||
					got.SameSite != http.SameSiteLaxMode {
					t.Fatalf("%s cookie: %+v", what, got)
				}
			}

			// The launcher's visitor cookie.
			f := startFakeAgent(t)
			owner := &st.Account{ID: u.Str("user.id"), Email: "owner@example.com", Token: tok, Personal: u.Str("user.personalWorkspaceId"),
				Client: st.NewClient(t, base, tok)}
			_, token := launchable(t, s, f, owner, nil)
			resp, _ := c.do("GET", "/launch/"+token, "", nil)
			v := st.SetCookie(resp, prefix+launcher.VisitorCookie)
			check("visitor", v, "/launch/")
			c.launchDemo(token, v.Name+"="+v.Value)
			if _, page := c.do("GET", "/launch/"+token, v.Name+"="+v.Value, nil); !strings.Contains(page, `id="returning"`) {
				t.Fatal("the visitor cookie does not find its demo")
			}
			if _, page := c.do("GET", "/launch/"+token, other+launcher.VisitorCookie+"="+v.Value, nil); strings.Contains(page, `id="returning"`) {
				t.Fatalf("the visitor cookie read under the name %q", other+launcher.VisitorCookie)
			}

			// The consent page's session, signed in with a personal token.
			clientID := st.NewClient(t, base, "").Do("POST", "/api/connect/register",
				map[string]any{"client_name": "Cookie test", "redirect_uris": []string{"http://127.0.0.1:9/cb"}}).Must(t, 201).Str("client_id")
			req := st.AuthorizeQuery(clientID, "http://127.0.0.1:9/cb")
			resp, _ = c.do("POST", "/connect/authorize", "", url.Values{"request": {req}, "action": {"token"}, "token": {tok}})
			sess := st.SetCookie(resp, prefix+"sbx_connect")
			check("session", sess, "/connect/")
			if _, page := c.do("GET", "/connect/authorize?"+req, sess.Name+"="+sess.Value, nil); !strings.Contains(page, `id="approve"`) {
				t.Fatal("the session cookie does not sign in")
			}
			if _, page := c.do("GET", "/connect/authorize?"+req, other+"sbx_connect="+sess.Value, nil); strings.Contains(page, `id="approve"`) {
				t.Fatalf("the session cookie read under the name %q", other+"sbx_connect")
			}

			// The sign-in cookie a mailed link is bound to.
			resp, _ = c.do("POST", "/connect/authorize", "", url.Values{"request": {req}, "action": {"email"}, "email": {"owner@example.com"}})
			check("sign-in", st.SetCookie(resp, prefix+"sbx_signin"), "/connect/")
		})
	}
}

// TestVisitorCookieSurvivesLeaderChange: every server signs and reads
// visitor cookies with the same key (derived from the cluster's sealing
// key), so a visitor whose cookie the old leader set is still known to
// the new one, asked through any server.
func TestVisitorCookieSurvivesLeaderChange(t *testing.T) {
	servers, _ := st.Cluster(t, 3, st.Options{Configure: func(c *server.Config) { c.DemoInterval = 50 * time.Millisecond }})
	leader := st.Leader(t, servers)
	f := startFakeAgent(t)
	owner := st.NewAccount(t, leader, "owner@example.com", "paid")
	_, token := launchable(t, leader, f, owner, nil)
	resp, _ := newCookieClient(t, leader.URL()).do("GET", "/launch/"+token, "", nil)
	v := st.SetCookie(resp, launcher.VisitorCookie)
	if v == nil {
		t.Fatal("no visitor cookie")
	}
	cookie := v.Name + "=" + v.Value
	newCookieClient(t, leader.URL()).launchDemo(token, cookie)

	leader.Kill()
	rest := followers(servers, leader)
	st.Leader(t, rest)
	for _, s := range rest {
		st.WaitFor(t, 20*time.Second, "the demo through "+s.URL(), func() bool {
			resp, page := newCookieClient(t, s.URL()).do("GET", "/launch/"+token, cookie, nil)
			return resp.StatusCode == 200 && strings.Contains(page, `id="returning"`) && st.SetCookie(resp, launcher.VisitorCookie) == nil
		})
	}
}
