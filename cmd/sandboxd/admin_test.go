package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/sealingspec"
	"github.com/sandboxd/sandboxd/controlplane/server"
	"github.com/sandboxd/sandboxd/internal/seal"
)

// TestSealingKeyIDs: `admin sealing-key ids` names each key of a file or
// the variable by id and role, never by itself; a bad setting is refused.
func TestSealingKeyIDs(t *testing.T) {
	a, b := server.NewSealingKey(), server.NewSealingKey()
	file := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(file, []byte(b+"\n"+a+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, env string
		args      []string
		want      []string
		err       string
	}{
		{name: "file", args: []string{"--sealing-key-file", file}, want: []string{"1\t" + seal.KeyID(b) + "\tcurrent", "2\t" + seal.KeyID(a) + "\tprevious"}},
		{name: "variable", env: b + "," + a, want: []string{"1\t" + seal.KeyID(b) + "\tcurrent", "2\t" + seal.KeyID(a) + "\tprevious"}},
		{name: "short key", env: b + ",short", err: "sealing key 2 of 2 is too short"},
		{name: "none", err: "no sealing key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SANDBOXD_SEALING_KEY", tc.env)
			var out strings.Builder
			err := runAdmin(append([]string{"sealing-key", "ids"}, tc.args...), &out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if strings.Contains(out.String(), a) || strings.Contains(out.String(), b) {
				t.Error("a key in the output")
			}
		})
	}
}

// TestPrintRotation: the rotation's report says what happened, warns of
// values left unreadable, and gives the next step.
func TestPrintRotation(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    sealingspec.Rotation
		want []string
		not  []string
	}{
		{name: "done", r: sealingspec.Rotation{KeyID: "00aa", Resealed: 7, AlreadyCurrent: 2},
			want: []string{"resealed 7 values with key 00aa; 2 already were", "keep only the first key (id 00aa)", "reseal 0 values"},
			not:  []string{"NOT RESEALED"}},
		{name: "unreadable", r: sealingspec.Rotation{KeyID: "00aa", Resealed: 1, Unreadable: []sealingspec.Unreadable{{Kind: "edge-certificate", KeyID: "", Count: 2}}},
			want: []string{"NOT RESEALED: 2 edge-certificate values", "a key from before key ids", "re-enter those secrets"}},
		{name: "dry run", r: sealingspec.Rotation{KeyID: "00aa", Resealed: 3, DryRun: true},
			want: []string{"dry run: 3 values would be resealed with key 00aa"}, not: []string{"Next:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			printRotation(&out, tc.r)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("output has %q:\n%s", n, out.String())
				}
			}
		})
	}
}

// TestPrintCluster: the cluster's table shows every server with its
// address, vote, leadership, state, applied index and last contact, and
// why a server could not be asked.
func TestPrintCluster(t *testing.T) {
	ago := 0.25
	c := api.ClusterStatus{NodeID: "s1", LeaderID: "s1", Term: 4, Servers: []api.ClusterServer{
		{ID: "s1", RaftAddr: "127.0.0.1:7001", APIAddr: "http://127.0.0.1:8001", Voter: true, Leader: true,
			Status: &api.RaftStatus{ID: "s1", State: "Leader", AppliedIndex: 42}},
		{ID: "s2", RaftAddr: "127.0.0.1:7002", Voter: true,
			Status: &api.RaftStatus{ID: "s2", State: "Follower", AppliedIndex: 41, LastContactSeconds: &ago}},
		{ID: "s3", RaftAddr: "127.0.0.1:7003", Voter: false, Error: "did not answer: connection refused"},
		{ID: "s4", RaftAddr: "127.0.0.1:7004", Voter: true, Status: &api.RaftStatus{ID: "s4", State: "Follower", AppliedIndex: 42, LastContactSeconds: new(float64)}},
	}}
	var out strings.Builder
	printCluster(&out, c)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("want a header, 4 servers and a summary:\n%s", out.String())
	}
	for i, want := range [][]string{
		{"SERVER", "RAFT ADDRESS", "VOTER", "LEADER", "STATE", "APPLIED", "LAST CONTACT"},
		{"s1", "127.0.0.1:7001", "http://127.0.0.1:8001", "yes", "Leader", "42"},
		{"s2", "127.0.0.1:7002", "Follower", "41", "250ms ago"},
		{"s3", "127.0.0.1:7003", "no", "?", "unreachable: did not answer: connection refused"},
		{"s4", "<1ms ago"},
		{"leader s1, term 4; answered by s1"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d lacks %q: %q", i, w, lines[i])
			}
		}
	}
}
