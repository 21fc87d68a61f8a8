package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// defaultRetry is how long a request that is safe to send again is
// retried while the control plane cannot answer it: longer than a leader
// election after a server died (about one to three seconds), short
// enough that a 503 meaning "no capacity" is soon reported.
const defaultRetry = 10 * time.Second

// retryBudget is SANDBOXCTL_RETRY (a duration, 0 to never retry) or the
// default.
func retryBudget() (time.Duration, error) {
	v := os.Getenv("SANDBOXCTL_RETRY")
	if v == "" {
		return defaultRetry, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, usageError{fmt.Errorf("SANDBOXCTL_RETRY=%q: want a duration such as 10s, or 0 to never retry", v)}
	}
	return d, nil
}

// retrying is the transport of every API client sandboxctl makes. A
// request that is safe to send again (a read, or a write that carries an
// Idempotency-Key, which the server applies once however often it
// arrives) is sent again, with the same key, for up to budget while the
// answer is a 503 (outcome_unknown included: the retry learns the
// outcome) or no answer comes at all. Anything else is passed through.
type retrying struct {
	next   http.RoundTripper
	budget time.Duration
	// notice is told, once per command (told), that sandboxctl waits and
	// why, so that a person knows.
	notice io.Writer
	told   *atomic.Bool
}

// RoundTrip sends req, and sends it again while that is safe and may
// help. A write that may have been applied (an outcome_unknown, or no
// answer) is not settled by a later refusal, which speaks only for
// itself: unless a later attempt succeeds, the uncertain outcome is what
// the caller gets, with a word on how to learn it.
func (rt *retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	key := req.Header.Get("Idempotency-Key")
	safe := (req.Method == http.MethodGet || req.Method == http.MethodHead || key != "") &&
		(req.Body == nil || req.Body == http.NoBody || req.GetBody != nil)
	giveUp := time.Now().Add(rt.budget)
	var unsure *uncertain // a write's first outcome that may have landed
	for pause := 250 * time.Millisecond; ; pause = min(2*pause, 4*time.Second) {
		resp, err := rt.next.RoundTrip(req)
		if !safe || req.Context().Err() != nil {
			return rt.settle(unsure, key, resp, err)
		}
		code, message := unavailable(resp, err)
		wait, why := retryAfter(resp, err, code, message, pause)
		if key != "" && unsure == nil {
			unsure = uncertainOf(resp, err, code)
		}
		if why == "" || time.Now().Add(wait).After(giveUp) {
			return rt.settle(unsure, key, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
		if rt.notice != nil && rt.told.CompareAndSwap(false, true) {
			fmt.Fprintf(rt.notice, "sandboxctl: %s; retrying for up to %v\n", why, rt.budget)
		}
		select {
		case <-req.Context().Done():
			return rt.settle(unsure, key, nil, req.Context().Err())
		case <-time.After(wait):
		}
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, fmt.Errorf("resend %s %s: %w", req.Method, req.URL.Path, err)
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// uncertain is an outcome that leaves a write possibly applied: an
// outcome_unknown answer (kept whole) or no answer.
type uncertain struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// uncertainOf is the uncertainty in one attempt's outcome (code is its
// 503's error code), or nil when the outcome is plain: an answer other
// than outcome_unknown, or a connection that was never made (nothing was
// sent).
func uncertainOf(resp *http.Response, err error, code string) *uncertain {
	if err != nil {
		if opErr := (*net.OpError)(nil); errors.As(err, &opErr) && opErr.Op == "dial" {
			return nil
		}
		return &uncertain{err: err}
	}
	if code != "outcome_unknown" {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return &uncertain{status: resp.StatusCode, header: resp.Header.Clone(), body: body}
}

// settle is the answer to give: the last one, unless an earlier attempt
// of this keyed write may have landed and the last is no success; then
// that uncertainty, and how to learn what happened.
func (rt *retrying) settle(unsure *uncertain, key string, resp *http.Response, err error) (*http.Response, error) {
	if unsure == nil || (err == nil && resp.StatusCode < 300) {
		return resp, err
	}
	if resp != nil {
		resp.Body.Close()
	}
	if rt.notice != nil {
		fmt.Fprintf(rt.notice, "sandboxctl: this change may or may not have been made; to learn which without making it twice, "+
			"run the same command again with SANDBOXCTL_IDEMPOTENCY_KEY=%s\n", key)
	}
	if unsure.err != nil {
		return nil, unsure.err
	}
	return &http.Response{Status: "503 Service Unavailable", StatusCode: unsure.status, Header: unsure.header,
		Body: io.NopCloser(bytes.NewReader(unsure.body)), ContentLength: int64(len(unsure.body)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
}

// unavailable reads a 503's error envelope (64 KiB of the body at most,
// put back, as this answer may be the one returned): its code and
// message, "" for any other outcome or a body that is no envelope.
func unavailable(resp *http.Response, err error) (code, message string) {
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		return "", ""
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(raw), resp.Body), resp.Body}
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(raw, &env) != nil {
		return "", ""
	}
	return env.Error.Code, env.Error.Message
}

// retryAfter says why a request may succeed if sent again ("" when it
// may not) and after how long: a 503 (its envelope's code and message)
// after its Retry-After (at least pause, at most 5 s); no answer after
// pause, unless the error cannot pass by waiting (a name that does not
// resolve, a certificate refused).
func retryAfter(resp *http.Response, err error, code, message string, pause time.Duration) (time.Duration, string) {
	if err != nil {
		var dnsErr *net.DNSError
		var certErr *tls.CertificateVerificationError
		if errors.As(err, &dnsErr) && !dnsErr.Temporary() || errors.As(err, &certErr) {
			return 0, ""
		}
		return pause, fmt.Sprintf("no answer (%v)", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		return 0, ""
	}
	wait := pause
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
		wait = min(max(time.Duration(secs)*time.Second, pause), 5*time.Second)
	}
	if code == "" {
		return wait, "the server answered 503"
	}
	return wait, fmt.Sprintf("%s: %s", code, message)
}
