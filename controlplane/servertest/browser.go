package servertest

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/oauth2"
)

// ConsentBrowser is a cookie-keeping client that does not follow
// redirects, so each step of the OAuth consent flow can be checked (by
// the oauth package's tests and the server's).
type ConsentBrowser struct {
	t    testing.TB
	base string
	c    *http.Client
}

// NewConsentBrowser is a browser with an empty cookie jar on base.
func NewConsentBrowser(t testing.TB, base string) *ConsentBrowser {
	jar, _ := cookiejar.New(nil)
	return &ConsentBrowser{t: t, base: base, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Do sends a request (form-encoded when form is set, with header pairs)
// and returns the response and its body, failing the test on a
// transport error.
func (b *ConsentBrowser) Do(method, path string, form url.Values, header ...string) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, b.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

// ConsentCSRF finds the consent page's csrf form value, which an approve
// or deny post must send back.
var ConsentCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// Approve signs in with a personal token and approves; it returns where
// the browser is sent.
func (b *ConsentBrowser) Approve(authURL, token string) *url.URL {
	b.t.Helper()
	u, _ := url.Parse(authURL)
	resp, page := b.Do("GET", u.Path+"?"+u.RawQuery, nil)
	if resp.StatusCode != 200 {
		b.t.Fatalf("consent page %d: %s", resp.StatusCode, page)
	}
	if strings.Contains(page, `id="signin-token"`) {
		resp, _ = b.Do("POST", "/connect/authorize", url.Values{"request": {u.RawQuery}, "action": {"token"}, "token": {token}})
		if resp.StatusCode != 303 {
			b.t.Fatalf("sign in: %d", resp.StatusCode)
		}
		resp, page = b.Do("GET", resp.Header.Get("Location"), nil)
	}
	m := ConsentCSRF.FindStringSubmatch(page)
	if resp.StatusCode != 200 || m == nil || !strings.Contains(page, `id="approve"`) {
		b.t.Fatalf("signed-in consent %d: %s", resp.StatusCode, page)
	}
	resp, _ = b.Do("POST", "/connect/authorize", url.Values{"request": {u.RawQuery}, "action": {"approve"}, "csrf": {html.UnescapeString(m[1])}})
	if resp.StatusCode != 303 {
		b.t.Fatalf("approve: %d", resp.StatusCode)
	}
	to, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		b.t.Fatal(err)
	}
	return to
}

// ApproveIn signs in with a personal token and approves on the consent
// page, choosing workspace (empty: leave the page's choice); it returns
// the page it approved on and where the browser is sent.
func (b *ConsentBrowser) ApproveIn(authURL, token, workspace string) (string, *url.URL) {
	b.t.Helper()
	u, _ := url.Parse(authURL)
	resp, page := b.Do("GET", u.Path+"?"+u.RawQuery, nil)
	if strings.Contains(page, `id="signin-token"`) {
		resp, _ = b.Do("POST", "/connect/authorize", url.Values{"request": {u.RawQuery}, "action": {"token"}, "token": {token}})
		resp, page = b.Do("GET", resp.Header.Get("Location"), nil)
	}
	m := ConsentCSRF.FindStringSubmatch(page)
	if resp.StatusCode != 200 || m == nil {
		b.t.Fatalf("signed-in consent %d: %s", resp.StatusCode, page)
	}
	form := url.Values{"request": {u.RawQuery}, "action": {"approve"}, "csrf": {html.UnescapeString(m[1])}}
	if workspace != "" {
		form.Set("workspace", workspace)
	}
	resp, _ = b.Do("POST", "/connect/authorize", form)
	to, _ := url.Parse(resp.Header.Get("Location"))
	return page, to
}

// ConnectorToken registers a connector, approves it in workspace (empty:
// the page's default) and exchanges the code; it returns a client with
// the token, the consent page and the client's id.
func ConnectorToken(t testing.TB, s interface{ URL() string }, token, workspace string) (*Client, string, string) {
	t.Helper()
	const redirect = "http://127.0.0.1:9/callback"
	anon := NewClient(t, s.URL(), "")
	id := anon.Do("POST", "/api/connect/register", map[string]any{"client_name": "Cloner", "redirect_uris": []string{redirect}}).Must(t, 201).Str("client_id")
	cfg := &oauth2.Config{ClientID: id, RedirectURL: redirect, Scopes: []string{"import:read", "import:write"},
		Endpoint: oauth2.Endpoint{AuthURL: s.URL() + "/connect/authorize", TokenURL: s.URL() + "/api/connect/token", AuthStyle: oauth2.AuthStyleInParams}}
	verifier := oauth2.GenerateVerifier()
	page, to := NewConsentBrowser(t, s.URL()).ApproveIn(cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(verifier)), token, workspace)
	tok, err := cfg.Exchange(context.Background(), to.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchange (redirected to %s): %v", to, err)
	}
	return NewClient(t, s.URL(), tok.AccessToken), page, id
}

// AuthorizeQuery is an authorization request's query for clientID.
func AuthorizeQuery(clientID, redirect string) string {
	return url.Values{"client_id": {clientID}, "redirect_uri": {redirect}, "response_type": {"code"}, "state": {"st"},
		"code_challenge_method": {"S256"}, "code_challenge": {strings.Repeat("c", 43)}}.Encode()
}

// SetCookie is the cookie named name that resp sets, or nil.
func SetCookie(resp *http.Response, name string) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Bearer is an http.RoundTripper that sends token as a bearer token, for
// clients (such as MCP's) that take an *http.Client rather than a token.
type Bearer struct{ Token string }

// RoundTrip sends r with the Authorization header set.
func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return http.DefaultTransport.RoundTrip(r)
}
