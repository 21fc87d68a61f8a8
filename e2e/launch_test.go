package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/hosttest"
)

// hookReceiver is a customer's webhook endpoint over HTTPS: it checks
// every delivery's signature with its own HMAC code, over the raw body,
// in constant time, before it parses anything.
type hookReceiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	got    []hookDelivery
}

type hookDelivery struct {
	event, delivery, key string
	verified             bool
	payload              map[string]any
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		r.mu.Lock()
		defer r.mu.Unlock()
		mac := hmac.New(sha256.New, []byte(r.secret))
		mac.Write(raw)
		want := "sha256=" + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
		d := hookDelivery{event: req.Header.Get("x-service-event"), delivery: req.Header.Get("x-service-delivery"),
			key: req.Header.Get("idempotency-key"), verified: hmac.Equal([]byte(want), []byte(req.Header.Get("x-service-signature")))}
		_ = json.Unmarshal(raw, &d.payload)
		r.got = append(r.got, d)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *hookReceiver) deliveries() []hookDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookDelivery(nil), r.got...)
}

// caFile writes the receiver's certificate as the CA bundle the dev
// system's deliveries trust (SSL_CERT_FILE, as an operator with a private
// CA does).
func (r *hookReceiver) caFile(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
	if err := os.WriteFile(path, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLaunchLinkInBrowser: a template published as a branded email-mode
// launch link with a warm pool. Headless Chromium opens the link (the
// hostile branding shows as text: no dialog, no injected element), fills
// email and consent, submits, and lands signed in on the landing path of
// a new site. The lead is listed; the same browser launching again goes
// back to the same demo. The workspace's HTTPS webhook receives
// demo.ready and, once the one-minute lease ends, demo.expired, both
// verified with the receiver's own HMAC code.
func TestLaunchLinkInBrowser(t *testing.T) {
	t.Parallel()
	hosttest.Root(t)
	rcv := newHookReceiver(t)
	dir := devDataDir(t)
	d := launchWithEnv(t, []string{"SSL_CERT_FILE=" + rcv.caFile(t)}, dir, freeAddr(t), freeAddr(t),
		append(sharedContainerd(t), "--fetch-allow", "127.0.0.1/32")...)

	// A template of a real site, with a warm pool of one.
	src := d.owner.Do("POST", "/api/app/sites", map[string]any{"name": "Launch Source"}).Must(t, 202)
	if job := d.waitJob(t, src.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("source: %v", job)
	}
	tpl := d.owner.Do("POST", "/api/app/templates", map[string]any{"siteId": src.Str("site.id"), "name": "Launch demo"}).Must(t, 202)
	tplID := tpl.Str("template.id")
	if job := d.waitJob(t, tpl.Str("jobId")); job["status"] != "succeeded" {
		t.Fatalf("template: %v", job)
	}
	const hostile = `<script>alert('x')</script>"><img src=x onerror=alert(1)>`
	patch := d.owner.Do("PATCH", "/api/app/templates/"+tplID, map[string]any{
		"launchEnabled": true, "launchEntryMode": "email", "launchQuotaMode": "visitor", "launchExpirationMode": "fixed",
		"launchExpirationMinutes": 1, "launchLandingPath": "/wp-admin/plugins.php", "launchConsentEnabled": true,
		"launchConsentLabel": "Email me " + hostile, "launchConsentDefaultChecked": false, "warmPoolSize": 1,
		"launchBranding": map[string]any{"headline": hostile, "eyebrow": hostile, "subhead": "Try " + hostile,
			"buttonLabel": "Start <b>now</b>", "brandName": "Acme", "accentColor": "#e11d48"},
	}).Must(t, 200)
	token := patch.Str("template.launchToken")
	secret := d.owner.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": rcv.srv.URL + "/hooks/sandboxd"}).Must(t, 200).Str("signingSecret")
	rcv.mu.Lock()
	rcv.secret = secret
	rcv.mu.Unlock()

	ctx, cancel := browser(t)
	defer cancel()
	var opened atomic.Int32
	dialogs := make(chan string, 16)
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			opened.Add(1)
			select {
			case dialogs <- e.Message:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	go func() { // a dialog would stall the page: dismiss it (the test fails on it below)
		for range dialogs {
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	launchURL := "http://" + d.api + "/launch/" + token
	if err := chromedp.Do(ctx, chromedp.Navigate(launchURL), chromedp.WaitVisible(chromedp.CSS("#email"))); err != nil {
		t.Fatalf("launch page: %v", err)
	}
	headline := mustRun(t, ctx, chromedp.Text(chromedp.CSS("#headline")))
	consentLabel := mustRun(t, ctx, chromedp.Text(chromedp.CSS("#consent-label")))
	injected := mustRun(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('img').length`))
	scripts := mustRun(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('script').length`))
	if headline != hostile || consentLabel != "Email me "+hostile || injected != 0 || scripts != 0 {
		t.Fatalf("branding not shown as text: headline %q, consent %q, %d img, %d script", headline, consentLabel, injected, scripts)
	}

	// Email and consent, then in: signed in on the landing path of a new
	// site (the warm pool's, once it has filled; a clone otherwise).
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#email"), "visitor@example.org"),
		chromedp.Click(chromedp.CSS("#consent")), chromedp.Click(chromedp.CSS("#submit"))); err != nil {
		t.Fatalf("submit: %v", err)
	}
	var loc string
	st.WaitFor(t, 2*time.Minute, "the visitor to land in wp-admin", func() bool {
		loc, _ = chromedp.Run(ctx, chromedp.Location())
		return strings.Contains(loc, "/wp-admin/plugins.php")
	})
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#wpadminbar"))); err != nil {
		t.Fatalf("landing page: %v", err)
	}
	text := mustRun(t, ctx, chromedp.Text(chromedp.CSS("body")))
	if !strings.Contains(text, "Plugins") || !strings.Contains(loc, ".localhost:") {
		t.Fatalf("landed at %s:\n%.300s", loc, text)
	}
	demoHost := strings.SplitN(strings.TrimPrefix(loc, "http://"), "/", 2)[0]

	leads := d.owner.Do("GET", "/api/app/templates/"+tplID+"/leads", nil).Must(t, 200).List("leads")
	if len(leads) != 1 || leads[0]["email"] != "visitor@example.org" || leads[0]["ipHash"] == "" || leads[0]["ipHash"] == "127.0.0.1" {
		t.Fatalf("leads: %v", leads)
	}
	siteID := leads[0]["siteId"].(string)
	site := d.owner.Do("GET", "/api/app/sites/"+siteID, nil).Must(t, 200)
	if !strings.Contains(site.Str("site.url"), demoHost) {
		t.Fatalf("lead's site %s is not where the visitor landed (%s)", site.Str("site.url"), demoHost)
	}

	// The same browser, launching again, goes back to the same demo.
	if err := chromedp.Do(ctx, chromedp.Navigate(launchURL), chromedp.WaitVisible(chromedp.CSS("#returning")),
		chromedp.SendKeys(chromedp.CSS("#email"), "visitor@example.org"), chromedp.Click(chromedp.CSS("#submit"))); err != nil {
		t.Fatalf("second launch: %v", err)
	}
	st.WaitFor(t, time.Minute, "the visitor back in their demo", func() bool {
		loc, _ = chromedp.Run(ctx, chromedp.Location())
		return strings.Contains(loc, "/wp-admin/plugins.php")
	})
	if !strings.Contains(loc, demoHost) {
		t.Fatalf("second launch went to %s, not %s", loc, demoHost)
	}
	if n := d.owner.Do("GET", "/api/app/templates/"+tplID, nil).Must(t, 200).Get("template.launchCount"); n != float64(1) {
		t.Fatalf("launchCount %v after a return", n)
	}
	if n := opened.Load(); n != 0 {
		t.Fatalf("%d dialogs opened", n)
	}

	// demo.ready, then demo.expired when the one-minute lease ends.
	st.WaitFor(t, 3*time.Minute, "demo.ready and demo.expired", func() bool { return len(rcv.deliveries()) >= 2 })
	got := rcv.deliveries()
	for i, want := range []struct{ event, status string }{{"demo.ready", "ready"}, {"demo.expired", "expired"}} {
		g := got[i]
		p := g.payload
		if !g.verified || g.event != want.event || p["type"] != want.event || p["status"] != want.status || p["siteId"] != siteID ||
			p["templateId"] != tplID || p["siteUrl"] != site.Str("site.url") || p["email"] != "visitor@example.org" ||
			p["consent"] != true || p["consentLabel"] != "Email me "+hostile || p["source"] != "template_launch" ||
			p["id"] != g.key || !strings.HasPrefix(g.key, "evt_") || g.delivery == "" {
			t.Fatalf("%s: %+v", want.event, g)
		}
	}
	if got[0].key == got[1].key {
		t.Fatalf("both events under one key %s", got[0].key)
	}
	st.WaitFor(t, time.Minute, "the expired demo's site to be deleted", func() bool {
		return d.owner.Do("GET", "/api/app/sites/"+siteID, nil).Status == 404
	})
}

// launchWithEnv is launchDev with extra environment for the process.
func launchWithEnv(t *testing.T, env []string, dir, api, edge string, flags ...string) *devSystem {
	t.Helper()
	p := start(t, env, append([]string{"dev", "--data-dir", dir, "--api-addr", api, "--edge-addr", edge, "--log-format", "json"}, flags...)...)
	url := p.waitLine(t, "SANDBOX_URL=")
	token := p.waitLine(t, "SANDBOX_TOKEN=")
	return &devSystem{dir: dir, api: api, edge: edge, proc: p, owner: st.NewClient(t, url, token)}
}

// mustRun runs one browser action that gives a value.
// staleNode reports an action on a node the page replaced meanwhile: it
// did nothing, and may be done again.
func staleNode(err error) bool {
	return strings.Contains(err.Error(), "No node with given id found") || strings.Contains(err.Error(), "Could not find node with given id")
}

func mustRun[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	// A page that is still settling (a script rewriting it, a late
	// redirect) can replace the node between the query and the read: the
	// read is tried again on the page as it is then.
	var v T
	var err error
	st.WaitFor(t, 20*time.Second, "a read of the page", func() bool {
		v, err = chromedp.Run(ctx, a)
		return err == nil || !staleNode(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}
