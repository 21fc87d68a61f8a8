package edge_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
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
	e, err := edge.New(edge.Config{ControlPlane: []string{s.ClusterURL()}, Creds: st.Member(t, s, pki.RoleEdge, "edge-"+randName()), Addr: "127.0.0.1:0"})
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
	// The site stops answering before its node is known to be down: a
	// page that says so and reloads itself, and Retry-After for clients.
	backend.Close()
	req, _ := http.NewRequest("GET", "http://"+e.Addr()+"/x", nil)
	req.Host = "shop-ab12c.localhost:8081"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || resp.Header.Get("Retry-After") != "5" || !strings.Contains(string(body), "did not answer") ||
		!strings.Contains(string(body), `http-equiv="refresh" content="5"`) {
		t.Fatalf("a silent site: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	apply(fsm.DeleteSite{ID: site.ID})
	waitStatus("shop-ab12c.localhost:8081", 404)

	// A restart of the edge gets the whole table again.
	e2, err := edge.New(edge.Config{ControlPlane: []string{s.ClusterURL()}, Creds: st.Member(t, s, pki.RoleEdge, "edge-"+randName()), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	e2.Start()
	defer e2.Close()
	st.Await(t, e2.Ready(), time.Minute, "the restarted edge's route table")

	// A revoked edge, or an agent's certificate, never gets routes: wait
	// until each was refused twice (the edge handled one refusal and
	// tried again).
	revoked := st.Member(t, s, pki.RoleEdge, "edge-revoked")
	if err := s.Members().RevokeMember(context.Background(), "edge/edge-revoked"); err != nil {
		t.Fatal(err)
	}
	for name, creds := range map[string]*rpcauth.Creds{"revoked": revoked, "an agent": st.Member(t, s, pki.RoleAgent, "node-1")} {
		logs := &st.LogBuffer{}
		bad, err := edge.New(edge.Config{ControlPlane: []string{s.ClusterURL()}, Creds: creds, Addr: "127.0.0.1:0",
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		bad.Start()
		defer bad.Close()
		st.WaitFor(t, 30*time.Second, "two refusals of "+name, func() bool { return strings.Count(logs.String(), "route stream interrupted") >= 2 })
		if !strings.Contains(logs.String(), "unauthenticated") && !strings.Contains(logs.String(), "permission_denied") {
			t.Fatalf("%s: refused for another reason: %s", name, logs)
		}
		select {
		case <-bad.Ready():
			t.Fatalf("%s got the route table", name)
		default:
		}
	}
}

var edgeNames atomic.Int32

// randName tells test edges apart as cluster members.
func randName() string { return strconv.Itoa(int(edgeNames.Add(1))) }
