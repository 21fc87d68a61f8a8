package server_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/internal/pki"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// moveAgent is a node agent that keeps its sites' "content" as bytes:
// a snapshot streams them, a restore replaces them, so a test can follow
// data from node to node. It heartbeats (reporting its sites) while on.
type moveAgent struct {
	agentv1connect.UnimplementedAgentServiceHandler
	id  string
	url string
	mu  sync.Mutex
	// sites holds each site's files and database bytes.
	sites     map[string][2][]byte
	snapshots atomic.Int32
	restores  atomic.Int32
	deleted   []string
	on        atomic.Bool
	removeIDs chan []string
}

func (f *moveAgent) CreateSite(_ context.Context, req *connect.Request[agentv1.CreateSiteRequest]) (*connect.Response[agentv1.CreateSiteResponse], error) {
	f.mu.Lock()
	if _, ok := f.sites[req.Msg.SiteId]; !ok {
		f.sites[req.Msg.SiteId] = [2][]byte{[]byte("fresh files of " + req.Msg.SiteId), []byte("fresh db")}
	}
	f.mu.Unlock()
	return connect.NewResponse(&agentv1.CreateSiteResponse{WordpressVersion: "6.8.1",
		Status: &agentv1.SiteStatus{SiteId: req.Msg.SiteId, State: agentv1.SiteState_SITE_STATE_READY, Port: 8080, Address: "10.9.0." + f.id[len(f.id)-1:]}}), nil
}

func (f *moveAgent) DeleteSite(_ context.Context, req *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.DeleteSiteResponse], error) {
	f.mu.Lock()
	_, ok := f.sites[req.Msg.SiteId]
	delete(f.sites, req.Msg.SiteId)
	f.deleted = append(f.deleted, req.Msg.SiteId)
	f.mu.Unlock()
	return connect.NewResponse(&agentv1.DeleteSiteResponse{Existed: ok}), nil
}

func (f *moveAgent) SnapshotSite(_ context.Context, req *connect.Request[agentv1.SnapshotSiteRequest], stream *connect.ServerStream[agentv1.SnapshotChunk]) error {
	f.mu.Lock()
	c, ok := f.sites[req.Msg.SiteId]
	f.mu.Unlock()
	if !ok {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("no site %s", req.Msg.SiteId))
	}
	f.snapshots.Add(1)
	for part, data := range c {
		p := agentv1.SnapshotPart_SNAPSHOT_PART_FILES + agentv1.SnapshotPart(part)
		for off := 0; off < len(data); off += 3 { // small chunks: several messages a part
			if err := stream.Send(&agentv1.SnapshotChunk{Part: p, Data: data[off:min(off+3, len(data))]}); err != nil {
				return err
			}
		}
	}
	return stream.Send(&agentv1.SnapshotChunk{Done: true, FilesBytes: int64(len(c[0])), DatabaseBytes: int64(len(c[1])),
		TakenAtUnixMs: time.Now().UnixMilli()})
}

func (f *moveAgent) RestoreArchive(_ context.Context, stream *connect.ClientStream[agentv1.RestoreArchiveRequest]) (*connect.Response[agentv1.RestoreArchiveResponse], error) {
	var hdr *agentv1.RestoreHeader
	var data bytes.Buffer
	for stream.Receive() {
		if h := stream.Msg().Header; h != nil {
			hdr = h
		}
		data.Write(stream.Msg().Data)
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if hdr == nil || len(hdr.Parts) != 2 || hdr.Parts[0].Kind != "archive" || hdr.Parts[1].Kind != "sql" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("parts %v", hdr))
	}
	b := data.Bytes()
	n := hdr.Parts[0].Size
	f.mu.Lock()
	f.sites[hdr.SiteId] = [2][]byte{bytes.Clone(b[:n]), bytes.Clone(b[n:])}
	f.mu.Unlock()
	f.restores.Add(1)
	return connect.NewResponse(&agentv1.RestoreArchiveResponse{}), nil
}

func (f *moveAgent) content(site string) (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.sites[site]
	return string(c[0]), string(c[1])
}

func (f *moveAgent) has(site string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.sites[site]
	return ok
}

// startMoveAgent registers a fake node and heartbeats for it while on;
// heartbeats report its sites and remove what the control plane says.
func startMoveAgent(t *testing.T, ctx context.Context, s *server.Server, id string) *moveAgent {
	t.Helper()
	f := &moveAgent{id: id, sites: map[string][2][]byte{}, removeIDs: make(chan []string, 16)}
	f.url = serveAgent(t, f)
	reg := agentv1connect.NewRegistryServiceClient(st.Member(t, s, pki.RoleAgent, id).Client("", pki.RoleServer), s.ClusterURL())
	if _, err := reg.Register(ctx, connect.NewRequest(&agentv1.RegisterRequest{NodeId: id, Address: f.url, PhpVersions: []string{"8.2"},
		Capacity: &agentv1.Resources{MemoryMb: 64 << 10, Sites: 100}})); err != nil {
		t.Fatal(err)
	}
	f.on.Store(true)
	go func() {
		for ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			if !f.on.Load() {
				continue
			}
			hb := &agentv1.HeartbeatRequest{NodeId: id}
			f.mu.Lock()
			for site := range f.sites {
				hb.Sites = append(hb.Sites, &agentv1.SiteStatus{SiteId: site, State: agentv1.SiteState_SITE_STATE_READY})
			}
			f.mu.Unlock()
			resp, err := reg.Heartbeat(ctx, connect.NewRequest(hb))
			if err != nil {
				continue
			}
			if r := resp.Msg.RemoveSiteIds; len(r) > 0 {
				f.mu.Lock()
				for _, site := range r {
					delete(f.sites, site)
				}
				f.mu.Unlock()
				f.removeIDs <- r
			}
		}
	}()
	return f
}

func movesServer(t *testing.T) *server.Server {
	return st.Single(t, st.Options{Configure: func(c *server.Config) {
		c.HeartbeatInterval, c.NodeDownAfter = 50*time.Millisecond, 300*time.Millisecond
		c.RescheduleAfter, c.FleetTick, c.OrphanGrace = 500*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond
	}})
}

// TestRescheduleFromSnapshot: an operator's snapshot copies a site's
// files and database to the blob store; when its node is lost longer
// than RescheduleAfter, the site is restored on another node from it,
// same id and URL, and says how old its data is. A site with no
// snapshot waits for its node. The lost node, back, is told to remove
// its stale copy.
func TestRescheduleFromSnapshot(t *testing.T) {
	s := movesServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := startMoveAgent(t, ctx, s, "node-a")
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	op := st.Operator(t, s)
	mk := func(name string) (string, string) {
		r := alice.Do("POST", "/api/app/sites", map[string]any{"name": name}).Must(t, 202)
		waitJob(t, alice, r.Str("jobId"), "succeeded")
		return r.Str("site.id"), r.Str("site.url")
	}
	saved, url := mk("Saved")
	unsaved, _ := mk("Unsaved")
	b := startMoveAgent(t, ctx, s, "node-b")

	// Bad input first: no such site; a user's token.
	if r := op.Do("POST", "/api/app/sites/site_nope/snapshot", nil); r.Status != 404 {
		t.Fatalf("snapshot of an unknown site: %d", r.Status)
	}
	if r := alice.Do("POST", "/api/app/sites/"+saved+"/snapshot", nil); r.Status != 401 {
		t.Fatalf("a tenant took a snapshot: %d", r.Status)
	}
	a.mu.Lock()
	a.sites[saved] = [2][]byte{[]byte("files as of the snapshot"), []byte("database as of the snapshot")}
	a.mu.Unlock()
	job := op.Do("POST", "/api/app/sites/"+saved+"/snapshot", nil).Must(t, 202).Str("jobId")
	waitJob(t, alice, job, "succeeded")
	snaps := op.Do("GET", "/api/admin/sites/"+saved+"/snapshots", nil).Must(t, 200).List("snapshots")
	if len(snaps) != 1 || snaps[0]["filesBytes"] != float64(len("files as of the snapshot")) || snaps[0]["nodeId"] != "node-a" {
		t.Fatalf("snapshots: %v", snaps)
	}
	// What changes after the snapshot is what the loss costs.
	a.mu.Lock()
	a.sites[saved] = [2][]byte{[]byte("files changed later"), []byte("database changed later")}
	a.mu.Unlock()

	a.on.Store(false) // lost
	status := func(id string) *st.Response { return alice.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200) }
	st.WaitFor(t, 30*time.Second, "the saved site restored on node-b", func() bool {
		r := status(saved)
		return r.Str("site.status") == "ready" && r.Str("site.nodeId") == "node-b"
	})
	r := status(saved)
	if r.Str("site.url") != url || r.Get("site.restoredFromSnapshotAt") == nil || r.Str("site.restoredFromSnapshotAt") != snaps[0]["takenAt"] {
		t.Fatalf("restored site: %s (snapshot taken %v)", r.Raw, snaps[0]["takenAt"])
	}
	if files, db := b.content(saved); files != "files as of the snapshot" || db != "database as of the snapshot" {
		t.Fatalf("node-b holds %q %q", files, db)
	}
	// No snapshot: nothing to restore from; it waits, unavailable.
	time.Sleep(time.Second)
	if r := status(unsaved); r.Str("site.status") != "unavailable" || r.Str("site.nodeId") != "node-a" {
		t.Fatalf("a site with no snapshot: %s", r.Raw)
	}
	if b.has(unsaved) {
		t.Fatal("a site with no snapshot was made on node-b")
	}

	// node-a comes back: the unsaved site is served again, the saved
	// one's stale copy is removed there.
	a.on.Store(true)
	removed := st.Await(t, a.removeIDs, 30*time.Second, "node-a told to remove its stale copy")
	if len(removed) != 1 || removed[0] != saved {
		t.Fatalf("removed %v", removed)
	}
	st.WaitFor(t, 30*time.Second, "the unsaved site back on node-a", func() bool { return status(unsaved).Str("site.status") == "ready" })
	if !a.has(unsaved) || status(saved).Str("site.nodeId") != "node-b" {
		t.Fatal("node-a's own site was removed, or the moved one went back")
	}
}

// TestDrainMovesSites: draining a node moves each of its sites (live
// copy, then a short switch with the latest data) to another node, with
// the same id and URL; the drain reports each move's downtime; the old
// copies are removed and nothing new lands on the draining node.
func TestDrainMovesSites(t *testing.T) {
	s := movesServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := startMoveAgent(t, ctx, s, "node-a")
	alice := st.NewAccount(t, s, "alice@example.com", "paid")
	op := st.Operator(t, s)
	var ids []string
	for i := range 2 {
		r := alice.Do("POST", "/api/app/sites", map[string]any{"name": fmt.Sprint("Drained ", i)}).Must(t, 202)
		waitJob(t, alice, r.Str("jobId"), "succeeded")
		ids = append(ids, r.Str("site.id"))
		a.mu.Lock()
		a.sites[r.Str("site.id")] = [2][]byte{[]byte("files " + r.Str("site.id")), []byte("db " + r.Str("site.id"))}
		a.mu.Unlock()
	}
	b := startMoveAgent(t, ctx, s, "node-b")

	if r := op.Do("POST", "/api/admin/nodes/node-nope/drain", nil); r.Status != 404 {
		t.Fatalf("drain an unknown node: %d", r.Status)
	}
	if r := op.Do("GET", "/api/admin/nodes/node-b/drain", nil); r.Status != 404 {
		t.Fatalf("drain status of a node not draining: %d", r.Status)
	}
	if r := alice.Do("POST", "/api/admin/nodes/node-a/drain", nil); r.Status != 401 {
		t.Fatalf("a tenant drained a node: %d", r.Status)
	}
	d := op.Do("POST", "/api/admin/nodes/node-a/drain", nil).Must(t, 200)
	if d.Get("drain.remaining") != float64(2) {
		t.Fatalf("drain: %s", d.Raw)
	}
	// New sites go elsewhere meanwhile.
	r := alice.Do("POST", "/api/app/sites", map[string]any{"name": "During"}).Must(t, 202)
	if r.Str("site.nodeId") != "node-b" {
		t.Fatalf("a site placed on a draining node: %s", r.Raw)
	}
	var report *st.Response
	st.WaitFor(t, 60*time.Second, "the drain to finish", func() bool {
		report = op.Do("GET", "/api/admin/nodes/node-a/drain", nil).Must(t, 200)
		return report.Get("drain.remaining") == float64(0)
	})
	moves := report.List("drain.moves")
	if len(moves) != 2 {
		t.Fatalf("moves: %s", report.Raw)
	}
	for _, m := range moves {
		if m["status"] != "moved" || m["to"] != "node-b" || m["downtimeMs"] == nil || m["finishedAt"] == nil {
			t.Errorf("move: %v", m)
		}
		// A site counts as moved once it is served from node-b; its move
		// then removes the copy on node-a and ends.
		jobID, _ := m["jobId"].(string)
		waitJob(t, alice, jobID, "succeeded")
	}
	for _, id := range ids {
		site := alice.Do("GET", "/api/app/sites/"+id, nil).Must(t, 200)
		if site.Str("site.nodeId") != "node-b" || site.Str("site.status") != "ready" || site.Get("site.restoredFromSnapshotAt") != nil {
			t.Errorf("moved site: %s", site.Raw)
		}
		if files, db := b.content(id); files != "files "+id || db != "db "+id {
			t.Errorf("%s on node-b: %q %q", id, files, db)
		}
		if a.has(id) {
			t.Errorf("%s still on node-a", id)
		}
	}
	// Two snapshots a move (the live copy and the switch's), none left
	// on the drained node afterwards.
	if n := a.snapshots.Load(); n != 4 {
		t.Errorf("%d snapshots taken on node-a", n)
	}
	nodes := op.Do("GET", "/api/admin/nodes", nil).Must(t, 200).List("nodes")
	for _, n := range nodes {
		if n["id"] == "node-a" && (n["draining"] != true || n["sites"] != float64(0)) {
			t.Errorf("node-a after its drain: %v", n)
		}
	}
	op.Do("DELETE", "/api/admin/nodes/node-a/drain", nil).Must(t, 200)
	if r := op.Do("GET", "/api/admin/nodes/node-a/drain", nil); r.Status != 404 {
		t.Errorf("undrained node still draining: %d", r.Status)
	}
}
