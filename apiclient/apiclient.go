// Package apiclient calls the sandboxd REST API: one client for the admin
// CLI, the test harness and the benchmarks (and the customer CLI to come),
// so that authentication, the workspace header, Idempotency-Key and the
// error envelope are handled in one place.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client calls the API as one caller.
type Client struct {
	// Base is the API's base URL, without a trailing slash.
	Base string
	// Token is an API token or an operator token; empty sends none.
	Token string
	// Workspace, when set, selects the workspace (X-Service-Workspace).
	Workspace string
	HTTP      *http.Client
	// MaxAnswerBytes bounds an answer as read, after any decompression
	// (Go's transport inflates a gzip answer itself); default
	// DefaultMaxAnswerBytes.
	MaxAnswerBytes int64
}

// DefaultMaxAnswerBytes bounds an answer: far above the API's largest
// (a file's content, a run's log), far below what a gzip bomb inflates
// to.
const DefaultMaxAnswerBytes = 256 << 20

// New returns a client for base authenticating with token.
func New(base, token string) *Client {
	return &Client{Base: strings.TrimRight(base, "/"), Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// In returns a copy of the client that selects workspace ws.
func (c *Client) In(ws string) *Client {
	cp := *c
	cp.Workspace = ws
	return &cp
}

// As returns a copy of the client using another token.
func (c *Client) As(token string) *Client {
	cp := *c
	cp.Token = token
	return &cp
}

// Response is an API answer, decoded when it is JSON.
type Response struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any
}

// Error is an error envelope the API answered with.
type Error struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("the server answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return e.Code + ": " + e.Message
}

// Do sends one request. body is nil, a string or []byte sent as is, or a
// value sent as JSON (with Content-Type application/json unless header
// sets one); header holds name, value pairs, an empty value removing the
// header. The error is a transport error only: read the status from the
// response, or call Err.
func (c *Client) Do(ctx context.Context, method, path string, body any, header ...string) (*Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Workspace != "" {
		req.Header.Set("X-Service-Workspace", c.Workspace)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, c.Base+path, err)
	}
	defer resp.Body.Close()
	max := c.MaxAnswerBytes
	if max <= 0 {
		max = DefaultMaxAnswerBytes
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	if int64(len(raw)) > max {
		return nil, fmt.Errorf("%s %s: the answer is larger than %d bytes", method, path, max)
	}
	r := &Response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.Body); err != nil {
			return nil, fmt.Errorf("%s %s: decode %.200q: %w", method, path, raw, err)
		}
	}
	return r, nil
}

// Call is Do for callers that only want success: an answer of 300 or
// more comes back as *Error.
func (c *Client) Call(ctx context.Context, method, path string, body any, header ...string) (*Response, error) {
	r, err := c.Do(ctx, method, path, body, header...)
	if err != nil {
		return nil, err
	}
	return r, r.Err()
}

// Err is the answer's error envelope as *Error, or nil below 300.
func (r *Response) Err() error {
	if r.Status < 300 {
		return nil
	}
	return &Error{Status: r.Status, Code: r.Code(), Message: r.message(), Details: r.Details()}
}

// Decode unmarshals the raw answer into v.
func (r *Response) Decode(v any) error { return json.Unmarshal(r.Raw, v) }

// Code is error.code of an error envelope, or "".
func (r *Response) Code() string {
	s, _ := r.envelope()["code"].(string)
	return s
}

func (r *Response) message() string {
	s, _ := r.envelope()["message"].(string)
	return s
}

// Details is error.details of an error envelope, or nil.
func (r *Response) Details() map[string]any {
	d, _ := r.envelope()["details"].(map[string]any)
	return d
}

func (r *Response) envelope() map[string]any {
	e, _ := r.Body["error"].(map[string]any)
	return e
}

// Get returns the value at a dotted path of the body ("token.id").
func (r *Response) Get(path string) any {
	var cur any = r.Body
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// Str is Get as a string.
func (r *Response) Str(path string) string {
	s, _ := r.Get(path).(string)
	return s
}

// List is Get as a list of objects.
func (r *Response) List(path string) []map[string]any {
	raw, _ := r.Get(path).([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, v := range raw {
		m, _ := v.(map[string]any)
		out = append(out, m)
	}
	return out
}
