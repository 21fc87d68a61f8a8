package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
)

// hookReceiver is an HTTPS endpoint that keeps what it is sent; /down
// answers 500.
type hookReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	got  [][]byte
	sigs []string
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{}
	h.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.got, h.sigs = append(h.got, body), append(h.sigs, r.Header.Get("x-service-signature"))
		h.mu.Unlock()
		if r.URL.Path == "/down" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(h.Close)
	return h
}

// verify reports whether the last delivery is signed with secret.
func (h *hookReceiver) verify(secret string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.got) == 0 {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(h.got[len(h.got)-1])
	want := "sha256=" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	return hmac.Equal([]byte(want), []byte(h.sigs[len(h.sigs)-1]))
}

// lastSecret is the signing secret a set or rotate-secret printed.
func lastSecret(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// TestWebhook runs the webhook family against a real server delivering
// to a local HTTPS receiver: set prints the signing secret once, the test
// event arrives signed with it, rotate-secret prints a new one that signs
// the next, a failing receiver makes test exit 1, delete removes it; a
// free plan is refused with the API's code.
func TestWebhook(t *testing.T) {
	rcv := newHookReceiver(t)
	roots := x509.NewCertPool()
	roots.AddCert(rcv.Certificate())
	s := st.Single(t, st.Options{Configure: func(c *server.Config) {
		c.WebhookRoots = roots
		c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}})
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	free := st.NewAccount(t, s, "free@example.com", "free")
	wsctlEnv(t, s.URL(), alice.Token)

	if code, out, _ := ctl(t, "", "webhook", "get"); code != 0 || !strings.Contains(out, "no webhook set") {
		t.Fatalf("webhook get before set: %d %s", code, out)
	}
	if code, out, _ := ctl(t, "", "webhook", "get", "--json"); code != 0 || !strings.Contains(out, `"webhook": null`) {
		t.Fatalf("webhook get --json before set: %d %s", code, out)
	}
	code, out, errs := ctl(t, "", "webhook", "set", rcv.URL+"/hooks")
	secret := lastSecret(out)
	if code != 0 || !strings.HasPrefix(secret, "whsec_") || !strings.Contains(out, "shown this once") || !strings.Contains(out, "events") {
		t.Fatalf("webhook set: %d %s %s", code, out, errs)
	}
	wsctlNarrow(t, "webhook set", out)
	// Set again: the secret is not shown again; pausing keeps the URL.
	code, out, _ = ctl(t, "", "webhook", "set", rcv.URL+"/hooks", "--send-events=false")
	if code != 0 || strings.Contains(out, "whsec_") || !strings.Contains(out, "paused") {
		t.Fatalf("webhook set again: %d %s", code, out)
	}
	code, out, _ = ctl(t, "", "webhook", "set", rcv.URL+"/hooks", "--json")
	v := wsctlJSON(t, "webhook set --json", out)
	if _, has := v["signingSecret"]; code != 0 || has || v["webhook"].(map[string]any)["sendEvents"] != true {
		t.Fatalf("webhook set --json: %d %s", code, out)
	}

	code, out, errs = ctl(t, "", "webhook", "test")
	if code != 0 || !strings.Contains(out, "delivered (HTTP 200)") || !rcv.verify(secret) {
		t.Fatalf("webhook test: %d %s %s (signed with the printed secret: %v)", code, out, errs, rcv.verify(secret))
	}
	code, out, _ = ctl(t, "", "webhook", "get")
	if code != 0 || !strings.Contains(out, rcv.URL) || !strings.Contains(out, "demo.ready delivered (HTTP 200), attempt 1") {
		t.Fatalf("webhook get: %d %s", code, out)
	}
	wsctlNarrow(t, "webhook get", out)

	code, out, _ = ctl(t, "", "webhook", "rotate-secret")
	rotated := lastSecret(out)
	if code != 0 || !strings.HasPrefix(rotated, "whsec_") || rotated == secret {
		t.Fatalf("rotate-secret: %d %s", code, out)
	}
	if code, _, _ := ctl(t, "", "webhook", "test"); code != 0 || !rcv.verify(rotated) || rcv.verify(secret) {
		t.Fatalf("test after rotate: %d, signed with the new secret: %v", code, rcv.verify(rotated))
	}

	// A receiver that fails: the test event is not delivered, exit 1
	// (with --json, the API's delivery on stdout all the same).
	if code, _, _ := ctl(t, "", "webhook", "set", rcv.URL+"/down"); code != 0 {
		t.Fatalf("set a failing URL: %d", code)
	}
	code, out, errs = ctl(t, "", "webhook", "test", "--json")
	if d := wsctlJSON(t, "test --json", out)["delivery"].(map[string]any); code != 1 || d["status"] != "failed" || d["httpStatus"] != 500.0 ||
		!strings.Contains(errs, "not delivered (failed): HTTP 500") {
		t.Fatalf("test of a failing receiver: %d %s %s", code, out, errs)
	}

	code, out, _ = ctl(t, "", "webhook", "get")
	if code != 0 || !strings.Contains(out, "demo.ready failed (HTTP 500)") {
		t.Fatalf("webhook get after a failed test: %d %s", code, out)
	}
	wsctlNarrow(t, "webhook get after a failure", out)

	for _, tc := range []struct {
		name  string
		token string
		args  []string
		code  int
		want  string
	}{
		{"free plan", free.Token, []string{"webhook", "set", rcv.URL + "/hooks"}, 1, "template_sharing_requires_paid_plan"},
		{"plain http", "", []string{"webhook", "set", "http://hooks.example.com/x"}, 1, "invalid_request"},
		{"set without a URL", "", []string{"webhook", "set"}, 2, "accepts 1 arg"},
		{"test with an argument", "", []string{"webhook", "test", "now"}, 2, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.token != "" {
				t.Setenv("SANDBOX_TOKEN", tc.token)
			}
			code, out, errs := ctl(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("%v: exit %d (want %d), stderr %q (want %q), stdout %q", tc.args, code, tc.code, errs, tc.want, out)
			}
		})
	}

	if code, out, _ := ctl(t, "", "webhook", "delete"); code != 0 || out != "webhook removed\n" {
		t.Fatalf("webhook delete: %d %s", code, out)
	}
	if code, out, _ := ctl(t, "", "webhook", "get"); code != 0 || !strings.Contains(out, "no webhook set") {
		t.Fatalf("webhook get after delete: %d %s", code, out)
	}
	if code, _, errs := ctl(t, "", "webhook", "test"); code != 1 || !strings.Contains(errs, "invalid_request") {
		t.Fatalf("test with no webhook: %d %s", code, errs)
	}
}
