package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
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
	// notice is told once, when retrying starts, so that a person knows
	// why the command waits.
	notice io.Writer
}

func (rt *retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	safe := (req.Method == http.MethodGet || req.Method == http.MethodHead || req.Header.Get("Idempotency-Key") != "") &&
		(req.Body == nil || req.Body == http.NoBody || req.GetBody != nil)
	giveUp := time.Now().Add(rt.budget)
	told := false
	for pause := 250 * time.Millisecond; ; pause = min(2*pause, 4*time.Second) {
		resp, err := rt.next.RoundTrip(req)
		if !safe || req.Context().Err() != nil {
			return resp, err
		}
		wait, why := retryAfter(resp, err, pause)
		if why == "" || time.Now().Add(wait).After(giveUp) {
			return resp, err
		}
		if resp != nil {
			resp.Body.Close()
		}
		if !told && rt.notice != nil {
			fmt.Fprintf(rt.notice, "sandboxctl: %s; retrying for up to %v\n", why, rt.budget)
			told = true
		}
		select {
		case <-req.Context().Done():
			return nil, req.Context().Err()
		case <-time.After(wait):
		}
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// retryAfter says why a request may succeed if sent again ("" when it
// may not) and after how long: a 503 after its Retry-After (at least
// pause, at most 5 s), no answer after pause. A 503's body is read (64
// KiB of it at most, and put back) to say why.
func retryAfter(resp *http.Response, err error, pause time.Duration) (time.Duration, string) {
	if err != nil {
		return pause, fmt.Sprintf("no answer (%v)", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		return 0, ""
	}
	wait := pause
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
		wait = min(max(time.Duration(secs)*time.Second, pause), 5*time.Second)
	}
	var env struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	// Put back what was read: this answer may be the one returned.
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(raw), resp.Body), resp.Body}
	if json.Unmarshal(raw, &env) != nil || env.Error.Code == "" {
		return wait, "the server answered 503"
	}
	return wait, fmt.Sprintf("%s: %s", env.Error.Code, env.Error.Message)
}
