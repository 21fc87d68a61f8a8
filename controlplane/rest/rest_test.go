package rest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type body struct {
	Name  string `json:"name"`
	Count int    `json:"count,omitempty"`
}

func newTestRouter() (*Router, *Metrics) {
	r := NewRouter(slog.New(slog.DiscardHandler))
	r.Handle(Route{Method: "POST", Path: "/things", Summary: "make", Request: body{}, MaxBody: 64,
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			var b body
			if err := DecodeJSON(req, &b); err != nil {
				return err
			}
			return JSON(w, 201, b)
		}})
	r.Handle(Route{Method: "GET", Path: "/things/{id}", Summary: "get",
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			if req.PathValue("id") == "boom" {
				panic("boom")
			}
			if req.PathValue("id") == "fail" {
				return errFail
			}
			return JSON(w, 200, map[string]string{"id": req.PathValue("id")})
		}})
	return r, NewMetrics(prometheus.NewRegistry())
}

var errFail = &internalErr{}

type internalErr struct{}

func (*internalErr) Error() string { return "database password is hunter2" }

func do(h http.Handler, method, path, ct, payload string) (*httptest.ResponseRecorder, map[string]any) {
	req := httptest.NewRequest(method, path, strings.NewReader(payload))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec, out
}

func TestDecodeAndEnvelope(t *testing.T) {
	r, m := newTestRouter()
	h := Observe(r, slog.New(slog.DiscardHandler), m)
	cases := []struct {
		name, method, path, ct, body string
		status                       int
		code, field                  string
	}{
		{"ok", "POST", "/things", "application/json", `{"name":"a"}`, 201, "", ""},
		{"charset ok", "POST", "/things", "application/json; charset=utf-8", `{"name":"a"}`, 201, "", ""},
		{"no content type", "POST", "/things", "", `{"name":"a"}`, 400, "invalid_request", ""},
		{"form content type", "POST", "/things", "application/x-www-form-urlencoded", `name=a`, 400, "invalid_request", ""},
		{"malformed", "POST", "/things", "application/json", `{"name":`, 400, "invalid_request", ""},
		{"syntax", "POST", "/things", "application/json", `{name:1}`, 400, "invalid_request", ""},
		{"empty", "POST", "/things", "application/json", ``, 400, "invalid_request", ""},
		{"unknown field", "POST", "/things", "application/json", `{"name":"a","x":1}`, 400, "invalid_request", "x"},
		{"wrong type", "POST", "/things", "application/json", `{"name":1}`, 400, "invalid_request", "name"},
		{"trailing data", "POST", "/things", "application/json", `{"name":"a"} {}`, 400, "invalid_request", ""},
		{"not an object", "POST", "/things", "application/json", `"a"`, 400, "invalid_request", ""},
		{"too large", "POST", "/things", "application/json", `{"name":"` + strings.Repeat("a", 100) + `"}`, 413, "payload_too_large", ""},
		{"no route", "GET", "/nope", "", "", 404, "not_found", ""},
		{"wrong method", "DELETE", "/things", "", "", 405, "method_not_allowed", ""},
		{"panic", "GET", "/things/boom", "", "", 500, "internal_error", ""},
		{"internal error", "GET", "/things/fail", "", "", 500, "internal_error", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec, out := do(h, tc.method, tc.path, tc.ct, tc.body)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if rec.Header().Get(RequestIDHeader) == "" {
				t.Fatal("no request id")
			}
			if tc.code == "" {
				return
			}
			e, _ := out["error"].(map[string]any)
			if e["code"] != tc.code || e["message"] == "" {
				t.Fatalf("envelope %s", rec.Body)
			}
			details, has := e["details"]
			if tc.code == "internal_error" {
				if has || strings.Contains(rec.Body.String(), "hunter2") {
					t.Fatalf("internal error shows details or internals: %s", rec.Body)
				}
				return
			}
			d, ok := details.(map[string]any)
			if !ok {
				t.Fatalf("details must be an object: %s", rec.Body)
			}
			if tc.field != "" && d["field"] != tc.field {
				t.Fatalf("details.field %v, want %s", d["field"], tc.field)
			}
		})
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues("POST /things", "201")); n != 2 {
		t.Fatalf("metrics counted %v successful POSTs, want 2", n)
	}
}

func TestRequestIDIsEchoedOrReplaced(t *testing.T) {
	r, m := newTestRouter()
	h := Observe(r, slog.New(slog.DiscardHandler), m)
	req := httptest.NewRequest("GET", "/things/1", nil)
	req.Header.Set(RequestIDHeader, "client-abc.1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Header().Get(RequestIDHeader) != "client-abc.1" {
		t.Fatal("client request id not kept")
	}
	req.Header.Set(RequestIDHeader, "bad id\r\nx")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if got := rec.Header().Get(RequestIDHeader); !strings.HasPrefix(got, "req_") {
		t.Fatalf("unsafe request id kept: %q", got)
	}
}

// TestAlsoStatusIsDocumented: a route's other success statuses are in
// the document with the success body, beside its main one.
func TestAlsoStatusIsDocumented(t *testing.T) {
	r := NewRouter(slog.New(slog.DiscardHandler))
	r.Handle(Route{Method: "POST", Path: "/things", Summary: "make", Status: http.StatusCreated, Response: body{},
		AlsoStatus: map[int]string{http.StatusOK: "with preview=1: nothing made."},
		Handler:    func(w http.ResponseWriter, req *http.Request) error { return nil }})
	doc := r.OpenAPI(OpenAPIInfo{Title: "t", Version: "1"})
	responses := doc["paths"].(map[string]map[string]any)["/things"]["post"].(map[string]any)["responses"].(map[string]any)
	for _, status := range []string{"201", "200"} {
		resp, _ := responses[status].(map[string]any)
		b, _ := json.Marshal(resp["content"])
		if !strings.Contains(string(b), `"$ref":"#/components/schemas/body"`) {
			t.Errorf("response %s: %v", status, resp)
		}
	}
	if d, _ := responses["200"].(map[string]any)["description"].(string); !strings.Contains(d, "preview=1") {
		t.Errorf("200's description: %q", d)
	}
}

// TestAccessLogLevels: people's requests are info, the cluster's own
// traffic (members over mutual TLS) and scrapes are debug, so a terminal
// at info shows what people do; server errors are warnings.
func TestAccessLogLevels(t *testing.T) {
	member := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{}}}
	for _, tc := range []struct {
		name   string
		route  string
		tls    *tls.ConnectionState
		status int
		want   slog.Level
	}{
		{"an API call", "POST /api/app/sites", nil, 202, slog.LevelInfo},
		{"a refused API call", "POST /api/app/sites", nil, 401, slog.LevelInfo},
		{"an agent's heartbeat", "/sandboxd.agent.v1.RegistryService/", member, 200, slog.LevelDebug},
		{"an agent refused", "/sandboxd.agent.v1.RegistryService/", member, 403, slog.LevelDebug},
		{"TLS without a client certificate", "POST /api/app/sites", &tls.ConnectionState{}, 200, slog.LevelInfo},
		{"a health check", "GET /healthz", nil, 200, slog.LevelDebug},
		{"a scrape", "GET /metrics", nil, 200, slog.LevelDebug},
		{"a member's request that failed", "/sandboxd.agent.v1.RegistryService/", member, 503, slog.LevelWarn},
		{"a person's request a follower forwarded", "POST /api/app/sites", member, 202, slog.LevelInfo},
		{"an API call that failed", "GET /api/app/sites", nil, 500, slog.LevelWarn},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.TLS = tc.tls
		if tc.route == "POST /api/app/sites" && tc.tls == member {
			r.Header.Set(ForwardedHeader, "server-2")
		}
		if got := accessLevel(r, tc.route, tc.status); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
