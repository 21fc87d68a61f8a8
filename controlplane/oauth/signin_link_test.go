package oauth_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// TestConsentSigninLinkBoundToBrowser: a mailed sign-in link signs in
// only the browser that asked for it. Opened in another browser (the
// one who typed someone else's address, or anyone who read the mail) it
// signs in nobody and says to open it where sign-in started; the
// browser that asked can still use it, once.
func TestConsentSigninLinkBoundToBrowser(t *testing.T) {
	s := st.Single(t, st.Options{})
	st.NewAccount(t, s, "alice@example.com", "paid")
	clientID := st.NewClient(t, s.URL(), "").Do("POST", "/api/connect/register",
		map[string]any{"client_name": "Bound link test", "redirect_uris": []string{"http://127.0.0.1:9/cb"}}).Must(t, 201).Str("client_id")
	req := st.AuthorizeQuery(clientID, "http://127.0.0.1:9/cb")
	asker, other := st.NewConsentBrowser(t, s.URL()), st.NewConsentBrowser(t, s.URL())

	if _, page := asker.Do("POST", "/connect/authorize", url.Values{"request": {req}, "action": {"email"}, "email": {"alice@example.com"}}); !strings.Contains(page, "on its way") {
		t.Fatalf("ask for a link: %s", page)
	}
	mails := st.NewClient(t, s.URL(), s.OperatorToken()).Do("GET", "/api/admin/outbox", nil).Must(t, 200).List("mails")
	link := regexp.MustCompile(`https?://\S+/connect/signin\?t=\S+`).FindString(mails[len(mails)-1]["text"].(string))
	lu, err := url.Parse(link)
	if link == "" || err != nil {
		t.Fatalf("no sign-in link in %v", mails[len(mails)-1])
	}
	path := lu.Path + "?" + lu.RawQuery

	for _, c := range []struct {
		name   string
		b      *st.ConsentBrowser
		status int
		text   string
	}{
		{"another browser", other, http.StatusForbidden, "only in the browser where you asked for it"},
		{"the same other browser again", other, http.StatusForbidden, "only in the browser where you asked for it"},
		{"the browser that asked", asker, http.StatusSeeOther, ""},
		{"the browser that asked, twice", asker, http.StatusBadRequest, "used or has expired"},
		{"another browser after use", other, http.StatusBadRequest, "used or has expired"},
	} {
		resp, page := c.b.Do("GET", path, nil)
		if resp.StatusCode != c.status || !strings.Contains(page, c.text) {
			t.Fatalf("%s: %d %s\n%s", c.name, resp.StatusCode, resp.Header.Get("Location"), page)
		}
		if c.b == other && st.SetCookie(resp, "sbx_connect") != nil {
			t.Fatalf("%s: signed in", c.name)
		}
	}
	if _, page := other.Do("GET", "/connect/authorize?"+req, nil); strings.Contains(page, `id="approve"`) {
		t.Fatal("the other browser is signed in")
	}
	if _, page := asker.Do("GET", "/connect/authorize?"+req, nil); !strings.Contains(page, `id="approve"`) {
		t.Fatal("the browser that asked is not signed in")
	}
}
