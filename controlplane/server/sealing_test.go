package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/server"
	st "github.com/sandboxd/sandboxd/controlplane/servertest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/seal"
	"github.com/sandboxd/sandboxd/internal/wpzip"
	edgev1 "github.com/sandboxd/sandboxd/protocol/edge/v1"
	"github.com/sandboxd/sandboxd/protocol/edge/v1/edgev1connect"
)

// sealedFixture is one value of every kind of sealed secret, made
// through the API, and how to read each back through it.
type sealedFixture struct {
	t          *testing.T
	alice      *st.Account
	agent      *gitAgent
	receiver   *receiver
	edge       edgev1connect.CertStorageServiceClient
	url        string // any server's API: requests go to the leader
	license    string
	replayKey  string
	replay     []byte // the first answer, with a new token's secret
	gitToken   string
	repo       string
	sshRepo    string
	gitHook    string
	gitSecret  string
	hookSecret string
	certKey    string
	certValue  []byte
}

func newSealedFixture(t *testing.T, leader *server.Server, rcv *receiver) *sealedFixture {
	t.Helper()
	f := &sealedFixture{t: t, receiver: rcv, url: leader.URL(), license: "LIC-rotate-0123-4567", replayKey: "rotation-replay-1",
		gitToken: "ghp_rotate-token-never-shown", certKey: "certificates/acme/rotate.example/rotate.example.key",
		certValue: []byte("-----BEGIN EC PRIVATE KEY-----\nrotate\n-----END EC PRIVATE KEY-----\n")}
	f.alice = st.NewAccount(t, leader, "rotate@example.com", "paid")

	// A Library entry with a license key.
	body, ct := st.Multipart(map[string]string{"licenseKey": f.license}, "file", "rotate.zip", wpzip.BuildPlugin("rotate", "Rotate", "1", ""))
	f.alice.Do("POST", "/api/app/plugin-library", body, "Content-Type", ct).Must(t, 201)
	// An idempotent replay record (its answer holds a token's secret).
	f.replay = f.alice.Do("POST", "/api/account/tokens", map[string]string{"name": "replayed"}, "Idempotency-Key", f.replayKey).Must(t, 201).Raw
	// A webhook and its signing secret.
	f.hookSecret = f.alice.Do("PUT", "/api/account/webhooks/demo-launches", map[string]any{"url": rcv.srv.URL + "/hooks"}).Must(t, 200).Str("signingSecret")
	rcv.setSecret(f.hookSecret)
	// Git repositories: one with a token (and its push webhook's
	// secret), one with a deploy key.
	f.agent = &gitAgent{sha: strings.Repeat("a", 40)}
	f.agent.url = serveAgent(t, f.agent)
	if _, err := leader.Node().Apply(context.Background(), fsm.UpsertNode{Node: state.Node{ID: "node-fake", Address: f.agent.url,
		BackendHost: "127.0.0.1", PHPVersions: []string{"8.2"}, Status: state.NodeReady, MemoryMB: 64 << 10, MaxSites: 100}}); err != nil {
		t.Fatal(err)
	}
	made := f.alice.Do("POST", "/api/app/sites", map[string]any{"name": "Rotate"}).Must(t, 202)
	waitJob(t, f.alice, made.Str("jobId"), "succeeded")
	base := "/api/app/sites/" + made.Str("site.id") + "/repositories"
	r := f.alice.Do("POST", base, map[string]any{"repoUrl": "https://127.0.0.1/acme/rotate.git", "destination": "plugin", "token": f.gitToken}).Must(t, 201)
	f.repo, f.gitHook, f.gitSecret = base+"/"+r.Str("repository.id"), r.Str("webhookUrl"), r.Str("webhookSecret")
	f.sshRepo = base + "/" + f.alice.Do("POST", base, map[string]any{"repoUrl": "git@127.0.0.1:acme/theme.git", "destination": "theme",
		"authKind": "ssh", "autoDeploy": false}).Must(t, 201).Str("repository.id")
	// An edge's certificate storage value.
	creds := st.Member(t, leader, pki.RoleEdge, "edge-rotate")
	f.edge = edgev1connect.NewCertStorageServiceClient(creds.Client("", pki.RoleServer), leader.ClusterURL())
	if _, err := f.edge.PutCert(context.Background(), connect.NewRequest(&edgev1.PutCertRequest{Key: f.certKey, Value: f.certValue})); err != nil {
		t.Fatal(err)
	}
	return f
}

// check reads every secret back through the API (the Library license
// through MCP, the replay by repeating the request, the webhook secret
// by a signed test delivery, Git secrets by deploys and a signed push,
// the certificate through the edges' service, the CA by a join) and
// fails unless each is what was put in.
func (f *sealedFixture) check(servers []*server.Server, round string) {
	t := f.t
	t.Helper()
	leader := st.Leader(t, servers)
	alice := st.NewClient(t, leader.URL(), f.alice.Token)

	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	sess, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: leader.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: st.Bearer{Token: f.alice.Token}}}, nil)
	if err != nil {
		t.Fatalf("%s: MCP: %v", round, err)
	}
	res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "service_get_plugin_license", Arguments: map[string]any{"plugin": "rotate"}})
	sess.Close()
	if out, _ := json.Marshal(res.StructuredContent); err != nil || res.IsError || !bytes.Contains(out, []byte(f.license)) {
		t.Fatalf("%s: the license key: %v %s", round, err, out)
	}

	if again := alice.Do("POST", "/api/account/tokens", map[string]string{"name": "replayed"}, "Idempotency-Key", f.replayKey).Must(t, 201); !bytes.Equal(again.Raw, f.replay) {
		t.Fatalf("%s: the replayed answer changed:\n%s\n%s", round, f.replay, again.Raw)
	}

	n := len(f.receiver.deliveries())
	alice.Do("POST", "/api/account/webhooks/demo-launches/test", nil).Must(t, 200)
	if got := f.receiver.deliveries(); len(got) != n+1 || !got[n].verified {
		t.Fatalf("%s: the test delivery was not signed with the webhook's secret: %+v", round, got)
	}

	job := alice.Do("POST", f.repo+"/deploy", nil).Must(t, 202).Str("jobId")
	waitJob(t, f.alice, job, "succeeded")
	if d := f.agent.last(); d.Token != f.gitToken {
		t.Fatalf("%s: the deploy's token: %q", round, d.Token)
	}
	job = alice.Do("POST", f.sshRepo+"/deploy", nil).Must(t, 202).Str("jobId")
	waitJob(t, f.alice, job, "succeeded")
	if d := f.agent.last(); !strings.Contains(string(d.SshKey), "OPENSSH PRIVATE KEY") {
		t.Fatalf("%s: the deploy key: %d bytes", round, len(d.SshKey))
	}
	push := pushBody("feature", strings.Repeat("c", 40))
	if code, out := hook(t, f.gitHook, githubHeaders(f.gitSecret, push, "d-"+round), push); code != 200 || out["ignored"] == nil {
		t.Fatalf("%s: a push signed with the repository's webhook secret: %d %v", round, code, out)
	}

	got, err := f.edge.GetCert(context.Background(), connect.NewRequest(&edgev1.CertKeyRequest{Key: f.certKey}))
	if err != nil || !bytes.Equal(got.Msg.Value, f.certValue) {
		t.Fatalf("%s: the certificate storage value: %v", round, err)
	}

	st.Member(t, leader, pki.RoleAgent, "node-"+round) // the leader signs with the CA's key
}

// health is a server's /healthz.
func health(t *testing.T, s *server.Server) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(s.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// latestSnapshot restores the newest Raft snapshot in a server's data
// dir into a store of its own.
func latestSnapshot(t *testing.T, dataDir string) *state.Store {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(dataDir, "raft", "snapshots", "*", "state.bin"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no snapshot in %s: %v", dataDir, err)
	}
	sort.Slice(dirs, func(i, j int) bool {
		a, _ := os.Stat(dirs[i])
		b, _ := os.Stat(dirs[j])
		return a.ModTime().Before(b.ModTime())
	})
	f, err := os.Open(dirs[len(dirs)-1])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	store := state.NewStore()
	if err := store.Restore(f); err != nil {
		t.Fatal(err)
	}
	return store
}

// TestSealingKeyRotation puts one secret of every sealed kind in a
// three-server cluster, gives every server a new key (first) with the old
// one after it, rotates, and checks: every secret reads back the same
// through the API; the leader's Raft snapshot holds no value sealed with
// the old key; a second rotation reseals nothing; without the old key
// everything still works; a server given only the old key says clearly
// that it cannot open the cluster's values.
func TestSealingKeyRotation(t *testing.T) {
	rcv := newReceiver(t)
	o := st.Options{Configure: func(c *server.Config) {
		c.WebhookRoots = rcv.roots()
		c.FetchAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		c.HeartbeatInterval = time.Hour // the fake agent sends none
	}}
	servers, cfgs := st.Cluster(t, 3, o)
	keyA, keyB := cfgs[0].SealingKey, server.NewSealingKey()
	idA, idB := seal.KeyID(keyA), seal.KeyID(keyB)
	leader := st.Leader(t, servers)
	op := st.Operator(t, leader)

	// Bad requests: one key is nothing to rotate; unknown fields.
	if r := op.Do("POST", "/api/admin/sealing-key/rotate", map[string]any{}); r.Status != 409 || !strings.Contains(string(r.Raw), "nothing to rotate") {
		t.Fatalf("rotate with one key: %d %s", r.Status, r.Raw)
	}
	if r := op.Do("POST", "/api/admin/sealing-key/rotate", map[string]any{"force": true}); r.Status != 400 || r.Code() != "invalid_request" {
		t.Fatalf("unknown field: %d %s", r.Status, r.Raw)
	}
	if r := st.NewClient(t, leader.URL(), "").Do("POST", "/api/admin/sealing-key/rotate", map[string]any{}); r.Status != 401 {
		t.Fatalf("no operator token: %d %s", r.Status, r.Raw)
	}

	f := newSealedFixture(t, leader, rcv)
	f.check(servers, "before")

	restart := func(i int, keys string) {
		t.Helper()
		if err := servers[i].Close(); err != nil {
			t.Fatal(err)
		}
		cfgs[i].SealingKey = keys
		servers[i] = st.Start(t, cfgs[i])
		st.WaitFor(t, 30*time.Second, cfgs[i].NodeID+" to rejoin", func() bool { return servers[i].Node().LeaderID() != "" })
	}
	// B first, A after, on every server in turn. Until all have it, a
	// rotation is refused (by a leader with one key, or for the others).
	restart(0, keyB+"\n"+keyA)
	var r *st.Response
	st.WaitFor(t, 30*time.Second, "an answer past the election", func() bool {
		r = st.Operator(t, servers[1]).Do("POST", "/api/admin/sealing-key/rotate", map[string]any{})
		return r.Status != 503
	})
	if r.Status != 409 {
		t.Fatalf("rotate while servers lack the new key: %d %s", r.Status, r.Raw)
	}
	restart(1, keyB+","+keyA) // the variable's form
	restart(2, keyB+"\n"+keyA+"\n")
	leader = st.Leader(t, servers)
	op = st.Operator(t, leader)
	// A server just restarted answers once it has replayed the log up to
	// the cluster CA: wait for every server to say so.
	var status *st.Response
	ready := func() bool {
		status = op.Do("GET", "/api/admin/sealing-key", nil).Must(t, 200)
		for _, sv := range status.List("servers") {
			if fmt.Sprint(sv["keyIds"]) != fmt.Sprint([]any{idB, idA}) || sv["clusterCa"] != "ok" || sv["clusterCaKeyId"] != idA {
				return false
			}
		}
		return len(status.List("servers")) == 3
	}
	st.WaitFor(t, 30*time.Second, "every server to hold both keys and the cluster CA", func() bool {
		ok := ready()
		if !ok {
			t.Logf("keyrings before the rotation: %s", status.Raw)
		}
		return ok
	})
	if strings.Contains(string(status.Raw), keyA) || strings.Contains(string(status.Raw), keyB) {
		t.Fatal("a key in the keyring status")
	}

	values, err := leader.Node().Store().SealedValues()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, v := range values {
		kinds[v.Kind] = true
	}
	if len(kinds) != len(state.SealedKinds) {
		t.Fatalf("the fixture made %d kinds of sealed values, want all %d: %v", len(kinds), len(state.SealedKinds), kinds)
	}
	dry := op.Do("POST", "/api/admin/sealing-key/rotate", map[string]any{"dryRun": true}).Must(t, 200)
	if dry.Get("rotation.resealed") != float64(len(values)) || dry.Get("rotation.dryRun") != true {
		t.Fatalf("dry run: %s", dry.Raw)
	}
	rot := op.Do("POST", "/api/admin/sealing-key/rotate", map[string]any{}).Must(t, 200)
	if rot.Str("rotation.keyId") != idB || rot.Get("rotation.resealed") != float64(len(values)) || rot.Get("rotation.alreadyCurrent") != float64(0) ||
		len(rot.List("rotation.unreadable")) != 0 {
		t.Fatalf("rotation of %d values: %s", len(values), rot.Raw)
	}
	again := op.Do("POST", "/api/admin/sealing-key/rotate", map[string]any{}).Must(t, 200)
	if again.Get("rotation.resealed") != float64(0) || again.Get("rotation.alreadyCurrent") != float64(len(values)) {
		t.Fatalf("second rotation: %s", again.Raw)
	}
	f.check(servers, "rotated")

	// The leader's Raft snapshot: every value names key B.
	if err := leader.Node().Snapshot(); err != nil {
		t.Fatal(err)
	}
	for i := range servers {
		if servers[i] != leader {
			continue
		}
		snapped, err := latestSnapshot(t, cfgs[i].DataDir).SealedValues()
		if err != nil {
			t.Fatal(err)
		}
		if len(snapped) < len(values) {
			t.Fatalf("the snapshot holds %d sealed values, want %d or more", len(snapped), len(values))
		}
		for _, v := range snapped {
			if id := seal.SealedWith(v.Sealed); id != idB {
				t.Errorf("%s %q in the snapshot is sealed with %q, not B", v.Kind, v.ID, id)
			}
		}
	}

	// Remove A everywhere: everything still works.
	for i := range servers {
		restart(i, keyB)
	}
	f.check(servers, "b-only")
	for _, s := range servers {
		st.WaitFor(t, 10*time.Second, s.Node().ID()+"'s health to say its keys open the cluster's values", func() bool {
			code, h := health(t, s)
			return code == 200 && h["sealingKey"] == "ok"
		})
	}

	// A server given only A says so: an error log naming the keys, its
	// health, and the operator's keyring status.
	follower := 0
	for servers[follower] == st.Leader(t, servers) {
		follower++
	}
	var logs st.LogBuffer
	cfgs[follower].Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	restart(follower, keyA)
	st.WaitFor(t, 30*time.Second, "the mismatch to show in health", func() bool {
		code, h := health(t, servers[follower])
		return code == 503 && h["sealingKey"] == "mismatch" && h["status"] == "sealing_key_mismatch"
	})
	text := logs.String()
	if !strings.Contains(text, `"level":"ERROR"`) || !strings.Contains(text, "cannot open the cluster CA's key") ||
		!strings.Contains(text, idA) || !strings.Contains(text, "sealed with key "+idB) {
		t.Fatalf("the mismatch was not logged clearly:\n%s", text)
	}
	if strings.Contains(text, keyA) || strings.Contains(text, keyB) {
		t.Fatal("a sealing key in the logs")
	}
	status = st.Operator(t, st.Leader(t, servers)).Do("GET", "/api/admin/sealing-key", nil).Must(t, 200)
	found := false
	for _, sv := range status.List("servers") {
		if sv["server"] == cfgs[follower].NodeID {
			found = sv["clusterCa"] == "unreadable" && sv["clusterCaKeyId"] == idB && fmt.Sprint(sv["keyIds"]) == fmt.Sprint([]any{idA})
		}
	}
	if !found {
		t.Fatalf("the keyring status does not show the mismatch: %s", status.Raw)
	}
}

// TestSealingKeySetting: a keyring with an empty or short key, or the same
// key twice, stops the server at start, naming the key by position only.
func TestSealingKeySetting(t *testing.T) {
	good := server.NewSealingKey()
	for _, tc := range []struct{ setting, want string }{
		{good + "\n\n" + server.NewSealingKey(), "empty key"},
		{good + ",,", "empty key"},
		{good + ",too-short", "sealing key 2 of 2 is too short"},
		{good + "\n" + good, "same key"},
	} {
		cfg := server.DefaultConfig()
		cfg.DataDir, cfg.APIAddr, cfg.SealingKey = t.TempDir(), "127.0.0.1:0", tc.setting
		s, err := server.New(cfg)
		if err == nil {
			s.Close()
			t.Errorf("%q: started", tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), good) {
			t.Errorf("error %q, want one with %q and no key", err, tc.want)
		}
	}
}
