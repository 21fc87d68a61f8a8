package sitejobs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/blobs"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/safefetch"
	"github.com/sandboxd/sandboxd/internal/wpzip"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// fetchFunc is a Fetcher from a function.
type fetchFunc func(ctx context.Context, raw string) ([]byte, error)

func (f fetchFunc) Get(ctx context.Context, raw string, _ int64, _ http.Header) ([]byte, error) {
	return f(ctx, raw)
}

// installAgent records the ZIPs it is asked to install; every other
// method of the interface is left nil (not called by deploys).
type installAgent struct {
	agentv1connect.AgentServiceClient
	installed [][]byte
}

func (a *installAgent) InstallPlugin(_ context.Context, req *connect.Request[agentv1.InstallPluginRequest]) (*connect.Response[agentv1.InstallPluginResponse], error) {
	a.installed = append(a.installed, req.Msg.Zip)
	return connect.NewResponse(&agentv1.InstallPluginResponse{}), nil
}

type oneAgent struct{ a *installAgent }

func (o oneAgent) Agent(string) (agentv1connect.AgentServiceClient, error) { return o.a, nil }

// TestDeployFromURL: the job, not the request, downloads a zipUrl; a bad
// download fails the job with a code the client reads on the job, the
// URL's query (which may be a signature) is never quoted, and nothing
// stays stored afterwards. A second run of the same job (a new leader's)
// converges.
func TestDeployFromURL(t *testing.T) {
	plugin := wpzip.BuildPlugin("fetched", "Fetched", "1.0", "")
	loopback := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(plugin) }))
	defer loopback.Close()
	serve := func(data []byte, err error) Fetcher {
		return fetchFunc(func(context.Context, string) ([]byte, error) { return data, err })
	}
	tests := []struct {
		name     string
		fetch    Fetcher
		url      string
		wantCode string
		wantMsg  string
	}{
		{"fetched and installed", serve(plugin, nil), "https://dl.example.com/fetched.zip?sig=SECRET", "", ""},
		{"loopback refused at dial", safefetch.New(nil, 5*time.Second), loopback.URL + "/p.zip?sig=SECRET", CodeZipFetchFailed, "not allowed"},
		{"server error", serve(nil, errors.New("dl.example.com answered 404 Not Found")), "https://dl.example.com/x.zip", CodeZipFetchFailed, "404"},
		{"too large", serve(nil, fmt.Errorf("%w: the limit is 1 bytes", safefetch.ErrTooLarge)), "https://dl.example.com/x.zip?sig=SECRET", CodePayloadTooLarge, "dl.example.com"},
		{"not a ZIP", serve([]byte("<html>"), nil), "https://dl.example.com/x.zip", "invalid_request", "not a ZIP"},
		{"empty", serve(nil, nil), "https://dl.example.com/x.zip", "invalid_request", "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			bs, err := blobs.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			store := readySite(t)
			agent := &installAgent{}
			r := &Runners{Store: store, Agents: oneAgent{agent}, Blobs: bs, Fetch: tt.fetch}
			j, err := jobs.New(jobspec.DeployPlugin, "ws_a", "site_1", jobspec.DeployPayload{ZipURL: tt.url, Source: "url"}, time.Now().UTC())
			if err != nil {
				t.Fatal(err)
			}
			for run := range 2 {
				err = r.deploy(context.Background(), &j, func(int) {})
				var f *jobs.Failure
				switch {
				case tt.wantCode == "" && err != nil:
					t.Fatalf("run %d: %v", run, err)
				case tt.wantCode != "" && (!errors.As(err, &f) || f.Code != tt.wantCode || !strings.Contains(f.Message, tt.wantMsg)):
					t.Fatalf("run %d: %v; want %s mentioning %q", run, err, tt.wantCode, tt.wantMsg)
				case f != nil && strings.Contains(f.Message, "SECRET"):
					t.Fatalf("the failure quotes the URL's query: %s", f.Message)
				}
			}
			if want := map[bool]int{true: 2, false: 0}[tt.wantCode == ""]; len(agent.installed) != want ||
				(want > 0 && string(agent.installed[1]) != string(plugin)) {
				t.Fatalf("%d installs, want %d of the fetched ZIP", len(agent.installed), want)
			}
			left, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
			if len(left) != 0 {
				t.Fatalf("left stored: %v", left)
			}
		})
	}
}

// readySite is a store holding one ready site, site_1 in ws_a on n1.
func readySite(t *testing.T) *state.Store {
	t.Helper()
	s := state.NewStore()
	now := time.Now().UTC()
	for _, fn := range []func(*state.Tx) error{
		func(tx *state.Tx) error {
			return tx.CreateAccount(state.Account{ID: "usr_a", Email: "a@x.io", Plan: state.PlanPaid}, state.Workspace{ID: "ws_a", OwnerID: "usr_a"})
		},
		func(tx *state.Tx) error {
			return tx.CreateSite(state.Site{ID: "site_1", WorkspaceID: "ws_a", UserID: "usr_a", Slug: "one", NodeID: "n1",
				Status: state.SiteReady, CreatedAt: now, UpdatedAt: now}, state.Quota{})
		},
	} {
		if err := s.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
