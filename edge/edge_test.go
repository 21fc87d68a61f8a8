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
	"github.com/sandboxd/sandboxd/protocol/edge/v1/edgev1connect"
)

// TestEdgeFollowsTheRouteStream runs an edge against a real control plane
// and a stand-in backend: routes appear, change state and disappear as
// the replicated site rows do, with no request waiting on Raft.
func TestEdgeFollowsTheRouteStream(t *testing.T) {
	var lastHost, lastXFF, lastProto string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastHost, lastXFF, lastProto = r.Host, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto")
		io.WriteString(w, "hello from "+r.Host+r.URL.Path)
	}))
	defer backend.Close()
	bu, _ := url.Parse(backend.URL)
	port, _ := strconv.Atoi(bu.Port())

	s := st.Single(t, st.Options{})
	e, err := edge.New(edge.Config{ControlPlane: s.URL(), ClusterToken: s.ClusterToken(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	defer e.Close()
	st.Await(t, e.Ready(), time.Minute, "the edge's route table")

	apply := func(c fsm.Command) {
		t.Helper()
		if _, err := s.Node().Apply(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	apply(fsm.UpsertNode{Node: state.Node{ID: "n1", Address: "http://127.0.0.1:1", BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}}})
	now := time.Now().UTC()
	site := state.Site{ID: "site_edge1", WorkspaceID: alice.Personal, UserID: alice.ID, Slug: "shop-ab12c", Status: state.SiteCreating,
		URL: "http://shop-ab12c.localhost:8081", NodeID: "n1", CreatedAt: now, UpdatedAt: now}
	apply(fsm.CreateSiteWithJob{Site: site, Job: state.Job{ID: "job_edge1", Type: "none", WorkspaceID: alice.Personal, CreatedAt: now}})

	get := func(host string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+e.Addr()+"/x", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitStatus := func(host string, want int) string {
		t.Helper()
		var body string
		st.WaitFor(t, 10*time.Second, "status "+strconv.Itoa(want), func() bool {
			var code int
			code, body = get(host)
			return code == want
		})
		return body
	}

	if body := waitStatus("shop-ab12c.localhost:8081", 503); !strings.Contains(body, "being created") {
		t.Fatalf("creating page: %s", body)
	}
	apply(fsm.UpdateSite{Update: state.SiteUpdate{ID: site.ID, Status: state.SiteReady, Port: port, At: now}})
	if body := waitStatus("Shop-AB12C.localhost:8081", 200); body != "hello from Shop-AB12C.localhost:8081/x" {
		t.Fatalf("proxied: %q", body)
	}
	if lastHost != "Shop-AB12C.localhost:8081" || lastXFF != "127.0.0.1" || lastProto != "http" {
		t.Fatalf("backend saw host %q xff %q proto %q", lastHost, lastXFF, lastProto)
	}
	if code, body := get("nobody.localhost:8081"); code != 404 || !strings.Contains(body, "No sandbox") {
		t.Fatalf("unknown host: %d %s", code, body)
	}
	// Its node goes down: a clear page that reloads itself, until the
	// node is back.
	apply(fsm.SetNodeStatus{ID: "n1", Status: state.NodeDown, At: now})
	if body := waitStatus("shop-ab12c.localhost:8081", 503); !strings.Contains(body, "temporarily unavailable") ||
		!strings.Contains(body, `http-equiv="refresh" content="30"`) {
		t.Fatalf("unavailable page: %s", body)
	}
	apply(fsm.SetNodeStatus{ID: "n1", Status: state.NodeReady, At: now})
	waitStatus("shop-ab12c.localhost:8081", 200)
	apply(fsm.DeleteSite{ID: site.ID})
	waitStatus("shop-ab12c.localhost:8081", 404)

	// A restart of the edge gets the whole table again.
	e2, err := edge.New(edge.Config{ControlPlane: s.URL(), ClusterToken: s.ClusterToken(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	e2.Start()
	defer e2.Close()
	st.Await(t, e2.Ready(), time.Minute, "the restarted edge's route table")

	// A wrong cluster token never gets routes. Streams that end are
	// counted when they end (a refusal is a stream ending at once, with
	// HTTP 200, as Connect streams do): wait for the control plane to have
	// refused it twice, so the edge handled one refusal and tried again.
	streams := func() int {
		m := string(st.NewClient(t, s.URL(), "").Do("GET", "/metrics", nil).Raw)
		prefix := `sandboxd_http_requests_total{code="200",route="/` + edgev1connect.RouteServiceName + `/"} `
		i := strings.Index(m, prefix)
		if i < 0 {
			return 0
		}
		n, _ := strconv.Atoi(strings.Fields(m[i+len(prefix):])[0])
		return n
	}
	before := streams()
	bad, err := edge.New(edge.Config{ControlPlane: s.URL(), ClusterToken: "wrong", Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	bad.Start()
	defer bad.Close()
	st.WaitFor(t, 30*time.Second, "two refusals of the wrong token", func() bool { return streams() >= before+2 })
	select {
	case <-bad.Ready():
		t.Fatal("an edge with a wrong token got the route table")
	default:
	}
}
