package oauth_test

import (
	"html"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/sandboxd/sandboxd/controlplane/oauth"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// TestConsentApprovalsAreBounded: every approval on the consent page is
// a Raft entry (an authorization code, kept until it expires), and the
// page is no API route, so the API's write limits do not cover it. A
// signed-in account posting Approve in a loop makes codes at most
// oauth.MaxApprovalsPerMinute a minute; past that the page asks it to
// wait, and makes nothing.
func TestConsentApprovalsAreBounded(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	const redirect = "http://127.0.0.1:9/callback"
	id := st.NewClient(t, s.URL(), "").Do("POST", "/api/connect/register",
		map[string]any{"client_name": "Cloner", "redirect_uris": []string{redirect}}).Must(t, 201).Str("client_id")
	cfg := &oauth2.Config{ClientID: id, RedirectURL: redirect, Scopes: []string{"import:read", "import:write"},
		Endpoint: oauth2.Endpoint{AuthURL: s.URL() + "/connect/authorize", TokenURL: s.URL() + "/api/connect/token"}}
	u, _ := url.Parse(cfg.AuthCodeURL("s", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())))
	b := st.NewConsentBrowser(t, s.URL())
	b.Approve(u.String(), alice.Token) // signs the browser in
	_, page := b.Do("GET", u.Path+"?"+u.RawQuery, nil)
	m := st.ConsentCSRF.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no consent form: %s", page)
	}
	form := url.Values{"request": {u.RawQuery}, "action": {"approve"}, "csrf": {html.UnescapeString(m[1])}}
	codes, refused := 1, 0
	for range 100 {
		resp, page := b.Do("POST", "/connect/authorize", form)
		switch {
		case resp.StatusCode == 303 && strings.Contains(resp.Header.Get("Location"), "code="):
			codes++
		case resp.StatusCode == 200 && strings.Contains(page, "Too many approvals"):
			refused++
		default:
			t.Fatalf("approval: %d %s", resp.StatusCode, page)
		}
	}
	if codes > oauth.MaxApprovalsPerMinute || refused == 0 {
		t.Fatalf("101 approvals in a row made %d authorization codes (%d refused); at most %d a minute", codes, refused, oauth.MaxApprovalsPerMinute)
	}
}
