package webhooks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/safefetch"
)

// Timeout bounds one delivery attempt, connection to answer (the
// contract's ten seconds).
const Timeout = 10 * time.Second

// Headers every delivery carries.
const (
	HeaderSignature = "X-Service-Signature"
	HeaderEvent     = "X-Service-Event"
	HeaderDelivery  = "X-Service-Delivery"
	HeaderKey       = "Idempotency-Key"
)

// Sign is the x-service-signature of body under secret: "sha256=" and
// the unpadded base64url HMAC-SHA256 of the raw bytes.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Sender posts signed events to receivers without letting a customer's
// URL reach inside the operator's network: https goes to public
// addresses or those on the allow-list, plain http only to the
// allow-list, each checked against the address actually dialed. It
// follows no redirect.
type Sender struct {
	https, http *http.Client
}

// Message is one attempt's request.
type Message struct {
	URL        string
	Secret     string
	DeliveryID string
	EventID    string
	Event      string
	Body       []byte
}

// NewSender returns a sender that may also reach the ranges in allow;
// roots, when not nil, replaces the system's CA pool (tests, private
// CAs).
func NewSender(allow []netip.Prefix, roots *x509.CertPool) *Sender {
	client := func(publicToo bool) *http.Client {
		control := func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s", safefetch.ErrBlocked, address)
			}
			a := ap.Addr().Unmap()
			if publicToo && safefetch.Allowed(a, allow) {
				return nil
			}
			for _, p := range allow {
				if p.Contains(a) {
					return nil
				}
			}
			if publicToo {
				return fmt.Errorf("%w: %s is a private, loopback, link-local or reserved address", safefetch.ErrBlocked, a)
			}
			return fmt.Errorf("%w: plain http goes only to the operator's allow-list; %s is not on it", safefetch.ErrBlocked, a)
		}
		d := &net.Dialer{Timeout: Timeout, Control: control}
		tr := &http.Transport{
			Proxy:                 nil, // a proxy would dial for us, unchecked
			DialContext:           d.DialContext,
			TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:   Timeout,
			ResponseHeaderTimeout: Timeout,
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       30 * time.Second,
		}
		return &http.Client{Transport: tr, Timeout: Timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	return &Sender{https: client(true), http: client(false)}
}

// maxAnswer is how much of a receiver's answer is read (and dropped).
const maxAnswer = 4 << 10

// Send makes one attempt: the receiver's HTTP status, and an error unless
// it answered 2xx. A redirect is an answer like any other non-2xx.
func (s *Sender) Send(ctx context.Context, m Message) (int, error) {
	u, err := url.Parse(m.URL)
	if err != nil {
		return 0, fmt.Errorf("webhook URL: %w", err)
	}
	client := s.https
	switch u.Scheme {
	case "https":
	case "http":
		client = s.http
	default:
		return 0, fmt.Errorf("webhook URL: %s is not an http(s) URL", u.Redacted())
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL, bytes.NewReader(m.Body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sandboxd-webhooks")
	req.Header.Set(HeaderSignature, Sign(m.Secret, m.Body))
	req.Header.Set(HeaderEvent, m.Event)
	req.Header.Set(HeaderDelivery, m.DeliveryID)
	req.Header.Set(HeaderKey, m.EventID)
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is the customer's own; keep the cause
		}
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return 0, fmt.Errorf("no answer within %s", Timeout)
		case errors.Is(err, safefetch.ErrBlocked):
			// Not which address: that would tell a tenant what internal
			// names resolve to.
			return 0, fmt.Errorf("%w: the URL's host is a private, loopback or reserved address", safefetch.ErrBlocked)
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		if loc := resp.Header.Get("Location"); resp.StatusCode >= 300 && resp.StatusCode < 400 && loc != "" {
			return resp.StatusCode, fmt.Errorf("answered %s (redirects are not followed)", resp.Status)
		}
		return resp.StatusCode, fmt.Errorf("answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}
