package edge_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
)

// fetch GETs base+path with a Host header, returning status and body.
func fetch(t *testing.T, base, host, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsOnlyOnTheOperatorListener: the public port never serves
// /metrics or /healthz (whatever the Host); the operator's listener
// serves both, with latency by status class and route kind, and neither
// shows a backend's, the control plane's or a visitor's address, nor a
// host name.
func TestMetricsOnlyOnTheOperatorListener(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "site") }))
	defer backend.Close()
	bu, _ := url.Parse(backend.URL)
	port, _ := strconv.Atoi(bu.Port())

	s := st.Single(t, st.Options{})
	e, err := edge.New(edge.Config{ControlPlane: []string{s.ClusterURL()}, Creds: st.Member(t, s, pki.RoleEdge, "edge-m"), Addr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	defer e.Close()
	st.Await(t, e.Ready(), time.Minute, "the edge's route table")
	if e.MetricsAddr() == "" || e.MetricsAddr() == e.Addr() {
		t.Fatalf("metrics listener %q beside public %q", e.MetricsAddr(), e.Addr())
	}

	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	now := time.Now().UTC()
	for _, c := range []fsm.Command{
		fsm.UpsertNode{Node: state.Node{ID: "n1", Address: "http://127.0.0.1:1", BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}}},
		fsm.CreateSiteWithJob{Site: state.Site{ID: "site_m1", WorkspaceID: alice.Personal, UserID: alice.ID, Slug: "shop-m1abc",
			Status: state.SiteCreating, URL: "http://shop-m1abc.localhost", NodeID: "n1", CreatedAt: now, UpdatedAt: now},
			Job: state.Job{ID: "job_m1", Type: "none", WorkspaceID: alice.Personal, CreatedAt: now}},
		fsm.UpdateSite{Update: state.SiteUpdate{ID: "site_m1", Status: state.SiteReady, Port: port, At: now}},
	} {
		if _, err := s.Node().Apply(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	public := "http://" + e.Addr()
	st.WaitFor(t, 10*time.Second, "the site's route", func() bool {
		code, _ := fetch(t, public, "shop-m1abc.localhost", "/")
		return code == 200
	})

	tests := []struct {
		name, host, path string
		code             int
	}{
		{"metrics by the edge's address", e.Addr(), "/metrics", 404},
		{"health by the edge's address", e.Addr(), "/healthz", 404},
		{"metrics by an unknown host", "nobody.localhost", "/metrics", 404},
		{"a site's own path", "shop-m1abc.localhost", "/metrics", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := fetch(t, public, tt.host, tt.path)
			if code != tt.code || strings.Contains(body, "sandboxd_") || strings.Contains(body, "routeStream") {
				t.Fatalf("public %s %s: %d %.200s", tt.host, tt.path, code, body)
			}
		})
	}

	operator := "http://" + e.MetricsAddr()
	code, metrics := fetch(t, operator, "", "/metrics")
	if code != 200 {
		t.Fatalf("operator /metrics: %d", code)
	}
	for _, want := range []string{
		`sandboxd_edge_request_duration_seconds_bucket{code_class="2xx",route="site"`,
		`sandboxd_edge_request_duration_seconds_count{code_class="4xx",route="unknown_host"}`,
		`sandboxd_edge_routes 1`,
		`sandboxd_edge_route_stream_connected 1`,
		`sandboxd_edge_backend_errors_total 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("operator /metrics lacks %s", want)
		}
	}
	code, health := fetch(t, operator, "", "/healthz")
	if code != 200 || !strings.Contains(health, `"status":"ok"`) {
		t.Fatalf("operator /healthz: %d %s", code, health)
	}
	for name, body := range map[string]string{"/metrics": metrics, "/healthz": health} {
		if found := promtest.Addresses(body); len(found) > 0 {
			t.Errorf("operator %s shows addresses %q", name, found)
		}
		for _, sec := range []string{bu.Host, "shop-m1abc", "site_m1", e.Addr()} {
			if strings.Contains(body, sec) {
				t.Errorf("operator %s shows %s", name, sec)
			}
		}
	}
}

// TestNoMetricsListenerByDefault: without MetricsAddr nothing but the
// public listener is bound.
func TestNoMetricsListenerByDefault(t *testing.T) {
	e, err := edge.New(edge.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.MetricsAddr() != "" {
		t.Fatalf("metrics listener %s bound by default", e.MetricsAddr())
	}
	if names := e.MetricNames(); len(names) == 0 {
		t.Fatal("no metric registered")
	}
}
