package gitpush_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/gitpush"
)

var secret = []byte("s3cret-webhook-key")

func payload(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sign(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// headers builds a delivery's headers as each provider sends them, signed
// over body with key.
func headers(provider, event string, body, key []byte) http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	switch provider {
	case gitpush.GitHub:
		h.Set("X-GitHub-Event", event)
		h.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		h.Set("X-GitHub-Hook-ID", "480372914")
		h.Set("X-Hub-Signature-256", "sha256="+sign(key, body))
		h.Set("User-Agent", "GitHub-Hookshot/044aadd")
	case gitpush.GitLab:
		h.Set("X-Gitlab-Event", event)
		h.Set("X-Gitlab-Event-UUID", "13792a34-cac6-4fda-95a8-c58e00a3954e")
		h.Set("X-Gitlab-Instance", "https://gitlab.example.com")
		h.Set("X-Gitlab-Token", string(key))
		h.Set("User-Agent", "GitLab/17.0.0")
	case gitpush.Gitea:
		// Gitea sends GitHub's and Gogs' headers too.
		h.Set("X-Gitea-Event", event)
		h.Set("X-Gitea-Event-Type", event)
		h.Set("X-Gitea-Delivery", "f6266f16-1bf3-46a5-9ea4-602e06ead473")
		h.Set("X-Gitea-Signature", sign(key, body))
		h.Set("X-GitHub-Event", event)
		h.Set("X-GitHub-Delivery", "f6266f16-1bf3-46a5-9ea4-602e06ead473")
		h.Set("X-Gogs-Event", event)
		h.Set("X-Hub-Signature-256", "sha256="+sign(key, body))
	}
	return h
}

func TestParseDeliveries(t *testing.T) {
	for _, tc := range []struct {
		name, provider, event, file string
		want                        gitpush.Event
	}{
		{"github push", gitpush.GitHub, "push", "github-push.json", gitpush.Event{Kind: "push", Ref: "refs/heads/main", Branch: "main",
			After: "59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}},
		{"github ping", gitpush.GitHub, "ping", "github-ping.json", gitpush.Event{Kind: "ping", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}},
		{"github tag push: nothing to deploy", gitpush.GitHub, "push", "github-tag.json", gitpush.Event{Kind: "push", Ref: "refs/tags/v1.4.0",
			After: "59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}},
		{"github branch deleted", gitpush.GitHub, "push", "github-delete.json", gitpush.Event{Kind: "push", Ref: "refs/heads/feature/old",
			Branch: "feature/old", After: strings.Repeat("0", 40), Deleted: true, DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}},
		{"github other event", gitpush.GitHub, "issues", "github-ping.json", gitpush.Event{Kind: "issues", DeliveryID: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}},
		{"gitlab push", gitpush.GitLab, "Push Hook", "gitlab-push.json", gitpush.Event{Kind: "push", Ref: "refs/heads/release/2.x",
			Branch: "release/2.x", After: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", DeliveryID: "13792a34-cac6-4fda-95a8-c58e00a3954e"}},
		{"gitlab tag push", gitpush.GitLab, "Tag Push Hook", "gitlab-tag.json", gitpush.Event{Kind: "push", Ref: "refs/tags/v1.0.0",
			After: "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7", DeliveryID: "13792a34-cac6-4fda-95a8-c58e00a3954e"}},
		{"gitlab branch deleted", gitpush.GitLab, "Push Hook", "gitlab-delete.json", gitpush.Event{Kind: "push", Ref: "refs/heads/wip",
			Branch: "wip", After: strings.Repeat("0", 40), Deleted: true, DeliveryID: "13792a34-cac6-4fda-95a8-c58e00a3954e"}},
		{"gitlab other event", gitpush.GitLab, "Merge Request Hook", "gitlab-push.json", gitpush.Event{Kind: "merge_request",
			DeliveryID: "13792a34-cac6-4fda-95a8-c58e00a3954e"}},
		{"gitea push", gitpush.Gitea, "push", "gitea-push.json", gitpush.Event{Kind: "push", Ref: "refs/heads/develop", Branch: "develop",
			After: "bffeb74224043ba2feb48d137756c8a9331c449a", DeliveryID: "f6266f16-1bf3-46a5-9ea4-602e06ead473"}},
		{"gitea branch deleted (no deleted field)", gitpush.Gitea, "push", "gitea-delete.json", gitpush.Event{Kind: "push",
			Ref: "refs/heads/old-feature", Branch: "old-feature", After: strings.Repeat("0", 40), Deleted: true,
			DeliveryID: "f6266f16-1bf3-46a5-9ea4-602e06ead473"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := payload(t, tc.file)
			ev, err := gitpush.Parse(headers(tc.provider, tc.event, body, secret), body, secret)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Provider = tc.provider
			if *ev != tc.want {
				t.Fatalf("got  %+v\nwant %+v", *ev, tc.want)
			}
		})
	}
}

func TestParseRefusals(t *testing.T) {
	push := payload(t, "github-push.json")
	other := payload(t, "github-tag.json")
	gitea := payload(t, "gitea-push.json")
	for _, tc := range []struct {
		name   string
		h      http.Header
		body   []byte
		secret []byte
		want   error
	}{
		{"no event header", http.Header{"X-Hub-Signature-256": {"sha256=" + sign(secret, push)}}, push, secret, gitpush.ErrUnknownProvider},
		{"bitbucket", http.Header{"X-Event-Key": {"repo:push"}}, push, secret, gitpush.ErrUnknownProvider},
		{"github: no signature", without(headers(gitpush.GitHub, "push", push, secret), "X-Hub-Signature-256"), push, secret, gitpush.ErrSignature},
		{"github: signed with another key", headers(gitpush.GitHub, "push", push, []byte("other")), push, secret, gitpush.ErrSignature},
		{"github: signature over a different body", headers(gitpush.GitHub, "push", other, secret), push, secret, gitpush.ErrSignature},
		{"github: body with a byte more", headers(gitpush.GitHub, "push", push, secret), append(append([]byte{}, push...), ' '), secret, gitpush.ErrSignature},
		{"github: sha1 signature only", with(without(headers(gitpush.GitHub, "push", push, secret), "X-Hub-Signature-256"),
			"X-Hub-Signature", "sha1=0123456789abcdef0123456789abcdef01234567"), push, secret, gitpush.ErrSignature},
		{"github: signature without sha256=", with(headers(gitpush.GitHub, "push", push, secret), "X-Hub-Signature-256", sign(secret, push)),
			push, secret, gitpush.ErrSignature},
		{"github: signature not hex", with(headers(gitpush.GitHub, "push", push, secret), "X-Hub-Signature-256", "sha256=zz"), push, secret, gitpush.ErrSignature},
		{"github: empty secret", headers(gitpush.GitHub, "push", push, nil), push, nil, gitpush.ErrSignature},
		{"github: ping with empty secret", headers(gitpush.GitHub, "ping", push, nil), push, []byte{}, gitpush.ErrSignature},
		{"gitlab: no token", without(headers(gitpush.GitLab, "Push Hook", push, secret), "X-Gitlab-Token"), push, secret, gitpush.ErrSignature},
		{"gitlab: wrong token", headers(gitpush.GitLab, "Push Hook", push, []byte("s3cret-webhook-kez")), push, secret, gitpush.ErrSignature},
		{"gitlab: token a prefix of the secret", headers(gitpush.GitLab, "Push Hook", push, secret[:5]), push, secret, gitpush.ErrSignature},
		{"gitlab: empty token, empty secret", with(headers(gitpush.GitLab, "Push Hook", push, nil), "X-Gitlab-Token", ""), push, nil, gitpush.ErrSignature},
		{"gitea: no signature", without(headers(gitpush.Gitea, "push", gitea, secret), "X-Gitea-Signature", "X-Hub-Signature-256"), gitea, secret, gitpush.ErrSignature},
		{"gitea: wrong signature", headers(gitpush.Gitea, "push", gitea, []byte("other")), gitea, secret, gitpush.ErrSignature},
		{"gitea: good hub signature, bad gitea one", with(headers(gitpush.Gitea, "push", gitea, secret), "X-Gitea-Signature", sign([]byte("x"), gitea)),
			gitea, secret, gitpush.ErrSignature},
		{"gitea: good gitea signature, bad hub one", with(headers(gitpush.Gitea, "push", gitea, secret), "X-Hub-Signature-256", "sha256="+sign([]byte("x"), gitea)),
			gitea, secret, gitpush.ErrSignature},
		{"github: signed, not JSON", headers(gitpush.GitHub, "push", []byte("{not json"), secret), []byte("{not json"), secret, gitpush.ErrMalformed},
		{"github: signed, no ref", headers(gitpush.GitHub, "push", []byte(`{"after":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5"}`), secret),
			[]byte(`{"after":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5"}`), secret, gitpush.ErrMalformed},
		{"gitlab: signed, after not a sha", headers(gitpush.GitLab, "Push Hook", nil, secret), []byte(`{"ref":"refs/heads/main","after":"HEAD"}`),
			secret, gitpush.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := gitpush.Parse(tc.h, tc.body, tc.secret)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %+v, %v; want %v", ev, err, tc.want)
			}
			if len(tc.secret) > 0 && strings.Contains(err.Error(), string(tc.secret)) {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}

// TestParseVerifiesFirst: a body that is not even JSON is a signature
// error, not a parse error, when unsigned: nothing is parsed before.
func TestParseVerifiesFirst(t *testing.T) {
	body := []byte("\x00garbage")
	h := headers(gitpush.GitHub, "push", []byte("something else"), secret)
	if _, err := gitpush.Parse(h, body, secret); !errors.Is(err, gitpush.ErrSignature) {
		t.Fatal(err)
	}
}

// TestParseFormEncoded: GitHub and Gitea can send the payload as a form
// field; the signature covers the form body.
func TestParseFormEncoded(t *testing.T) {
	body := []byte(url.Values{"payload": {string(payload(t, "github-push.json"))}}.Encode())
	h := headers(gitpush.GitHub, "push", body, secret)
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	ev, err := gitpush.Parse(h, body, secret)
	if err != nil || ev.Branch != "main" || ev.After != "59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5" {
		t.Fatalf("%+v %v", ev, err)
	}
	h = headers(gitpush.GitHub, "push", []byte("a=b"), secret)
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	if _, err := gitpush.Parse(h, []byte("a=b"), secret); !errors.Is(err, gitpush.ErrMalformed) {
		t.Fatal(err)
	}
}

// TestParseSHA256Repository: repositories with SHA-256 object names push
// 64-digit commits.
func TestParseSHA256Repository(t *testing.T) {
	after := strings.Repeat("ab", 32)
	body := []byte(`{"ref":"refs/heads/main","before":"` + strings.Repeat("0", 64) + `","after":"` + strings.ToUpper(after) + `"}`)
	ev, err := gitpush.Parse(headers(gitpush.Gitea, "push", body, secret), body, secret)
	if err != nil || ev.After != after || ev.Deleted {
		t.Fatalf("%+v %v", ev, err)
	}
}

func without(h http.Header, names ...string) http.Header {
	for _, n := range names {
		h.Del(n)
	}
	return h
}

func with(h http.Header, name, value string) http.Header {
	h.Set(name, value)
	return h
}

// TestParseGiteaEitherSignature: older Gitea sends only X-Gitea-Signature,
// and a proxy may pass only X-Hub-Signature-256: either one suffices.
func TestParseGiteaEitherSignature(t *testing.T) {
	body := payload(t, "gitea-push.json")
	for _, drop := range []string{"X-Hub-Signature-256", "X-Gitea-Signature"} {
		h := without(headers(gitpush.Gitea, "push", body, secret), drop)
		ev, err := gitpush.Parse(h, body, secret)
		if err != nil || ev.Provider != gitpush.Gitea || ev.Branch != "develop" {
			t.Fatalf("without %s: %+v %v", drop, ev, err)
		}
	}
}
