package cluster

import (
	"testing"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
)

func TestLastContact(t *testing.T) {
	tests := []struct {
		in   string
		want float64
	}{
		{"never", -1},
		{"", -1},
		{"0", 0},
		{"1.5s", 1.5},
		{"250ms", 0.25},
		{"garbage", -1},
	}
	for _, tt := range tests {
		if got := lastContact(tt.in); got != tt.want {
			t.Errorf("lastContact(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestRaftSink: raft's timings (in milliseconds) land in the histograms
// in seconds, its transitions in the counter; other keys and the legacy
// per-peer names are dropped.
func TestRaftSink(t *testing.T) {
	count := func(name string, labels map[string]string, c prometheus.Collector) float64 {
		v, _ := promtest.Value(t, name, labels, c)
		return v
	}
	tests := []struct {
		name   string
		send   func(s raftSink)
		metric string
		labels map[string]string
		c      prometheus.Collector
		delta  float64
	}{
		{"commit time", func(s raftSink) { s.AddSample([]string{"raft", "commitTime"}, 2) },
			"sandboxd_raft_commit_duration_seconds", nil, commitDuration, 1},
		{"batched FSM apply", func(s raftSink) { s.AddSample([]string{"raft", "fsm", "applyBatch"}, 0.3) },
			"sandboxd_raft_fsm_apply_duration_seconds", nil, fsmApplyDuration, 1},
		{"labelled heartbeat", func(s raftSink) {
			s.AddSampleWithLabels([]string{"raft", "replication", "heartbeat"}, 1, []gometrics.Label{{Name: "peer_id", Value: "server-2"}})
		}, "sandboxd_raft_replication_heartbeat_seconds", nil, heartbeatDuration, 1},
		{"legacy per-peer name", func(s raftSink) { s.AddSample([]string{"raft", "replication", "heartbeat", "server-2"}, 1) },
			"sandboxd_raft_replication_heartbeat_seconds", nil, heartbeatDuration, 0},
		{"heartbeat timeout", func(s raftSink) { s.IncrCounter([]string{"raft", "transition", "heartbeat_timeout"}, 1) },
			"sandboxd_raft_transitions_total", map[string]string{"reason": "heartbeat_timeout"}, transitions, 1},
		{"unmapped key", func(s raftSink) { s.IncrCounter([]string{"raft", "apply"}, 1) },
			"sandboxd_raft_transitions_total", map[string]string{"reason": "apply"}, transitions, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := count(tt.metric, tt.labels, tt.c)
			tt.send(raftSink{})
			if got := count(tt.metric, tt.labels, tt.c) - before; got != tt.delta {
				t.Fatalf("%s grew by %v, want %v", tt.metric, got, tt.delta)
			}
		})
	}
	// Milliseconds become seconds.
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "probe_seconds", Help: "p", Buckets: []float64{0.001, 0.01}})
	saved := raftTimers["raft.commitTime"]
	raftTimers["raft.commitTime"] = h
	defer func() { raftTimers["raft.commitTime"] = saved }()
	raftSink{}.AddSample([]string{"raft", "commitTime"}, 5)
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if sum := fams[0].GetMetric()[0].GetHistogram().GetSampleSum(); sum != 0.005 {
		t.Fatalf("5 ms observed as %v s", sum)
	}
}
