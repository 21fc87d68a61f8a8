package sites

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/wpzip"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
	"github.com/sandboxd/sandboxd/scheduler"
)

// fakeNodes is a registry of nodes that are never dialled.
type fakeNodes struct {
	nodes []scheduler.Node
	held  map[string][]string
	agent agentv1connect.AgentServiceClient
}

func (f *fakeNodes) Candidates() ([]scheduler.Node, error) { return f.nodes, nil }
func (f *fakeNodes) HeldTemplates(nodeID string) []string  { return f.held[nodeID] }
func (f *fakeNodes) AvailablePHP() []string {
	var out []string
	for _, n := range f.nodes {
		out = append(out, n.Images...)
	}
	return out
}
func (f *fakeNodes) Agent(string) (agentv1connect.AgentServiceClient, error) {
	if f.agent == nil {
		return nil, errors.New("no agent")
	}
	return f.agent, nil
}

// fakeAgent answers the calls a test gives it; any other panics.
type fakeAgent struct {
	agentv1connect.AgentServiceClient
	calls     int
	files     func(*agentv1.FilesRequest) (*agentv1.FilesResponse, error)
	renamed   []*agentv1.RenameSiteRequest
	renameErr error
	debug     func() (*agentv1.DebugSettings, error)
}

func (f *fakeAgent) Files(_ context.Context, r *connect.Request[agentv1.FilesRequest]) (*connect.Response[agentv1.FilesResponse], error) {
	f.calls++
	m, err := f.files(r.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(m), nil
}

func (f *fakeAgent) GetDebug(context.Context, *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.DebugSettings], error) {
	f.calls++
	m, err := f.debug()
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(m), nil
}

type fakeZips struct{ stored [][]byte }

func (f *fakeZips) StoreZip(_ context.Context, zip []byte) (string, error) {
	f.stored = append(f.stored, zip)
	return strings.Repeat("f", 64), nil
}

type world struct {
	svc   *Service
	store *state.Store
	nodes *fakeNodes
	zips  *fakeZips
	ws    *state.Workspace
	acct  *state.Account
}

func newWorld(t *testing.T, plan string) *world {
	t.Helper()
	store := state.NewStore()
	acct := state.Account{ID: "usr_a", Email: "a@x.io", Plan: plan, PersonalWorkspaceID: "ws_a"}
	ws := state.Workspace{ID: "ws_a", OwnerID: "usr_a", Name: "A"}
	if err := store.Update(func(tx *state.Tx) error { return tx.CreateAccount(acct, ws) }); err != nil {
		t.Fatal(err)
	}
	w := &world{store: store, ws: &ws, acct: &acct, zips: &fakeZips{},
		nodes: &fakeNodes{nodes: []scheduler.Node{{ID: "node_1", Ready: true, Images: []string{"8.2"},
			Capacity: scheduler.Resources{MemoryMB: 1 << 20, CPUMilli: 1 << 20, Sites: 1000}}}}}
	w.svc = New(Config{Store: store, Raft: fsm.NewLocal(store), Plans: plans.Default(), Nodes: w.nodes,
		SiteURL: func(slug string) string { return "http://" + slug + ".sandbox.test" }, Zips: w.zips,
		CheckURL: func(raw string) error {
			if strings.Contains(raw, "169.254.") {
				return errors.New("refused address")
			}
			return nil
		}})
	return w
}

func code(err error) string {
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// TestCreate: a site is checked, placed and queued with its job in one
// entry; every refusal is the contract's error and writes nothing.
func TestCreate(t *testing.T) {
	ptr := func(n int) *int { return &n }
	tests := []struct {
		name  string
		in    sitespec.Create
		nodes []scheduler.Node
		code  string
	}{
		{name: "defaults", code: ""},
		{name: "name on two lines", in: sitespec.Create{Name: "a\nb"}, code: apierr.CodeInvalidRequest},
		{name: "php not in the contract", in: sitespec.Create{PHPVersion: "5.6"}, code: apierr.CodeInvalidRequest},
		{name: "php without an image", in: sitespec.Create{PHPVersion: "8.4"}, code: apierr.CodePHPVersionUnavailable},
		{name: "no node", nodes: []scheduler.Node{}, code: apierr.CodeServiceUnavailable},
		{name: "bad wordpress version", in: sitespec.Create{WordPressVersion: "latest"}, code: apierr.CodeInvalidRequest},
		{name: "expiry out of range", in: sitespec.Create{ExpiresInMinutes: ptr(0)}, code: apierr.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, state.PlanFree)
			if tt.nodes != nil {
				w.nodes.nodes = tt.nodes
			}
			tt.in.Workspace, tt.in.By = w.ws, w.acct
			site, jobID, err := w.svc.Create(context.Background(), tt.in)
			if got := code(err); got != tt.code || (tt.code != "" && err == nil) {
				t.Fatalf("code %q (%v), want %q", got, err, tt.code)
			}
			sites, _ := w.store.SitesOf(w.ws.ID)
			if tt.code != "" {
				if len(sites) != 0 {
					t.Fatalf("a refused create left %d sites", len(sites))
				}
				return
			}
			if site.PHPVersion != sitespec.DefaultPHPVersion || site.NodeID != "node_1" || site.Status != state.SiteCreating ||
				!strings.HasPrefix(site.URL, "http://wordpress-sandbox-") && !strings.HasPrefix(site.URL, "http://site-") {
				t.Errorf("site %+v", site)
			}
			job, _ := w.store.Job(jobID)
			if job == nil || job.Type != jobspec.CreateSite || job.SiteID != site.ID {
				t.Fatalf("job %+v", job)
			}
			if len(sites) != 1 {
				t.Errorf("%d sites stored", len(sites))
			}
		})
	}
}

// TestCreateKeepsThePlanQuota: the fourth site of a free plan is refused
// by the store with the quota, in the same entry as the site.
func TestCreateKeepsThePlanQuota(t *testing.T) {
	w := newWorld(t, state.PlanFree)
	for i := range 4 {
		_, _, err := w.svc.Create(context.Background(), sitespec.Create{Workspace: w.ws, By: w.acct})
		var quota *state.QuotaError
		if i < 3 && err != nil {
			t.Fatalf("site %d: %v", i+1, err)
		}
		if i == 3 && !errors.As(err, &quota) {
			t.Fatalf("fourth site: %v, want a quota error", err)
		}
	}
}

// addTemplates stores templates: ready on node_1 (PHP 8.2, WordPress
// 6.1.1), building, ready on an unknown node, and another workspace's.
func addTemplates(t *testing.T, w *world) {
	t.Helper()
	other := state.Account{ID: "usr_b", Email: "b@x.io", Plan: state.PlanPaid, PersonalWorkspaceID: "ws_b"}
	err := w.store.Update(func(tx *state.Tx) error {
		if err := tx.CreateAccount(other, state.Workspace{ID: "ws_b", OwnerID: "usr_b", Name: "B"}); err != nil {
			return err
		}
		for _, tpl := range []state.Template{
			{ID: "tpl_ready", WorkspaceID: "ws_a", UserID: "usr_a", Name: "Shop", Slug: "shop", Status: state.TemplateReady, PHPVersion: "8.2", WordPressVersion: "6.1.1", NodeID: "node_1"},
			{ID: "tpl_building", WorkspaceID: "ws_a", UserID: "usr_a", Name: "B", Slug: "b", Status: state.TemplateBuilding, PHPVersion: "8.2", NodeID: "node_1"},
			{ID: "tpl_away", WorkspaceID: "ws_a", UserID: "usr_a", Name: "Away", Slug: "away", Status: state.TemplateReady, PHPVersion: "8.2", NodeID: "node_9"},
			{ID: "tpl_copyable", WorkspaceID: "ws_a", UserID: "usr_a", Name: "Copyable", Slug: "copyable", Status: state.TemplateReady, PHPVersion: "8.2",
				NodeID: "node_9", ArtifactSHA256: strings.Repeat("a", 64)},
			{ID: "tpl_bobs", WorkspaceID: "ws_b", UserID: "usr_b", Name: "Bob", Slug: "bob", Status: state.TemplateReady, PHPVersion: "8.2", NodeID: "node_1"},
		} {
			if err := tx.CreateTemplateWithJob(tpl, state.Job{ID: "job_" + tpl.ID, Type: jobspec.SnapshotTemplate, WorkspaceID: tpl.WorkspaceID, Status: state.JobSucceeded}, state.Quota{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCreateFromTemplate: a site from a ready template of the workspace
// goes to the node that holds it, runs its PHP version, and its job says
// which template; anything else is refused and writes nothing.
func TestCreateFromTemplate(t *testing.T) {
	tests := []struct {
		name  string
		in    sitespec.Create
		code  string
		field string
	}{
		{name: "ready", in: sitespec.Create{TemplateID: "tpl_ready"}},
		{name: "ready, its PHP named", in: sitespec.Create{TemplateID: "tpl_ready", PHPVersion: "8.2", WordPressVersion: "6.1"}},
		{name: "unknown", in: sitespec.Create{TemplateID: "tpl_none"}, code: apierr.CodeTemplateNotFound},
		{name: "another workspace's", in: sitespec.Create{TemplateID: "tpl_bobs"}, code: apierr.CodeTemplateNotFound},
		{name: "building", in: sitespec.Create{TemplateID: "tpl_building"}, code: apierr.CodeInvalidRequest, field: "templateId"},
		{name: "other PHP", in: sitespec.Create{TemplateID: "tpl_ready", PHPVersion: "7.4"}, code: apierr.CodeInvalidRequest, field: "phpVersion"},
		{name: "other WordPress", in: sitespec.Create{TemplateID: "tpl_ready", WordPressVersion: "5.7"}, code: apierr.CodeInvalidRequest, field: "wordpressVersion"},
		{name: "its node is gone, no artifact", in: sitespec.Create{TemplateID: "tpl_away"}, code: apierr.CodeServiceUnavailable},
		{name: "its node is gone, an artifact to copy", in: sitespec.Create{TemplateID: "tpl_copyable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, state.PlanPaid)
			addTemplates(t, w)
			tt.in.Workspace, tt.in.By = w.ws, w.acct
			site, jobID, err := w.svc.Create(context.Background(), tt.in)
			sites, _ := w.store.SitesOf(w.ws.ID)
			if tt.code != "" {
				var ae *apierr.Error
				if code(err) != tt.code || (tt.field != "" && (!errors.As(err, &ae) || ae.Details["field"] != tt.field)) {
					t.Fatalf("err %v, want %s field %q", err, tt.code, tt.field)
				}
				if len(sites) != 0 {
					t.Fatalf("a refused create left %d sites", len(sites))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			job, _ := w.store.Job(jobID)
			var p jobspec.CreatePayload
			if job == nil || json.Unmarshal(job.Payload, &p) != nil || p.TemplateID != tt.in.TemplateID {
				t.Fatalf("job %+v", job)
			}
			if site.TemplateID != tt.in.TemplateID || site.NodeID != "node_1" || site.PHPVersion != "8.2" {
				t.Fatalf("site %+v", site)
			}
			if tt.in.TemplateID == "tpl_ready" && (site.Name != "Shop" || !strings.HasPrefix(site.Slug, "shop-")) {
				t.Fatalf("site %+v", site)
			}
		})
	}
}

// TestRestore: a ready site takes a ready template of its workspace held
// on its node; the site is creating and made from it until the job ends.
func TestRestore(t *testing.T) {
	tests := []struct {
		name     string
		template string
		creating bool
		code     string
	}{
		{name: "ready", template: "tpl_ready"},
		{name: "no template", template: "", code: apierr.CodeInvalidRequest},
		{name: "unknown", template: "tpl_none", code: apierr.CodeTemplateNotFound},
		{name: "another workspace's", template: "tpl_bobs", code: apierr.CodeTemplateNotFound},
		{name: "building", template: "tpl_building", code: apierr.CodeInvalidRequest},
		{name: "on another node, no artifact", template: "tpl_away", code: apierr.CodeInvalidRequest},
		{name: "on another node, an artifact to copy", template: "tpl_copyable"},
		{name: "site not ready", template: "tpl_ready", creating: true, code: apierr.CodeInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, state.PlanPaid)
			addTemplates(t, w)
			site := readySite(t, w)
			if !tt.creating {
				if _, err := fsm.NewLocal(w.store).Apply(context.Background(), fsm.UpdateSite{Update: state.SiteUpdate{ID: site.ID, Status: state.SiteReady}}); err != nil {
					t.Fatal(err)
				}
			} else {
				site.Status = state.SiteCreating
			}
			before, _ := w.store.Site(site.ID)
			next, jobID, err := w.svc.Restore(context.Background(), nil, site, tt.template)
			after, _ := w.store.Site(site.ID)
			if tt.code != "" {
				if code(err) != tt.code {
					t.Fatalf("err %v, want %s", err, tt.code)
				}
				if after.Status != before.Status || after.TemplateID != before.TemplateID || !after.UpdatedAt.Equal(before.UpdatedAt) {
					t.Fatalf("a refused restore changed the site: %+v", after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			job, _ := w.store.Job(jobID)
			var p jobspec.TemplatePayload
			if job == nil || job.Type != jobspec.RestoreSite || json.Unmarshal(job.Payload, &p) != nil || p.TemplateID != tt.template {
				t.Fatalf("job %+v", job)
			}
			if next.Status != state.SiteCreating || after.Status != state.SiteCreating || after.TemplateID != tt.template || after.URL != site.URL {
				t.Fatalf("answer %+v, stored %+v", next, after)
			}
		})
	}
}

func readySite(t *testing.T, w *world) *state.Site {
	t.Helper()
	site, _, err := w.svc.Create(context.Background(), sitespec.Create{Workspace: w.ws, By: w.acct})
	if err != nil {
		t.Fatal(err)
	}
	next := *site
	next.Status = state.SiteReady
	return &next
}

// TestToolsNeedAReadySite: a site that is not ready is refused before
// its node is asked anything.
func TestToolsNeedAReadySite(t *testing.T) {
	w := newWorld(t, state.PlanPaid)
	agent := &fakeAgent{}
	w.nodes.agent = agent
	site := readySite(t, w)
	site.Status = state.SiteCreating
	_, err := w.svc.Debug(context.Background(), site)
	if code(err) != apierr.CodeInvalidRequest || !strings.Contains(err.Error(), "creating") {
		t.Fatalf("debug of a creating site: %v", err)
	}
	if _, _, err := w.svc.Reset(context.Background(), nil, site); code(err) != apierr.CodeInvalidRequest {
		t.Fatalf("reset of a creating site: %v", err)
	}
	if agent.calls != 0 {
		t.Fatalf("the agent was called %d times", agent.calls)
	}
}

// TestAgentFailuresBecomeContractErrors: what an agent answers, or
// fails with, reaches the client as the contract's codes.
func TestAgentFailuresBecomeContractErrors(t *testing.T) {
	tests := []struct {
		name   string
		answer *agentv1.FilesResponse
		err    error
		code   string
		status int
	}{
		{name: "agent lost the site", err: connect.NewError(connect.CodeNotFound, errors.New("x")), code: apierr.CodeServiceUnavailable, status: 503},
		{name: "agent refused the input", err: connect.NewError(connect.CodeInvalidArgument, errors.New("bad path")), code: apierr.CodeInvalidRequest, status: 400},
		{name: "agent down", err: connect.NewError(connect.CodeUnavailable, errors.New("x")), code: apierr.CodeServiceUnavailable, status: 503},
		{name: "missing file", answer: &agentv1.FilesResponse{ErrorCode: "not_found", ErrorMessage: "no such file"}, code: sitespec.CodeFileNotFound, status: 404},
		{name: "exists", answer: &agentv1.FilesResponse{ErrorCode: "conflict", ErrorMessage: "exists"}, code: apierr.CodeConflict, status: 409},
		{name: "too large", answer: &agentv1.FilesResponse{ErrorCode: "too_large", ErrorMessage: "big"}, code: apierr.CodePayloadTooLarge, status: 413},
		{name: "disk full", answer: &agentv1.FilesResponse{ErrorCode: "disk_full", ErrorMessage: "1024 of 1024 MiB used"}, code: apierr.CodePlanLimitReached, status: 402},
		{name: "other refusal", answer: &agentv1.FilesResponse{ErrorCode: "invalid", ErrorMessage: "no"}, code: apierr.CodeInvalidRequest, status: 400},
		{name: "success", answer: &agentv1.FilesResponse{Path: "a.txt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, state.PlanFree)
			w.nodes.agent = &fakeAgent{files: func(*agentv1.FilesRequest) (*agentv1.FilesResponse, error) { return tt.answer, tt.err }}
			out, err := w.svc.Files(context.Background(), readySite(t, w), sitespec.FileOp{Op: sitespec.FileRead, Path: "a.txt"})
			var ae *apierr.Error
			if tt.code == "" {
				if err != nil || out.Path != "a.txt" {
					t.Fatalf("%+v %v", out, err)
				}
				return
			}
			if !errors.As(err, &ae) || ae.Code != tt.code || ae.Status != tt.status {
				t.Fatalf("%v, want %s %d", err, tt.code, tt.status)
			}
			if tt.code == apierr.CodePlanLimitReached && (ae.Details["limit"] != 1024 || ae.Details["resource"] != plans.SiteDiskMB) {
				t.Errorf("disk-full details %v", ae.Details)
			}
		})
	}
}

// TestDeploySources: exactly one source; a Library entry of another
// workspace is not found; a private URL is refused before a job exists;
// an upload is checked and stored before its job names it.
func TestDeploySources(t *testing.T) {
	str := func(s string) *string { return &s }
	zip := wpzip.BuildPlugin("hello", "Hello", "1.0", "")
	tests := []struct {
		name string
		d    sitespec.Deploy
		code string
	}{
		{name: "nothing", d: sitespec.Deploy{}, code: apierr.CodeInvalidRequest},
		{name: "two sources", d: sitespec.Deploy{LibraryPlugin: str("x"), ZipURL: str("https://e.test/a.zip")}, code: apierr.CodeInvalidRequest},
		{name: "unknown entry", d: sitespec.Deploy{LibraryPlugin: str("nope")}, code: "plugin_library_entry_not_found"},
		{name: "private url", d: sitespec.Deploy{ZipURL: str("http://169.254.169.254/a.zip")}, code: apierr.CodeInvalidRequest},
		{name: "long url", d: sitespec.Deploy{ZipURL: str("https://e.test/" + strings.Repeat("a", maxZipURL))}, code: apierr.CodeInvalidRequest},
		{name: "empty upload", d: sitespec.Deploy{Upload: []byte{}}, code: apierr.CodeInvalidRequest},
		{name: "not a zip", d: sitespec.Deploy{Upload: []byte("hello")}, code: apierr.CodeInvalidRequest},
		{name: "url", d: sitespec.Deploy{ZipURL: str("https://e.test/a.zip")}},
		{name: "upload", d: sitespec.Deploy{Upload: zip, Activate: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, state.PlanPaid)
			site := readySite(t, w)
			before, _, _ := w.store.UnfinishedJobs()
			id, err := w.svc.Deploy(context.Background(), nil, site, tt.d)
			after, _, _ := w.store.UnfinishedJobs()
			if tt.code != "" {
				if code(err) != tt.code {
					t.Fatalf("%v, want %s", err, tt.code)
				}
				if len(after) != len(before) || len(w.zips.stored) != 0 {
					t.Fatalf("a refused deploy left a job or a ZIP behind")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			job, _ := w.store.Job(id)
			if job == nil || job.Type != jobspec.DeployPlugin {
				t.Fatalf("job %+v", job)
			}
			if tt.d.Upload != nil && (len(w.zips.stored) != 1 || !strings.Contains(string(job.Payload), strings.Repeat("f", 64))) {
				t.Fatalf("upload not stored before its job: %s", job.Payload)
			}
		})
	}
}

// TestMagicLoginLinkNeedsTheAgent: no link is handed out unless the
// agent took its hash.
func TestMagicLoginLinkNeedsTheAgent(t *testing.T) {
	w := newWorld(t, state.PlanPaid)
	w.nodes.agent = &fakeAgent{}
	site := readySite(t, w)
	w.nodes.agent = nil
	if _, err := w.svc.MagicLogin(context.Background(), site); code(err) != apierr.CodeServiceUnavailable {
		t.Fatalf("login without a reachable node: %v", err)
	}
}

// fakePools hands out one pooled site once.
type fakePools struct {
	site      *state.Site
	taken     []string
	released  []string
	discarded []string
	hits      int
	misses    int
}

func (f *fakePools) Take(key string) *state.Site {
	f.taken = append(f.taken, key)
	s := f.site
	f.site = nil
	return s
}
func (f *fakePools) Release(id string) { f.released = append(f.released, id) }
func (f *fakePools) Discard(_ context.Context, s *state.Site) {
	f.discarded = append(f.discarded, s.ID)
}
func (f *fakePools) Count(hit bool) {
	if hit {
		f.hits++
	} else {
		f.misses++
	}
}

func (f *fakeAgent) RenameSite(_ context.Context, r *connect.Request[agentv1.RenameSiteRequest]) (*connect.Response[agentv1.RenameSiteResponse], error) {
	f.calls++
	f.renamed = append(f.renamed, r.Msg)
	if f.renameErr != nil {
		return nil, f.renameErr
	}
	return connect.NewResponse(&agentv1.RenameSiteResponse{}), nil
}

// TestCreateClaimsAPooledSite: a create served from the pool renames the
// pooled site on its node and gives it to the workspace in one entry with
// a finished job; a rename that fails discards the pooled site and the
// create makes a site anew; an empty pool is a miss.
func TestCreateClaimsAPooledSite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		renameErr error
		empty     bool
	}{{name: "hit"}, {name: "rename fails", renameErr: connect.NewError(connect.CodeInternal, errors.New("boom"))}, {name: "empty pool", empty: true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, state.PlanPaid)
			agent := &fakeAgent{renameErr: tc.renameErr}
			w.nodes.agent = agent
			ctx := context.Background()
			pooled := state.Site{ID: "site_pooled1", WorkspaceID: state.PoolWorkspace, UserID: state.PoolWorkspace, Slug: "pool-abc",
				Status: state.SiteReady, URL: "http://pool-abc.sandbox.test", PHPVersion: "8.2", WordPressVersion: "6.1.1", NodeID: "node_1",
				Port: 8080, Address: "10.200.0.9", Pool: "php:8.2/disk:10240"}
			if err := w.store.Update(func(tx *state.Tx) error { return tx.CreateSite(pooled, state.Quota{}) }); err != nil {
				t.Fatal(err)
			}
			pools := &fakePools{site: &pooled}
			if tc.empty {
				pools.site = nil
			}
			w.svc.cfg.Pools = pools
			site, jobID, err := w.svc.Create(ctx, sitespec.Create{Workspace: w.ws, By: w.acct, Name: "Claimed"})
			if err != nil {
				t.Fatal(err)
			}
			if len(pools.taken) != 1 || pools.taken[0] != "php:8.2/disk:10240" {
				t.Fatalf("pool asked %v", pools.taken)
			}
			job, _ := w.store.Job(jobID)
			switch tc.name {
			case "hit":
				stored, _ := w.store.Site("site_pooled1")
				if site.ID != "site_pooled1" || site.Status != state.SiteReady || stored.WorkspaceID != w.ws.ID || stored.Pool != "" ||
					stored.Name != "Claimed" || !strings.HasPrefix(stored.Slug, "claimed-") || stored.URL != "http://"+stored.Slug+".sandbox.test" ||
					stored.Address != "10.200.0.9" || stored.Port != 8080 || stored.WordPressVersion != "6.1.1" {
					t.Fatalf("claimed %+v", stored)
				}
				if job == nil || job.Status != state.JobSucceeded || job.WorkspaceID != w.ws.ID || job.SiteID != site.ID {
					t.Fatalf("job %+v", job)
				}
				if len(agent.renamed) != 1 || agent.renamed[0].Url != stored.URL || agent.renamed[0].Name != "Claimed" || agent.renamed[0].AdminEmail != "a@x.io" {
					t.Fatalf("rename %+v", agent.renamed)
				}
				if pools.hits != 1 || len(pools.released) != 1 {
					t.Fatalf("hits %d released %v", pools.hits, pools.released)
				}
			default:
				if site.ID == "site_pooled1" || site.Status != state.SiteCreating || job == nil || job.Status != state.JobQueued || pools.misses != 1 {
					t.Fatalf("site %+v job %+v misses %d", site, job, pools.misses)
				}
				if tc.renameErr != nil && (len(pools.discarded) != 1 || pools.discarded[0] != "site_pooled1") {
					t.Fatalf("discarded %v", pools.discarded)
				}
			}
		})
	}
}

// TestPlanLifetime: a site made without expiresInMinutes gets its plan's
// lifetime (the free plan's week; none on the paid plan); an explicit
// value wins.
func TestPlanLifetime(t *testing.T) {
	ptr := func(n int) *int { return &n }
	for _, tc := range []struct {
		plan    string
		minutes *int
		want    time.Duration
	}{{state.PlanFree, nil, 7 * 24 * time.Hour}, {state.PlanPaid, nil, 0}, {state.PlanFree, ptr(30), 30 * time.Minute}, {state.PlanPaid, ptr(90), 90 * time.Minute}} {
		w := newWorld(t, tc.plan)
		now := time.Unix(1700000000, 0).UTC()
		w.svc.cfg.Now = func() time.Time { return now }
		site, _, err := w.svc.Create(context.Background(), sitespec.Create{Workspace: w.ws, By: w.acct, ExpiresInMinutes: tc.minutes})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.want == 0 && site.ExpiresAt != nil:
			t.Fatalf("%s: expires %v", tc.plan, site.ExpiresAt)
		case tc.want != 0 && (site.ExpiresAt == nil || !site.ExpiresAt.Equal(now.Add(tc.want))):
			t.Fatalf("%s %v: expires %v, want %v", tc.plan, tc.minutes, site.ExpiresAt, now.Add(tc.want))
		}
	}
}
