package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/pki"
)

func followers(servers []*server.Server, leader *server.Server) []*server.Server {
	var out []*server.Server
	for _, s := range servers {
		if s != leader {
			out = append(out, s)
		}
	}
	return out
}

func TestClusterWritesThroughFollowers(t *testing.T) {
	servers, _ := st.Cluster(t, 3, st.Options{})
	leader := st.Leader(t, servers)
	f := followers(servers, leader)

	// Operator writes through a follower are forwarded to the leader.
	alice := st.NewAccount(t, f[0], "alice@example.com", "paid")
	// A user token created through one follower works on every node.
	tok := st.NewClient(t, f[1].URL(), alice.Token).Do("POST", "/api/account/tokens", map[string]string{"name": "x"}).Must(t, 201)
	secret, id := tok.Str("secret"), tok.Str("token.id")
	for _, s := range servers {
		st.NewClient(t, s.URL(), secret).Do("GET", "/api/account/me", nil).Must(t, 200)
	}
	// Every node applies the writes.
	st.WaitFor(t, 10*time.Second, "replication", func() bool {
		for _, s := range servers {
			if tk, _ := s.Node().Store().Token(id); tk == nil {
				return false
			}
		}
		return true
	})
	// Revocation through a follower: once DELETE answers, no node accepts
	// the token, because every API request is served from the leader's
	// committed state.
	st.NewClient(t, f[0].URL(), alice.Token).Do("DELETE", "/api/account/tokens/"+id, nil).Must(t, 200)
	for _, s := range servers {
		if r := st.NewClient(t, s.URL(), secret).Do("GET", "/api/account/me", nil); r.Status != 401 {
			t.Fatalf("revoked token accepted by %s: %d", s.URL(), r.Status)
		}
	}
	// Health on each node names the same leader, by id (its addresses
	// are for operators: GET /api/admin/cluster).
	for _, s := range servers {
		h := st.NewClient(t, s.URL(), "").Do("GET", "/healthz", nil).Must(t, 200)
		if h.Str("leaderId") != leader.Node().ID() {
			t.Fatalf("%s reports leader %q, want %q", s.URL(), h.Str("leaderId"), leader.Node().ID())
		}
	}
}

// TestLeaderFailoverKeepsAcknowledgedWrites kills the leader while
// writers keep creating tokens through every node, then checks that a new
// leader is elected and every write that was acknowledged (201) exists on
// every surviving node.
// TestOperatorRemovesDeadServer kills the leader and has the operator
// take it out of the configuration. (Writes under repeated leader kills
// are e2e/failover_test.go's business, on real processes.)
func TestOperatorRemovesDeadServer(t *testing.T) {
	servers, _ := st.Cluster(t, 3, st.Options{})
	leader := st.Leader(t, servers)
	alice := st.NewAccount(t, leader, "alice@example.com", "paid")
	leader.Kill()
	survivors := followers(servers, leader)
	st.Leader(t, survivors)
	st.NewClient(t, survivors[0].URL(), alice.Token).DoSettled("POST", "/api/account/tokens", map[string]string{"name": "after"}).Must(t, 201)

	// The operator sees which one is dead, from a follower as well.
	op := st.NewClient(t, survivors[0].URL(), survivors[0].OperatorToken())
	var view struct{ Cluster api.ClusterStatus }
	if err := json.Unmarshal(op.DoSettled("GET", "/api/admin/cluster", nil).Must(t, 200).Raw, &view); err != nil {
		t.Fatal(err)
	}
	if len(view.Cluster.Servers) != 3 || view.Cluster.LeaderID == "" || view.Cluster.LeaderID == leader.Node().ID() {
		t.Fatalf("cluster view after the leader died: %+v", view.Cluster)
	}
	for _, sv := range view.Cluster.Servers {
		switch {
		case sv.ID == leader.Node().ID():
			if sv.Status != nil || sv.Error == "" || !sv.Voter {
				t.Errorf("the dead server is shown as answering: %+v", sv)
			}
		case sv.Status == nil || sv.Status.ID != sv.ID || sv.Status.AppliedIndex == 0 || sv.APIAddr == "":
			t.Errorf("a live server did not say what it sees: %+v %+v", sv, sv.Status)
		case sv.Leader != (sv.ID == view.Cluster.LeaderID) || sv.Leader != (sv.Status.State == "Leader"):
			t.Errorf("leadership shown wrongly: %+v %+v", sv, sv.Status)
		case !sv.Leader && sv.Status.LastContactSeconds == nil:
			t.Errorf("a follower has no last contact: %+v", sv.Status)
		}
	}

	// The operator takes the dead server out of the configuration.
	op.DoSettled("DELETE", "/api/admin/cluster/servers/"+leader.Node().ID(), nil).Must(t, 200)
	if r := op.Do("DELETE", "/api/admin/cluster/servers/server-unknown", nil).Must(t, 404); r.Code() != "not_found" {
		t.Fatal(r.Raw)
	}
	for _, s := range survivors {
		st.WaitFor(t, 10*time.Second, "the dead server to leave the configuration", func() bool {
			servers, _ := s.Node().Store().Servers()
			return len(servers) == 2 && s.Node().Stats()["num_peers"] == "1"
		})
	}
}

// TestIdempotencyKeySurvivesLeaderChange: the first answer to a keyed
// create is replicated with the change, so a retry after the leader died
// is answered by the new leader with the same bytes, and nothing is made
// twice.
func TestIdempotencyKeySurvivesLeaderChange(t *testing.T) {
	servers, _ := st.Cluster(t, 3, st.Options{})
	leader := st.Leader(t, servers)
	alice := st.NewAccount(t, leader, "alice@example.com", "paid")
	survivors := followers(servers, leader)
	c := st.NewClient(t, survivors[0].URL(), alice.Token)
	first := c.Do("POST", "/api/account/tokens", map[string]string{"name": "once"}, "Idempotency-Key", "deploy-42").Must(t, 201)
	leader.Kill()
	st.Leader(t, survivors)
	again := st.NewClient(t, survivors[1].URL(), alice.Token).
		Do("POST", "/api/account/tokens", map[string]string{"name": "once"}, "Idempotency-Key", "deploy-42").Must(t, 201)
	if string(again.Raw) != string(first.Raw) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after the leader change the retry answered\n%s\nnot\n%s", again.Raw, first.Raw)
	}
	if n := len(c.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens")); n != 2 {
		t.Fatalf("%d tokens, want 2", n)
	}
}

func fsmCreateJob(j state.Job) fsm.Command { return fsm.CreateJob{Job: j} }

// TestJobRedispatchedAfterLeaderChange starts a job whose runner blocks on
// the first leader, kills that leader, and expects the new leader to run
// the same job to completion.
func TestJobRedispatchedAfterLeaderChange(t *testing.T) {
	servers, _ := st.Cluster(t, 3, st.Options{})
	leader := st.Leader(t, servers)
	started := make(chan struct{}, 1)
	var runs atomic.Int64
	for _, s := range servers {
		first := s == leader
		s.Dispatcher().Register("test_slow", jobs.RunnerFunc(func(ctx context.Context, j *state.Job, _ func(int)) error {
			runs.Add(1)
			if first {
				started <- struct{}{}
				<-ctx.Done() // hangs until leadership is lost
				return ctx.Err()
			}
			return nil
		}))
	}
	alice := st.NewAccount(t, leader, "alice@example.com", "paid")
	j, err := jobs.New("test_slow", alice.Personal, "", map[string]string{"k": "v"}, time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Node().Apply(context.Background(), fsmCreateJob(j)); err != nil {
		t.Fatal(err)
	}
	st.Await(t, started, time.Minute, "the job to start on the first leader")
	leader.Kill()
	newLeader := st.Leader(t, followers(servers, leader))
	st.WaitFor(t, 20*time.Second, "the job to succeed on the new leader", func() bool {
		got, _ := newLeader.Node().Store().Job(j.ID)
		return got != nil && got.Status == state.JobSucceeded
	})
	got, _ := newLeader.Node().Store().Job(j.ID)
	// Two attempts at least (a further election on this loaded machine
	// may add one); every recorded attempt ran the job.
	if got.Attempts < 2 || int64(got.Attempts) != runs.Load() {
		t.Fatalf("attempts %d, runs %d; want at least 2 and equal", got.Attempts, runs.Load())
	}
}

// TestClusterRestartFromDisk stops all three servers and starts them
// again from their data dirs: state survives and writes work again.
func TestClusterRestartFromDisk(t *testing.T) {
	servers, cfgs := st.Cluster(t, 3, st.Options{})
	leader := st.Leader(t, servers)
	alice := st.NewAccount(t, leader, "alice@example.com", "paid")
	ws := alice.Do("POST", "/api/app/workspaces", map[string]string{"name": "Kept"}).Must(t, 201).Str("workspace.id")
	if err := leader.Node().Snapshot(); err != nil {
		t.Fatal(err)
	}
	alice.Do("POST", "/api/account/tokens", map[string]string{"name": "after snapshot"}).Must(t, 201)
	for _, s := range servers {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var again []*server.Server
	for _, cfg := range cfgs {
		again = append(again, st.Start(t, cfg))
	}
	l := st.Leader(t, again)
	c := st.NewClient(t, l.URL(), alice.Token)
	c.Do("GET", "/api/app/workspaces/"+ws, nil, "X-Service-Workspace", ws).Must(t, 200)
	if n := len(c.Do("GET", "/api/account/tokens", nil).Must(t, 200).List("tokens")); n != 2 {
		t.Fatalf("want 2 tokens after restart, got %d", n)
	}
	c.Do("POST", "/api/app/workspaces", map[string]string{"name": "New"}).Must(t, 201)
}

// TestSnapshotInstallOnNewMember compacts the leader's log, then adds a
// server: it can only catch up from the snapshot.
func TestSnapshotInstallOnNewMember(t *testing.T) {
	o := st.Options{Configure: func(c *server.Config) { c.RaftTrailingLogsForTests = 1 }}
	servers, cfgs := st.Cluster(t, 1, o)
	leader := servers[0]
	alice := st.NewAccount(t, leader, "alice@example.com", "paid")
	for i := 0; i < 20; i++ {
		alice.Do("POST", "/api/account/tokens", map[string]string{"name": fmt.Sprint(i)}).Must(t, 201)
	}
	if err := leader.Node().Snapshot(); err != nil {
		t.Fatal(err)
	}
	cfg := st.NodeConfig(t, t.TempDir(), st.FreeAddr(t), st.FreeAddr(t), cfgs[0].SealingKey, false, []string{leader.ClusterURL()}, o)
	cfg.NodeID = "server-new"
	cfg.JoinToken = st.JoinToken(t, leader, pki.RoleServer, cfg.NodeID)
	joiner := st.Start(t, cfg)
	// Raft restores the FSM before it records the installed snapshot, so
	// the state can be visible a moment before the stat is: wait for both.
	// A member that caught up from the log never records one (its own
	// snapshot threshold is far away), so this still fails if no snapshot
	// was sent.
	st.WaitFor(t, 20*time.Second, "the new member to install the leader's snapshot", func() bool {
		return joiner.Node().Stats()["last_snapshot_index"] != "0"
	})
	st.WaitFor(t, 20*time.Second, "the new member to catch up", func() bool {
		toks, _ := joiner.Node().Store().TokensOf(alice.ID)
		return len(toks) == 21
	})
}

// TestNoLeaderAnswers503 asks a server whose cluster lost its quorum:
// API requests get 503 service_unavailable with Retry-After, and health
// says there is no leader.
func TestNoLeaderAnswers503(t *testing.T) {
	servers, _ := st.Cluster(t, 2, st.Options{Configure: func(c *server.Config) { c.LeaderWait = 200 * time.Millisecond }})
	servers[0].Kill()
	s := servers[1]
	c := st.NewClient(t, s.URL(), "sbx_whatever")
	st.WaitFor(t, 20*time.Second, "the survivor to see no leader", func() bool { return s.Node().LeaderAPI() == "" })
	r := c.Do("GET", "/api/account/me", nil).Must(t, 503)
	if r.Code() != "service_unavailable" || r.Header.Get("Retry-After") == "" || r.Details() == nil {
		t.Fatalf("%v %s", r.Header, r.Raw)
	}
	if h := c.Do("GET", "/healthz", nil).Must(t, 503); h.Str("status") != "no_leader" {
		t.Fatal(h.Raw)
	}
	// The document and metrics are served locally all the same.
	c.Do("GET", "/api/openapi.json", nil).Must(t, 200)
	c.Do("GET", "/metrics", nil).Must(t, 200)
}
