// Package gitpush verifies and reads the push webhooks GitHub, GitLab and
// Gitea (and Forgejo, which sends Gitea's headers) deliver when a
// repository connected to a site changes. It does no I/O: the caller
// reads the body (at most MaxBodyBytes) and hands it over with the
// headers and the repository's webhook secret.
//
// Nothing of the body is looked at before its signature (or GitLab's
// token) checks out, and every comparison of a secret is in constant
// time.
package gitpush

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// MaxBodyBytes is the body size Parse is meant for: the caller cuts the
// request there (http.MaxBytesReader) before Parse. Push payloads list at
// most 20 commits (GitHub, GitLab) and stay well under it.
const MaxBodyBytes = 1 << 20

// Errors Parse returns, to be told apart with errors.Is and answered at
// the HTTP boundary (ErrSignature: 401; the others: 400).
var (
	// ErrSignature means the delivery is not proven to come from the
	// repository's webhook: no signature or token, a wrong one, or no
	// secret to check it with.
	ErrSignature = errors.New("gitpush: webhook signature missing or wrong")
	// ErrUnknownProvider means no GitHub, GitLab or Gitea event header:
	// not a delivery this package reads.
	ErrUnknownProvider = errors.New("gitpush: not a GitHub, GitLab or Gitea webhook")
	// ErrMalformed means a verified delivery whose body is not the
	// provider's JSON (or lacks the fields a push needs).
	ErrMalformed = errors.New("gitpush: malformed webhook payload")
)

// Providers, as Event.Provider names them.
const (
	GitHub = "github"
	GitLab = "gitlab"
	Gitea  = "gitea"
)

// Event kinds with a meaning here; other events keep their provider's
// name (GitHub's and Gitea's as sent, GitLab's lower-cased without
// " Hook", spaces as underscores: "merge_request").
const (
	KindPush = "push" // a ref moved: a branch or tag pushed or deleted
	KindPing = "ping" // GitHub's check when a webhook is added
)

// Event is what a verified delivery says.
type Event struct {
	// Provider is GitHub, GitLab or Gitea.
	Provider string
	// Kind is KindPush, KindPing or the provider's other event name.
	Kind string
	// Ref is the full ref a push moved ("refs/heads/main",
	// "refs/tags/v1"); empty for other kinds.
	Ref string
	// Branch is the branch a push moved (Ref without "refs/heads/");
	// empty for tags, other refs and other kinds: nothing to deploy.
	Branch string
	// After is the commit the ref points at after the push (hex, 40 or
	// 64 digits); all zeros when the ref was deleted.
	After string
	// DeliveryID is the provider's id of this delivery, the same on a
	// redelivery: a key to deploy each push once.
	DeliveryID string
	// Deleted is true when the push deleted the ref.
	Deleted bool
}

// Parse verifies a delivery against the repository's webhook secret and
// reads it. The provider is told by its event header (X-Gitea-Event
// first: Gitea also sends X-GitHub-Event). GitHub must sign with
// X-Hub-Signature-256; Gitea with X-Gitea-Signature or
// X-Hub-Signature-256 (each one present must match); GitLab sends the
// secret itself as X-Gitlab-Token. An empty secret verifies nothing.
// Errors wrap ErrUnknownProvider, ErrSignature or ErrMalformed; their
// text never holds the secret or the signature.
func Parse(h http.Header, body []byte, secret []byte) (*Event, error) {
	ev := &Event{}
	var name string
	switch {
	case h.Get("X-Gitea-Event") != "":
		ev.Provider, name, ev.DeliveryID = Gitea, h.Get("X-Gitea-Event"), h.Get("X-Gitea-Delivery")
	case h.Get("X-Gitlab-Event") != "":
		ev.Provider, name, ev.DeliveryID = GitLab, h.Get("X-Gitlab-Event"), h.Get("X-Gitlab-Event-UUID")
	case h.Get("X-GitHub-Event") != "":
		ev.Provider, name, ev.DeliveryID = GitHub, h.Get("X-GitHub-Event"), h.Get("X-GitHub-Delivery")
	default:
		return nil, ErrUnknownProvider
	}
	if len(secret) == 0 {
		return nil, fmt.Errorf("%w: the repository has no webhook secret", ErrSignature)
	}
	if err := verify(ev.Provider, h, body, secret); err != nil {
		return nil, err
	}
	ev.Kind = kind(ev.Provider, name)
	if ev.Kind != KindPush {
		return ev, nil
	}
	if err := readPush(ev, h, body); err != nil {
		return nil, err
	}
	return ev, nil
}

// verify checks the provider's proof that the body comes from the
// holder of secret.
func verify(provider string, h http.Header, body, secret []byte) error {
	switch provider {
	case GitLab:
		tok := h.Get("X-Gitlab-Token")
		if tok == "" {
			return fmt.Errorf("%w: no X-Gitlab-Token", ErrSignature)
		}
		// Compared as digests: equal lengths, so not even the secret's
		// length leaks through the time taken.
		a, b := sha256.Sum256([]byte(tok)), sha256.Sum256(secret)
		if !hmac.Equal(a[:], b[:]) {
			return fmt.Errorf("%w: X-Gitlab-Token does not match", ErrSignature)
		}
		return nil
	case GitHub:
		return checkHMAC(h, "X-Hub-Signature-256", "sha256=", body, secret, true)
	default: // Gitea
		gitea, hub := h.Get("X-Gitea-Signature") != "", h.Get("X-Hub-Signature-256") != ""
		if !gitea && !hub {
			return fmt.Errorf("%w: no X-Gitea-Signature", ErrSignature)
		}
		if err := checkHMAC(h, "X-Gitea-Signature", "", body, secret, gitea); err != nil {
			return err
		}
		return checkHMAC(h, "X-Hub-Signature-256", "sha256=", body, secret, hub)
	}
}

// checkHMAC checks header (prefix + hex HMAC-SHA256 of body) when
// required.
func checkHMAC(h http.Header, header, prefix string, body, secret []byte, required bool) error {
	if !required {
		return nil
	}
	v := h.Get(header)
	hexSum, ok := strings.CutPrefix(strings.TrimSpace(v), prefix)
	if v == "" || !ok {
		return fmt.Errorf("%w: no %s%s", ErrSignature, prefix, header)
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil {
		return fmt.Errorf("%w: %s is not hex", ErrSignature, header)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return fmt.Errorf("%w: %s does not match the body", ErrSignature, header)
	}
	return nil
}

// kind maps a provider's event name to Event.Kind. GitLab's tag pushes
// are pushes here, as GitHub's and Gitea's are: Branch tells them apart.
func kind(provider, name string) string {
	if provider != GitLab {
		return name
	}
	switch name {
	case "Push Hook", "Tag Push Hook":
		return KindPush
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimSuffix(name, " Hook")), " ", "_")
}

// pushPayload is the part of a push payload read here: the three
// providers name these fields alike.
type pushPayload struct {
	Ref     string `json:"ref"`
	After   string `json:"after"`
	Deleted bool   `json:"deleted"` // GitHub, Gitea (older Gitea: absent)
}

// readPush fills ev from a verified push payload.
func readPush(ev *Event, h http.Header, body []byte) error {
	raw, err := payloadJSON(h, body)
	if err != nil {
		return err
	}
	var p pushPayload
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !strings.HasPrefix(p.Ref, "refs/") || strings.ContainsAny(p.Ref, "\x00\n\r") {
		return fmt.Errorf("%w: push without a ref", ErrMalformed)
	}
	if !isSHA(p.After) {
		return fmt.Errorf("%w: push without the commit it moved to", ErrMalformed)
	}
	ev.Ref, ev.After = p.Ref, strings.ToLower(p.After)
	ev.Deleted = p.Deleted || strings.Trim(p.After, "0") == ""
	if b, ok := strings.CutPrefix(p.Ref, "refs/heads/"); ok && b != "" {
		ev.Branch = b
	}
	return nil
}

// payloadJSON is the body's JSON: GitHub and Gitea can also be set to
// send it form-encoded, as the "payload" field.
func payloadJSON(h http.Header, body []byte) ([]byte, error) {
	ct, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	if ct != "application/x-www-form-urlencoded" {
		return body, nil
	}
	q, err := url.ParseQuery(string(body))
	if err != nil || q.Get("payload") == "" {
		return nil, fmt.Errorf("%w: a form-encoded delivery without payload", ErrMalformed)
	}
	return []byte(q.Get("payload")), nil
}

// isSHA is true for a SHA-1 or SHA-256 object name in hex.
func isSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
