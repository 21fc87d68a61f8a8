package oauth_test

import (
	"context"
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/logincode"
)

// TestOAuthConnector: golang.org/x/oauth2 (not our code) as the client:
// register, authorize, exchange with the PKCE verifier, call the import
// routes. Refused per RFC 9700: a wrong verifier, a reused code (which
// also revokes the token it gave), an unregistered or non-local http
// redirect URI, scopes outside import:*, plain PKCE or none, a form
// posted from another site; denial goes back with access_denied.
func TestOAuthConnector(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	anon := st.NewClient(t, s.URL(), "")
	ctx := context.Background()
	const redirect = "http://127.0.0.1:9/callback?from=plugin"

	for _, bad := range []struct {
		body map[string]any
		code string
	}{
		{map[string]any{}, "invalid_redirect_uri"},
		{map[string]any{"redirect_uris": []string{"http://evil.example.com/cb"}}, "invalid_redirect_uri"},
		{map[string]any{"redirect_uris": []string{"https://ok.example.com/cb#frag"}}, "invalid_redirect_uri"},
		{map[string]any{"redirect_uris": []string{"/relative"}}, "invalid_redirect_uri"},
		{map[string]any{"redirect_uris": []string{"https://ok.example.com/cb"}, "token_endpoint_auth_method": "client_secret_basic"}, "invalid_client_metadata"},
		{map[string]any{"redirect_uris": []string{"https://ok.example.com/cb"}, "scope": "import:read sites:write"}, "invalid_client_metadata"},
		{map[string]any{"redirect_uris": []string{"https://ok.example.com/cb"}, "grant_types": []string{"refresh_token"}}, "invalid_client_metadata"},
	} {
		if r := anon.Do("POST", "/api/connect/register", bad.body).Must(t, 400); r.Code() != bad.code {
			t.Errorf("%v: %s", bad.body, r.Raw)
		}
	}
	reg := anon.Do("POST", "/api/connect/register", map[string]any{"client_name": "Test connector", "redirect_uris": []string{redirect, "https://live.example.com/cb"},
		"token_endpoint_auth_method": "none", "software_id": "sandboxd-connector", "client_uri": "https://live.example.com", "logo_uri": "ignored"}).Must(t, 201)
	clientID := reg.Str("client_id")
	if clientID == "" || reg.Get("client_secret") != nil || reg.Str("scope") != "import:read import:write" {
		t.Fatalf("register: %s", reg.Raw)
	}

	// The plugin a site owner installs is served ready to upload to wp-admin.
	if zr := anon.Do("GET", "/connect/sandboxd-connector.zip", nil).Must(t, 200); len(zr.Raw) < 1000 || zr.Header.Get("Content-Type") != "application/zip" {
		t.Fatalf("plugin zip: %d bytes, %s", len(zr.Raw), zr.Header.Get("Content-Type"))
	}
	cfg := &oauth2.Config{ClientID: clientID, RedirectURL: redirect, Scopes: []string{"import:read", "import:write"},
		Endpoint: oauth2.Endpoint{AuthURL: s.URL() + "/connect/authorize", TokenURL: s.URL() + "/api/connect/token", AuthStyle: oauth2.AuthStyleInParams}}
	b := st.NewConsentBrowser(t, s.URL())

	// The happy path.
	verifier := oauth2.GenerateVerifier()
	to := b.Approve(cfg.AuthCodeURL("st-1", oauth2.S256ChallengeOption(verifier)), alice.Token)
	code := to.Query().Get("code")
	if !strings.HasPrefix(to.String(), "http://127.0.0.1:9/callback?") || to.Query().Get("state") != "st-1" || to.Query().Get("from") != "plugin" || code == "" {
		t.Fatalf("redirect: %s", to)
	}
	tok, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	if tok.RefreshToken != "" || tok.Extra("scope") != "import:read import:write" || tok.Extra("account_email") != "alice@example.com" ||
		tok.Extra("site_url") != "https://live.example.com" || tok.Expiry.IsZero() {
		t.Fatalf("token: %+v %v", tok, tok.Extra("scope"))
	}
	conn := st.NewClient(t, s.URL(), tok.AccessToken)
	conn.Do("GET", "/api/account/me", nil).Must(t, 200)
	conn.Do("POST", "/api/app/imports", map[string]any{"sourceUrl": "https://live.example.com", "sizeBytes": 9}).Must(t, 201)
	conn.Do("GET", "/api/app/sites", nil).Must(t, 401)

	// The same code again: refused, and the token it gave stops working.
	if _, err := cfg.Exchange(ctx, code, oauth2.VerifierOption(verifier)); err == nil || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("reused code: %v", err)
	}
	conn.Do("GET", "/api/account/me", nil).Must(t, 401)

	// A wrong verifier is refused (and the code can still not be guessed into use).
	v2 := oauth2.GenerateVerifier()
	to = b.Approve(cfg.AuthCodeURL("st-2", oauth2.S256ChallengeOption(v2)), alice.Token)
	if _, err := cfg.Exchange(ctx, to.Query().Get("code"), oauth2.VerifierOption(oauth2.GenerateVerifier())); err == nil || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("wrong verifier: %v", err)
	}
	if _, err := cfg.Exchange(ctx, to.Query().Get("code")); err == nil {
		t.Fatal("no verifier accepted")
	}
	// Another registered redirect URI than the code's.
	v3 := oauth2.GenerateVerifier()
	to = b.Approve(cfg.AuthCodeURL("st-3", oauth2.S256ChallengeOption(v3)), alice.Token)
	other := *cfg
	other.RedirectURL = "https://live.example.com/cb"
	if _, err := other.Exchange(ctx, to.Query().Get("code"), oauth2.VerifierOption(v3)); err == nil {
		t.Fatal("redirect_uri mismatch accepted")
	}

	// Requests the page refuses without sending the browser anywhere.
	for _, q := range []string{
		"response_type=code&client_id=cli_nope&redirect_uri=" + url.QueryEscape(redirect),
		"response_type=code&client_id=" + clientID + "&redirect_uri=" + url.QueryEscape("http://127.0.0.1:9/other"),
		"response_type=code&client_id=" + clientID + "&redirect_uri=" + url.QueryEscape("http://127.0.0.1:9/callback"),
	} {
		if resp, page := b.Do("GET", "/connect/authorize?"+q, nil); resp.StatusCode != 400 || !strings.Contains(page, `id="error"`) {
			t.Errorf("%s: %d %s", q, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// Requests refused back at the client, state kept.
	base := "response_type=code&client_id=" + clientID + "&redirect_uri=" + url.QueryEscape(redirect) + "&state=s9"
	challenge := "&code_challenge=" + oauth2.S256ChallengeFromVerifier(v3) + "&code_challenge_method=S256"
	for q, want := range map[string]string{
		base + "&scope=import:read+sites:write" + challenge:                                  "invalid_scope",
		base + "&scope=import:read":                                                          "invalid_request",
		base + "&code_challenge=" + strings.Repeat("a", 43) + "&code_challenge_method=plain": "invalid_request",
		strings.Replace(base, "response_type=code", "response_type=token", 1) + challenge:    "unsupported_response_type",
	} {
		resp, _ := b.Do("GET", "/connect/authorize?"+q, nil)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != 303 || loc.Query().Get("error") != want || loc.Query().Get("state") != "s9" {
			t.Errorf("%s: %d %s", q, resp.StatusCode, loc)
		}
	}
	// Denying sends access_denied.
	resp, page := b.Do("GET", "/connect/authorize?"+base+challenge, nil)
	m := st.ConsentCSRF.FindStringSubmatch(page)
	if resp.StatusCode != 200 || m == nil {
		t.Fatalf("signed-in page: %d", resp.StatusCode)
	}
	resp, _ = b.Do("POST", "/connect/authorize", url.Values{"request": {base + challenge}, "action": {"deny"}, "csrf": {html.UnescapeString(m[1])}})
	if loc, _ := url.Parse(resp.Header.Get("Location")); resp.StatusCode != 303 || loc.Query().Get("error") != "access_denied" {
		t.Fatalf("deny: %d %s", resp.StatusCode, loc)
	}
	// A form from another site, or without the page's csrf value, approves nothing.
	resp, _ = b.Do("POST", "/connect/authorize", url.Values{"request": {base + challenge}, "action": {"approve"}, "csrf": {html.UnescapeString(m[1])}},
		"Sec-Fetch-Site", "cross-site")
	if resp.StatusCode != 403 {
		t.Fatalf("cross-site approve: %d", resp.StatusCode)
	}
	resp, page = b.Do("POST", "/connect/authorize", url.Values{"request": {base + challenge}, "action": {"approve"}, "csrf": {"forged"}})
	if resp.StatusCode != 200 || resp.Header.Get("Location") != "" || !strings.Contains(page, "expired") {
		t.Fatalf("forged csrf: %d", resp.StatusCode)
	}
	// A bad token does not sign in; a connector's own token does not either.
	fresh := st.NewConsentBrowser(t, s.URL())
	_, page = fresh.Do("POST", "/connect/authorize", url.Values{"request": {base + challenge}, "action": {"token"}, "token": {"sbx_" + strings.Repeat("A", 43)}})
	if !strings.Contains(page, "not a valid personal API token") {
		t.Fatalf("bad token: %s", page)
	}
	// Sign-in by a mailed one-time link.
	_, page = fresh.Do("POST", "/connect/authorize", url.Values{"request": {base + challenge}, "action": {"email"}, "email": {"alice@example.com"}})
	if !strings.Contains(page, "sign-in link is on its way") {
		t.Fatalf("email: %s", page)
	}
	op := st.NewClient(t, s.URL(), s.OperatorToken())
	mails := op.Do("GET", "/api/admin/outbox", nil).Must(t, 200).List("mails")
	link := regexp.MustCompile(`https?://\S+/connect/signin\?t=\S+`).FindString(mails[len(mails)-1]["text"].(string))
	if link == "" {
		t.Fatalf("no sign-in link in %v", mails[len(mails)-1])
	}
	lu, _ := url.Parse(link)
	resp, _ = fresh.Do("GET", lu.Path+"?"+lu.RawQuery, nil)
	if resp.StatusCode != 303 || !strings.HasPrefix(resp.Header.Get("Location"), "/connect/authorize?") {
		t.Fatalf("sign-in link: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, page = fresh.Do("GET", resp.Header.Get("Location"), nil); !strings.Contains(page, `id="approve"`) {
		t.Fatal("the mailed link did not sign in")
	}
	if resp, _ = fresh.Do("GET", lu.Path+"?"+lu.RawQuery, nil); resp.StatusCode != 400 {
		t.Fatalf("sign-in link used twice: %d", resp.StatusCode)
	}
	// The token endpoint's own refusals.
	for _, form := range []url.Values{
		{"grant_type": {"password"}, "username": {"a"}},
		{"grant_type": {"authorization_code"}, "code": {"nope"}, "client_id": {clientID}, "redirect_uri": {redirect}, "code_verifier": {v3}},
	} {
		r := anon.Do("POST", "/api/connect/token", form.Encode(), "Content-Type", "application/x-www-form-urlencoded").Must(t, 400)
		if c := r.Code(); c != "unsupported_grant_type" && c != "invalid_grant" {
			t.Errorf("%v: %s", form, r.Raw)
		}
	}
}

// TestCommandLineLogin: a native client (sandboxctl) registers the
// account scope with a loopback redirect only; the consent page says it
// acts as the account; the token it gets works as a personal token,
// is listed as the client's and can be revoked. Web redirect URIs, mixed
// scopes and a connector asking for more than it registered are refused.
func TestCommandLineLogin(t *testing.T) {
	s := st.Single(t, st.Options{})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	anon := st.NewClient(t, s.URL(), "")
	ctx := context.Background()
	const redirect = "http://127.0.0.1:43111/callback"

	for _, bad := range []struct {
		body map[string]any
		code string
	}{
		{map[string]any{"redirect_uris": []string{"https://cli.example.com/cb"}, "scope": "account"}, "invalid_redirect_uri"},
		{map[string]any{"redirect_uris": []string{"http://localhost:43111/cb"}, "scope": "account"}, "invalid_redirect_uri"},
		{map[string]any{"redirect_uris": []string{redirect, "https://cli.example.com/cb"}, "scope": "account"}, "invalid_redirect_uri"},
		{map[string]any{"redirect_uris": []string{redirect}, "scope": "account import:read"}, "invalid_client_metadata"},
	} {
		if r := anon.Do("POST", "/api/connect/register", bad.body).Must(t, 400); r.Code() != bad.code {
			t.Errorf("%v: %s", bad.body, r.Raw)
		}
	}
	reg := anon.Do("POST", "/api/connect/register", map[string]any{"client_name": "sandboxctl on laptop", "redirect_uris": []string{redirect},
		"scope": "account"}).Must(t, 201)
	if reg.Str("scope") != "account" {
		t.Fatalf("register: %s", reg.Raw)
	}
	cfg := &oauth2.Config{ClientID: reg.Str("client_id"), RedirectURL: redirect, Scopes: []string{"account"},
		Endpoint: oauth2.Endpoint{AuthURL: s.URL() + "/connect/authorize", TokenURL: s.URL() + "/api/connect/token", AuthStyle: oauth2.AuthStyleInParams}}
	b := st.NewConsentBrowser(t, s.URL())
	verifier := oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL("st-cli", oauth2.S256ChallengeOption(verifier))
	to := b.Approve(authURL, alice.Token)
	if u, _ := url.Parse(authURL); true {
		_, page := b.Do("GET", u.Path+"?"+u.RawQuery, nil)
		code := logincode.Of(oauth2.S256ChallengeFromVerifier(verifier))
		if !strings.Contains(page, "Act as you everywhere") || !strings.Contains(page, `id="account-warning"`) ||
			!strings.Contains(page, `id="login-code">`+code+"<") || strings.Contains(page, "cannot reach anything else") {
			t.Errorf("the consent page does not say what the account scope gives, or not the login code %s: %s", code, page)
		}
	}
	tok, err := cfg.Exchange(ctx, to.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchange: %v", err)
	}
	if tok.Extra("scope") != "account" || tok.Extra("account_email") != nil || time.Until(tok.Expiry) < 80*24*time.Hour {
		t.Fatalf("token: %+v", tok)
	}
	cli := st.NewClient(t, s.URL(), tok.AccessToken)
	cli.Do("GET", "/api/app/sites", nil).Must(t, 200)
	made := cli.Do("POST", "/api/account/tokens", map[string]any{"name": "from the cli"}).Must(t, 201)
	var listed map[string]any
	for _, tk := range cli.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens") {
		if tk["current"] == true {
			listed = tk
		}
	}
	if listed["kind"] != "oauth" || listed["scope"] != "account" || listed["clientName"] != "sandboxctl on laptop" {
		t.Fatalf("listed: %v", listed)
	}
	// A command-line login's token signs in on the consent page as a
	// personal token does (it is one, in all but its origin).
	v2 := oauth2.GenerateVerifier()
	if to := st.NewConsentBrowser(t, s.URL()).Approve(cfg.AuthCodeURL("st-again", oauth2.S256ChallengeOption(v2)), tok.AccessToken); to.Query().Get("code") == "" {
		t.Fatalf("sign in with the CLI's token: %s", to)
	}
	alice.Client.Do("DELETE", "/api/account/tokens/"+listed["id"].(string), nil).Must(t, 200)
	cli.Do("GET", "/api/app/sites", nil).Must(t, 401)
	st.NewClient(t, s.URL(), made.Str("secret")).Do("GET", "/api/app/sites", nil).Must(t, 200)

	// A connector cannot ask the consent page for the account scope.
	conn := anon.Do("POST", "/api/connect/register", map[string]any{"redirect_uris": []string{redirect}}).Must(t, 201)
	q := "response_type=code&client_id=" + conn.Str("client_id") + "&redirect_uri=" + url.QueryEscape(redirect) + "&state=s1&scope=account" +
		"&code_challenge=" + oauth2.S256ChallengeFromVerifier(verifier) + "&code_challenge_method=S256"
	resp, _ := b.Do("GET", "/connect/authorize?"+q, nil)
	if loc, _ := url.Parse(resp.Header.Get("Location")); resp.StatusCode != 303 || loc.Query().Get("error") != "invalid_scope" {
		t.Fatalf("connector asking for account: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}
