package server_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/launcher"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ratelimit"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// fakeAgent is a node agent that makes every site at once and keeps the
// login links it is asked for: the launcher's path through the control
// plane, without containers (the e2e tests run the real agent).
type fakeAgent struct {
	agentv1connect.UnimplementedAgentServiceHandler
	mu       sync.Mutex
	logins   []string // redirect paths of login tokens
	created  atomic.Int32
	deleted  atomic.Int32
	url      string
	blockNew chan struct{} // when set, CreateSite waits for it
}

func (f *fakeAgent) CreateSite(ctx context.Context, req *connect.Request[agentv1.CreateSiteRequest]) (*connect.Response[agentv1.CreateSiteResponse], error) {
	if f.blockNew != nil {
		select {
		case <-f.blockNew:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.created.Add(1)
	return connect.NewResponse(&agentv1.CreateSiteResponse{WordpressVersion: "6.8.1",
		Status: &agentv1.SiteStatus{SiteId: req.Msg.SiteId, State: agentv1.SiteState_SITE_STATE_READY, Port: 8080, Address: "10.0.0.9"}}), nil
}

func (f *fakeAgent) DeleteSite(context.Context, *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.DeleteSiteResponse], error) {
	f.deleted.Add(1)
	return connect.NewResponse(&agentv1.DeleteSiteResponse{Existed: true}), nil
}

func (f *fakeAgent) CreateLoginToken(_ context.Context, req *connect.Request[agentv1.CreateLoginTokenRequest]) (*connect.Response[agentv1.CreateLoginTokenResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logins = append(f.logins, req.Msg.RedirectPath)
	return connect.NewResponse(&agentv1.CreateLoginTokenResponse{}), nil
}

func startFakeAgent(t *testing.T) *fakeAgent {
	t.Helper()
	f := &fakeAgent{}
	f.url = serveAgent(t, f)
	return f
}

// serveAgent serves an agent handler on loopback and returns its URL.
func serveAgent(t *testing.T, h agentv1connect.AgentServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(h))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, Protocols: rpcauth.Protocols()}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// launchable seeds what a launch link needs on the leader: the fake node,
// a ready template on it, and the link enabled through the API with the
// given launch settings. It returns the template's id and token.
func launchable(t *testing.T, leader *server.Server, f *fakeAgent, owner *st.Account, patch map[string]any) (string, string) {
	t.Helper()
	ctx := context.Background()
	n := state.Node{ID: "node-fake", Address: f.url, BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}, Status: state.NodeReady}
	if _, err := leader.Node().Apply(ctx, fsm.UpsertNode{Node: n}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	tpl := state.Template{ID: "tpl_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "")), WorkspaceID: owner.Personal, UserID: owner.ID,
		CreatedByUserID: owner.ID, Name: "Shop demo", Slug: "shop-demo-" + randSuffix(), Status: state.TemplateBuilding, PHPVersion: "8.2",
		WordPressVersion: "6.8.1", NodeID: "node-fake", Launch: state.Launch{QuotaMode: "visitor", EntryMode: "anonymous",
			ExpirationMode: "fixed", ExpirationMinutes: 60, LandingPath: "/wp-admin/"}, CreatedAt: now, UpdatedAt: now}
	job, err := jobs.New("test_noop", owner.Personal, "", nil, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Node().Apply(ctx, fsm.CreateTemplateWithJob{Template: tpl, Job: job, Quota: state.Quota{Plan: "paid", Resource: "templates", Limit: 100}}); err != nil {
		t.Fatal(err)
	}
	tpl.Status = state.TemplateReady
	if _, err := leader.Node().Apply(ctx, fsm.PutTemplate{Template: tpl}); err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"launchEnabled": true}
	for k, v := range patch {
		body[k] = v
	}
	r := owner.Do("PATCH", "/api/app/templates/"+tpl.ID, body).Must(t, 200)
	return tpl.ID, r.Str("template.launchToken")
}

var suffixes atomic.Int32

func randSuffix() string { return string(rune('a' + suffixes.Add(1)%26)) }

// visitorBrowser is a browser as the launcher sees it: a cookie jar, no
// redirect following (the test reads each hop).
type visitorBrowser struct {
	t      *testing.T
	base   string
	client *http.Client
	jar    map[string]string
}

func newVisitor(t *testing.T, base string) *visitorBrowser {
	return &visitorBrowser{t: t, base: base, jar: map[string]string{}, client: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 30 * time.Second}}
}

func (v *visitorBrowser) do(method, path string, form url.Values) (*http.Response, string) {
	v.t.Helper()
	return v.doWith(method, path, form)
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// doWith is do with extra request headers (name, value, …).
func (v *visitorBrowser) doWith(method, path string, form url.Values, header ...string) (*http.Response, string) {
	v.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, v.base+path, body)
	if err != nil {
		v.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	for k, val := range v.jar {
		req.AddCookie(&http.Cookie{Name: k, Value: val})
	}
	resp, err := v.client.Do(req)
	if err != nil {
		v.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, c := range resp.Cookies() {
		v.jar[c.Name] = c.Value
	}
	return resp, string(b)
}

// launch submits the form and follows the launcher until it hands the
// visitor to a site's one-time login link, which it returns.
func (v *visitorBrowser) launch(token string, form url.Values) string {
	v.t.Helper()
	resp, body := v.do("POST", "/launch/"+token, form)
	for i := 0; ; i++ {
		switch {
		case resp.StatusCode == http.StatusSeeOther && strings.Contains(resp.Header.Get("Location"), "sandbox_login="):
			return resp.Header.Get("Location")
		case resp.StatusCode == http.StatusSeeOther && strings.HasPrefix(resp.Header.Get("Location"), "/launch/"):
			resp, body = v.do("GET", resp.Header.Get("Location"), nil)
		case resp.StatusCode == http.StatusOK && strings.Contains(body, "Preparing your demo") && i < 200:
			time.Sleep(50 * time.Millisecond)
			resp, body = v.do("GET", resp.Request.URL.Path, nil)
		default:
			v.t.Fatalf("launch: %d %s\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
		}
	}
}

// receiver is a webhook endpoint over HTTPS that checks every delivery's
// signature with its own HMAC code and answers what fail says.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	got    []delivery
	fail   func(n int) int // status for the n-th request (1-based)
}

type delivery struct {
	event, deliveryID, key string
	verified               bool
	payload                map[string]any
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{fail: func(int) int { return 200 }}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		m := hmac.New(sha256.New, []byte(r.secret))
		m.Write(raw)
		want := "sha256=" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
		d := delivery{event: req.Header.Get("X-Service-Event"), deliveryID: req.Header.Get("X-Service-Delivery"),
			key: req.Header.Get("Idempotency-Key"), verified: hmac.Equal([]byte(want), []byte(req.Header.Get("X-Service-Signature")))}
		_ = json.Unmarshal(raw, &d.payload)
		r.got = append(r.got, d)
		code := r.fail(len(r.got))
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) setSecret(s string) { r.mu.Lock(); r.secret = s; r.mu.Unlock() }

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

func (r *receiver) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(r.srv.Certificate())
	return p
}

// webhookOptions configure servers that deliver to r quickly.
func webhookOptions(r *receiver, now func() time.Time, schedule ...time.Duration) st.Options {
	return st.Options{Configure: func(c *server.Config) {
		c.WebhookRoots = r.roots()
		c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		c.WebhookSchedule = schedule
		c.DemoInterval = 50 * time.Millisecond
		c.ExpireInterval = 100 * time.Millisecond
		if now != nil {
			c.Now = now
		}
	}}
}

// TestLaunchLink: a visitor opens a branded email-mode launch link, gives
// an email and consent, and is handed to their new demo's one-time login
// at the landing path; the lead is listed (with a keyed hash of the
// address, never the address); the same browser is sent back to the same
// demo, another browser from the same address is refused under the
// visitor quota; the workspace's webhook receives demo.ready, then
// demo.expired once the lease ends, signed and with the contract's
// fields.
func TestLaunchLink(t *testing.T) {
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	rcv := newReceiver(t)
	s := st.Single(t, webhookOptions(rcv, now, 50*time.Millisecond))
	f := startFakeAgent(t)
	owner := st.NewAccount(t, s, "owner@example.com", "paid")

	put := owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": rcv.srv.URL + "/hooks"}).Must(t, 200)
	secret := put.Str("signingSecret")
	if !strings.HasPrefix(secret, "whsec_") || put.Get("webhook.sendEvents") != true {
		t.Fatalf("PUT webhook: %s", put.Raw)
	}
	rcv.setSecret(secret)
	// A second PUT keeps the secret and does not show it.
	again := owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": rcv.srv.URL + "/hooks", "sendEvents": true}).Must(t, 200)
	if again.Get("signingSecret") != nil {
		t.Fatalf("the secret shown again: %s", again.Raw)
	}

	xss := `<script>alert(1)</script>"><img src=x onerror=alert(2)>`
	tplID, token := launchable(t, s, f, owner, map[string]any{"launchEntryMode": "email", "launchConsentEnabled": true,
		"launchConsentLabel": "Send me news " + xss, "launchLandingPath": "/wp-admin/plugins.php", "launchExpirationMinutes": 30,
		"launchBranding": map[string]any{"headline": xss, "eyebrow": "New", "brandName": "Acme", "accentColor": "#ff0066",
			"backgroundImageUrl": `https://cdn.example.com/bg.png?a=");}body{color:red`}})

	v := newVisitor(t, s.URL())
	resp, page := v.do("GET", "/launch/"+token, nil)
	if resp.StatusCode != 200 || v.jar[launcher.VisitorCookie] == "" {
		t.Fatalf("launch page: %d %v", resp.StatusCode, v.jar)
	}
	if c := resp.Cookies()[0]; !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/launch/" || c.Domain != "" {
		t.Fatalf("visitor cookie: %+v", c)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Fatalf("CSP %q lacks %q", csp, want)
		}
	}
	if resp.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Fatalf("Referrer-Policy %q", resp.Header.Get("Referrer-Policy"))
	}
	if strings.Contains(page, "<script>alert") || strings.Contains(page, "<img src=x") || !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Fatalf("branding not escaped:\n%s", page)
	}
	if strings.Contains(page, "<script>") || strings.Contains(page, " style=") || strings.Contains(page, "<style") {
		t.Fatalf("inline script or style on the page:\n%s", page)
	}
	_, theme := v.do("GET", "/launch/"+token+"/theme.css", nil)
	if !strings.Contains(theme, "--accent: #ff0066;") || strings.Contains(theme, `");}`) || strings.Contains(theme, "body{color") {
		t.Fatalf("theme:\n%s", theme)
	}

	// No email: the form comes back with a message, and nothing launched.
	if resp, body := v.do("POST", "/launch/"+token, url.Values{"email": {"not an email"}}); resp.StatusCode != 400 || !strings.Contains(body, "email address") {
		t.Fatalf("bad email: %d\n%s", resp.StatusCode, body)
	}
	// A form posted from another site, with the visitor's cookie, launches
	// nothing.
	if resp, _ := v.doWith("POST", "/launch/"+token, url.Values{"email": {"x@example.org"}}, "Sec-Fetch-Site", "same-site"); resp.StatusCode != 403 {
		t.Fatalf("cross-site form: %d", resp.StatusCode)
	}
	login := v.launch(token, url.Values{"email": {"visitor@example.org"}, "consent": {"yes"}})
	if !strings.Contains(login, ".localhost") {
		t.Fatalf("login link %s", login)
	}
	f.mu.Lock()
	landing := f.logins[len(f.logins)-1]
	f.mu.Unlock()
	if landing != "/wp-admin/plugins.php" {
		t.Fatalf("login lands on %q", landing)
	}

	leads := owner.Do("GET", "/api/app/templates/"+tplID+"/leads", nil).Must(t, 200).List("leads")
	if len(leads) != 1 {
		t.Fatalf("leads: %v", leads)
	}
	lead := leads[0]
	if lead["email"] != "visitor@example.org" || lead["ipHash"] == "" || strings.Contains(lead["ipHash"].(string), "127.0.0.1") ||
		!strings.HasPrefix(lead["id"].(string), "lead_") || lead["templateId"] != tplID {
		t.Fatalf("lead: %v", lead)
	}
	siteID := lead["siteId"].(string)
	site := owner.Do("GET", "/api/app/sites/"+siteID, nil).Must(t, 200)
	if site.Str("site.templateId") != tplID || site.Get("site.expiresAt") == nil {
		t.Fatalf("demo site: %s", site.Raw)
	}

	// The same browser goes back to the same demo; its count stays 1.
	again2 := v.launch(token, url.Values{"email": {"visitor@example.org"}, "consent": {"yes"}})
	if host(again2) != host(login) || again2 == login {
		t.Fatalf("returning visitor: %s then %s", login, again2)
	}
	if n := owner.Do("GET", "/api/app/templates/"+tplID, nil).Must(t, 200).Get("template.launchCount"); n != float64(1) {
		t.Fatalf("launchCount %v", n)
	}
	// Another browser from the same address: one demo per visitor, told
	// when it may launch.
	other := newVisitor(t, s.URL())
	other.do("GET", "/launch/"+token, nil)
	if resp, body := other.do("POST", "/launch/"+token, url.Values{"email": {"b@example.org"}}); resp.StatusCode != 429 ||
		!strings.Contains(body, "One demo at a time") || !strings.Contains(body, "try again after") {
		t.Fatalf("second visitor on the address: %d\n%s", resp.StatusCode, body)
	}
	// Someone else's demo page is a 404 to this browser.
	if resp, _ := other.do("GET", "/launch/"+token+"/demos/"+demoOf(t, s, siteID), nil); resp.StatusCode != 404 {
		t.Fatalf("another browser's demo: %d", resp.StatusCode)
	}

	st.WaitFor(t, 10*time.Second, "demo.ready", func() bool { return len(rcv.deliveries()) >= 1 })
	ready := rcv.deliveries()[0]
	checkEvent(t, ready, "demo.ready", "ready", owner.Personal, tplID, siteID)
	if ready.payload["email"] != "visitor@example.org" || ready.payload["consent"] != true ||
		ready.payload["consentLabel"] != "Send me news "+xss || ready.payload["siteUrl"] != site.Str("site.url") {
		t.Fatalf("demo.ready payload: %v", ready.payload)
	}

	// The lease ends: demo.expired, then the site goes.
	offset.Store(int64(31 * time.Minute))
	st.WaitFor(t, 10*time.Second, "demo.expired", func() bool { return len(rcv.deliveries()) >= 2 })
	expired := rcv.deliveries()[1]
	checkEvent(t, expired, "demo.expired", "expired", owner.Personal, tplID, siteID)
	// It happened when the lease ended, not when it was noticed.
	if at, _ := time.Parse(time.RFC3339, expired.payload["occurredAt"].(string)); !at.Equal(mustTime(t, site.Str("site.expiresAt"))) {
		t.Fatalf("demo.expired occurredAt %v, lease ended %s", expired.payload["occurredAt"], site.Str("site.expiresAt"))
	}
	if expired.key == ready.key || expired.deliveryID == ready.deliveryID {
		t.Fatalf("two events share a key: %+v %+v", ready, expired)
	}
	hook := owner.Do("GET", "/api/account/webhooks/demo-launches", nil).Must(t, 200)
	if hook.Str("webhook.lastDelivery.status") != "delivered" || hook.Get("webhook.lastDelivery.httpStatus") != float64(200) {
		t.Fatalf("lastDelivery: %s", hook.Raw)
	}
	st.WaitFor(t, 10*time.Second, "the expired demo's site to go", func() bool { return f.deleted.Load() >= 1 })

	// An owner who leaves the paid plan takes the link down until they
	// are back.
	op := st.NewClient(t, s.URL(), s.OperatorToken())
	op.Do("PUT", "/api/admin/accounts/"+owner.Email+"/plan", map[string]string{"plan": "free"}).Must(t, 200)
	if resp, _ := v.do("GET", "/launch/"+token, nil); resp.StatusCode != 404 {
		t.Fatalf("link of a free owner: %d", resp.StatusCode)
	}
	op.Do("PUT", "/api/admin/accounts/"+owner.Email+"/plan", map[string]string{"plan": "paid"}).Must(t, 200)
	if resp, _ := v.do("GET", "/launch/"+token, nil); resp.StatusCode != 200 {
		t.Fatalf("link of a paid owner again: %d", resp.StatusCode)
	}

	// Unknown and disabled links are a plain 404 page.
	if resp, body := v.do("GET", "/launch/nosuchtoken", nil); resp.StatusCode != 404 || !strings.Contains(body, "does not exist") {
		t.Fatalf("unknown token: %d %s", resp.StatusCode, body)
	}
	owner.Do("PATCH", "/api/app/templates/"+tplID, map[string]any{"launchEnabled": false}).Must(t, 200)
	if resp, _ := v.do("GET", "/launch/"+token, nil); resp.StatusCode != 404 {
		t.Fatalf("disabled link: %d", resp.StatusCode)
	}
	if resp, _ := v.do("POST", "/launch/"+token, url.Values{"email": {"c@example.org"}}); resp.StatusCode != 404 {
		t.Fatalf("disabled link POST: %d", resp.StatusCode)
	}
	// Enabled again, the token is the same.
	if tok := owner.Do("PATCH", "/api/app/templates/"+tplID, map[string]any{"launchEnabled": true}).Must(t, 200).Str("template.launchToken"); tok != token {
		t.Fatalf("token changed: %s -> %s", token, tok)
	}
}

func host(raw string) string {
	u, _ := url.Parse(raw)
	return u.Host
}

func demoOf(t *testing.T, s *server.Server, siteID string) string {
	t.Helper()
	ds, _ := s.Node().Store().Demos()
	for _, d := range ds {
		if d.SiteID == siteID {
			return d.ID
		}
	}
	t.Fatalf("no demo of %s", siteID)
	return ""
}

func checkEvent(t *testing.T, d delivery, event, status, ws, tpl, site string) {
	t.Helper()
	p := d.payload
	if !d.verified || d.event != event || p["type"] != event || p["status"] != status || p["workspaceId"] != ws ||
		p["templateId"] != tpl || p["siteId"] != site || p["source"] != "template_launch" || !strings.HasPrefix(d.key, "evt_") ||
		p["id"] != d.key || !strings.HasPrefix(d.deliveryID, "dlv_") {
		t.Fatalf("%s: %+v", event, d)
	}
	if _, err := time.Parse(time.RFC3339, p["occurredAt"].(string)); err != nil {
		t.Fatalf("occurredAt: %v", p["occurredAt"])
	}
}

// TestWebhookRetries: a receiver that fails 7 times then answers 2xx sees
// 8 attempts of one event under one idempotency key and one delivery id;
// one that always fails sees exactly 8 and the delivery is failed for
// good; with sendEvents false nothing is sent and the URL is kept; a
// rotated secret signs what follows; the test event arrives signed; a
// free plan gets 402.
func TestWebhookRetries(t *testing.T) {
	rcv := newReceiver(t)
	ms := 20 * time.Millisecond
	s := st.Single(t, webhookOptions(rcv, nil, ms, ms, ms, ms, ms, ms, ms))
	f := startFakeAgent(t)
	owner := st.NewAccount(t, s, "owner@example.com", "paid")
	secret := owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": rcv.srv.URL}).Must(t, 200).Str("signingSecret")
	rcv.setSecret(secret)
	_, token := launchable(t, s, f, owner, map[string]any{"launchQuotaMode": "unlimited"})
	v := newVisitor(t, s.URL())
	v.do("GET", "/launch/"+token, nil)

	t.Run("fails 7 times then succeeds", func(t *testing.T) {
		rcv.mu.Lock()
		rcv.got, rcv.fail = nil, func(n int) int {
			if n <= 7 {
				return 503
			}
			return 204
		}
		rcv.mu.Unlock()
		v.launch(token, nil)
		st.WaitFor(t, 20*time.Second, "8 attempts", func() bool {
			h := owner.Do("GET", "/api/account/webhooks/demo-launches", nil).Must(t, 200)
			return h.Str("webhook.lastDelivery.status") == "delivered"
		})
		got := rcv.deliveries()
		if len(got) != 8 {
			t.Fatalf("%d attempts", len(got))
		}
		for _, d := range got {
			if !d.verified || d.key != got[0].key || d.deliveryID != got[0].deliveryID || d.event != "demo.ready" {
				t.Fatalf("attempt: %+v (first %+v)", d, got[0])
			}
		}
		h := owner.Do("GET", "/api/account/webhooks/demo-launches", nil).Must(t, 200)
		if h.Get("webhook.lastDelivery.attempt") != float64(8) || h.Get("webhook.lastDelivery.httpStatus") != float64(204) {
			t.Fatalf("lastDelivery: %s", h.Raw)
		}
	})

	t.Run("always fails", func(t *testing.T) {
		rcv.mu.Lock()
		rcv.got, rcv.fail = nil, func(int) int { return 500 }
		rcv.mu.Unlock()
		v.launch(token, nil)
		st.WaitFor(t, 20*time.Second, "the delivery to fail for good", func() bool {
			h := owner.Do("GET", "/api/account/webhooks/demo-launches", nil).Must(t, 200)
			return h.Str("webhook.lastDelivery.status") == "failed"
		})
		time.Sleep(300 * time.Millisecond) // a ninth attempt would come in this time
		if got := rcv.deliveries(); len(got) != 8 {
			t.Fatalf("%d attempts", len(got))
		}
		h := owner.Do("GET", "/api/account/webhooks/demo-launches", nil).Must(t, 200)
		if h.Get("webhook.lastDelivery.attempt") != float64(8) || h.Get("webhook.lastDelivery.httpStatus") != float64(500) ||
			!strings.Contains(h.Str("webhook.lastDelivery.error"), "500") {
			t.Fatalf("lastDelivery: %s", h.Raw)
		}
	})

	t.Run("sendEvents false", func(t *testing.T) {
		rcv.mu.Lock()
		rcv.got, rcv.fail = nil, func(int) int { return 200 }
		rcv.mu.Unlock()
		h := owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": rcv.srv.URL, "sendEvents": false}).Must(t, 200)
		if h.Str("webhook.url") != rcv.srv.URL || h.Get("webhook.sendEvents") != false {
			t.Fatalf("paused: %s", h.Raw)
		}
		v.launch(token, nil)
		st.WaitFor(t, 10*time.Second, "the demo to be ready", func() bool { return readyDemos(s) >= 3 })
		time.Sleep(300 * time.Millisecond)
		if got := rcv.deliveries(); len(got) != 0 {
			t.Fatalf("paused webhook sent %d", len(got))
		}
		if g := owner.Do("GET", "/api/account/webhooks/demo-launches", nil).Must(t, 200); g.Str("webhook.url") != rcv.srv.URL {
			t.Fatalf("URL not kept: %s", g.Raw)
		}
		owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": rcv.srv.URL, "sendEvents": true}).Must(t, 200)
	})

	t.Run("rotate secret", func(t *testing.T) {
		rot := owner.Do("POST", "/api/account/webhooks/demo-launches/rotate-secret", nil).Must(t, 200)
		next := rot.Str("signingSecret")
		if next == "" || next == secret {
			t.Fatalf("rotate: %s", rot.Raw)
		}
		rcv.mu.Lock()
		rcv.got = nil // the receiver still checks with the old secret
		rcv.mu.Unlock()
		v.launch(token, nil)
		st.WaitFor(t, 10*time.Second, "a delivery", func() bool { return len(rcv.deliveries()) >= 1 })
		if d := rcv.deliveries()[0]; d.verified {
			t.Fatalf("signed with the old secret after a rotation: %+v", d)
		}
		rcv.setSecret(next)
		rcv.mu.Lock()
		rcv.got = nil // now with the new one
		rcv.mu.Unlock()
		v.launch(token, nil)
		st.WaitFor(t, 10*time.Second, "a delivery", func() bool { return len(rcv.deliveries()) >= 1 })
		if d := rcv.deliveries()[0]; !d.verified {
			t.Fatalf("not signed with the new secret: %+v", d)
		}
		if h := owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": rcv.srv.URL}).Must(t, 200); h.Get("signingSecret") != nil {
			t.Fatalf("a PUT after a rotation showed a secret: %s", h.Raw)
		}
		test := owner.Do("POST", "/api/account/webhooks/demo-launches/test", nil).Must(t, 200)
		if test.Str("delivery.status") != "delivered" || test.Get("delivery.attempt") != float64(1) {
			t.Fatalf("test: %s", test.Raw)
		}
		got := rcv.deliveries()
		last := got[len(got)-1]
		if !last.verified || last.payload["source"] != "test" || last.event != "demo.ready" || last.payload["workspaceId"] != owner.Personal {
			t.Fatalf("test event: %+v", last)
		}
	})

	t.Run("plans, delete", func(t *testing.T) {
		free := st.NewAccount(t, s, "free@example.com", "free")
		for _, c := range []struct{ method, path string }{{"PUT", ""}, {"POST", "/test"}, {"POST", "/rotate-secret"}} {
			var body any
			if c.method == "PUT" {
				body = map[string]any{"url": "https://hooks.example.com/x"}
			}
			if r := free.Do(c.method, "/api/account/webhooks/demo-launches"+c.path, body); r.Status != 402 || r.Code() != "template_sharing_requires_paid_plan" {
				t.Fatalf("free %s %s: %d %s", c.method, c.path, r.Status, r.Raw)
			}
		}
		for _, bad := range []string{"http://hooks.example.com/x", "ftp://x", "https://user:pw@hooks.example.com/", "https://10.0.0.1/x", "https://x/#frag", ""} {
			if r := owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": bad}); r.Status != 400 || r.Details()["field"] != "url" {
				t.Fatalf("url %q: %d %s", bad, r.Status, r.Raw)
			}
		}
		// Allow-listed (127.0.0.0/8 here): plain http is accepted.
		owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": "http://127.0.0.1:9/x"}).Must(t, 200)
		owner.Do("DELETE", "/api/account/webhooks/demo-launches", nil).Must(t, 200)
		if g := owner.Do("GET", "/api/account/webhooks/demo-launches", nil).Must(t, 200); g.Get("webhook") != nil {
			t.Fatalf("after delete: %s", g.Raw)
		}
		if ds, _ := s.Node().Store().PendingDeliveries(); len(ds) != 0 {
			t.Fatalf("deliveries left: %d", len(ds))
		}
		put := owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": rcv.srv.URL}).Must(t, 200)
		if put.Str("signingSecret") == "" || put.Get("webhook.lastDelivery") != nil {
			t.Fatalf("set again after delete: %s", put.Raw)
		}
	})
}

func readyDemos(s *server.Server) int {
	ds, _ := s.Node().Store().Demos()
	n := 0
	for _, d := range ds {
		if d.ReadyAt != nil {
			n++
		}
	}
	return n
}

// TestWebhookDeliverySurvivesLeaderChange: the leader is killed while a
// delivery waits for its retry; once the cluster has a new leader the
// event arrives under its original idempotency key and delivery id.
func TestWebhookDeliverySurvivesLeaderChange(t *testing.T) {
	rcv := newReceiver(t)
	var failing atomic.Bool
	failing.Store(true)
	rcv.fail = func(int) int {
		if failing.Load() {
			return 503
		}
		return 200
	}
	servers, _ := st.Cluster(t, 3, webhookOptions(rcv, nil, 20*time.Millisecond, 3*time.Second, 3*time.Second))
	leader := st.Leader(t, servers)
	f := startFakeAgent(t)
	owner := st.NewAccount(t, leader, "owner@example.com", "paid")
	rcv.setSecret(owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": rcv.srv.URL}).Must(t, 200).Str("signingSecret"))
	_, token := launchable(t, leader, f, owner, nil)
	v := newVisitor(t, leader.URL())
	v.do("GET", "/launch/"+token, nil)
	v.launch(token, nil)
	st.WaitFor(t, 10*time.Second, "two failed attempts", func() bool { return len(rcv.deliveries()) >= 2 })
	first := rcv.deliveries()[0]

	leader.Kill()
	failing.Store(false)
	next := st.Leader(t, followers(servers, leader))
	st.WaitFor(t, 20*time.Second, "the event after the leader change", func() bool {
		got := rcv.deliveries()
		return len(got) >= 3 && got[len(got)-1].verified
	})
	got := rcv.deliveries()
	for _, d := range got {
		if d.key != first.key || d.deliveryID != first.deliveryID || d.event != "demo.ready" {
			t.Fatalf("a second key or delivery: %+v vs %+v", d, first)
		}
	}
	st.WaitFor(t, 10*time.Second, "the attempt recorded delivered", func() bool {
		d, _ := next.Node().Store().Delivery(first.deliveryID)
		return d != nil && d.Status == state.DeliveryDelivered
	})
	// Nothing else is queued: the new leader did not make the event again.
	time.Sleep(300 * time.Millisecond)
	if n := len(rcv.deliveries()); n != len(got) {
		t.Fatalf("more deliveries after success: %d then %d", len(got), n)
	}
}

// TestLaunchRateLimits: launches beyond the per-address limit get a 429
// page with Retry-After, and launch nothing.
func TestLaunchRateLimits(t *testing.T) {
	s := st.Single(t, st.Options{Configure: func(c *server.Config) {
		c.LaunchLimits = launcher.Limits{PerIP: ratelimit.Rule{Rate: 0.01, Burst: 2}}
	}})
	f := startFakeAgent(t)
	owner := st.NewAccount(t, s, "owner@example.com", "paid")
	_, token := launchable(t, s, f, owner, map[string]any{"launchQuotaMode": "unlimited"})
	v := newVisitor(t, s.URL())
	v.do("GET", "/launch/"+token, nil)
	v.launch(token, nil)
	v.launch(token, nil)
	resp, body := v.do("POST", "/launch/"+token, url.Values{})
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "Too many launches") {
		t.Fatalf("third launch: %d %q\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if n := f.created.Load(); n != 2 {
		t.Fatalf("%d demos made", n)
	}
	// A form posted without the visitor cookie (another site's form, or a
	// script that did not load the page) goes to the page first.
	bare := newVisitor(t, s.URL())
	if resp, _ := bare.do("POST", "/launch/"+token, url.Values{}); resp.StatusCode != 303 || resp.Header.Get("Location") != "/launch/"+token {
		t.Fatalf("no cookie: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}
