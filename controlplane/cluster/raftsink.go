package cluster

import (
	"strings"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
)

// hashicorp/raft reports its own timings through go-metrics' global sink:
// the ones worth watching are forwarded to Prometheus. The sink is the
// process's, so these are per process: one server per process in
// production; in-process test clusters share them.
var (
	commitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sandboxd", Subsystem: "raft", Name: "commit_duration_seconds",
		Help:    "Leader: time from dispatching a log entry to its commit by a quorum (raft.commitTime).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	fsmApplyDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sandboxd", Subsystem: "raft", Name: "fsm_apply_duration_seconds",
		Help:    "Time the state machine takes to apply what one commit hands it: a batch of entries (raft.fsm.applyBatch) or one (raft.fsm.apply).",
		Buckets: prometheus.ExponentialBuckets(0.00005, 2, 14),
	})
	leaderContact = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sandboxd", Subsystem: "raft", Name: "leader_last_contact_seconds",
		Help:    "Leader: time since each follower was last heard from, sampled at every lease check (raft.leader.lastContact).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 13),
	})
	heartbeatDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sandboxd", Subsystem: "raft", Name: "replication_heartbeat_seconds",
		Help:    "Leader: round trip of a heartbeat to a follower (raft.replication.heartbeat).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
	})
	transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sandboxd", Subsystem: "raft", Name: "transitions_total",
		Help: "Raft state changes by reason: heartbeat_timeout (a follower lost its leader), leader_lease_timeout (a leader lost its quorum), and entering candidate or leader.",
	}, []string{"reason"})
)

// raftTimers maps go-metrics keys (joined with dots) to histograms; the
// values come in milliseconds.
var raftTimers = map[string]prometheus.Histogram{
	"raft.commitTime":            commitDuration,
	"raft.fsm.apply":             fsmApplyDuration,
	"raft.fsm.applyBatch":        fsmApplyDuration, // the FSM batches (fsm.FSM.ApplyBatch)
	"raft.leader.lastContact":    leaderContact,
	"raft.replication.heartbeat": heartbeatDuration,
}

// raftCounters maps go-metrics counter keys to transition reasons.
var raftCounters = map[string]string{
	"raft.transition.heartbeat_timeout":    "heartbeat_timeout",
	"raft.transition.leader_lease_timeout": "leader_lease_timeout",
	"raft.state.candidate":                 "candidate",
	"raft.state.leader":                    "leader",
}

var installSink sync.Once

// installRaftSink routes raft's go-metrics to the histograms above, once
// per process. Only the keys above get through go-metrics' filter, so the
// rest of raft's telemetry costs next to nothing.
func installRaftSink() {
	installSink.Do(func() {
		conf := gometrics.DefaultConfig("")
		conf.EnableHostname = false
		conf.EnableRuntimeMetrics = false // Prometheus' Go collector has them
		conf.EnableServiceLabel = false
		conf.TimerGranularity = time.Millisecond
		conf.FilterDefault = false
		for k := range raftTimers {
			conf.AllowedPrefixes = append(conf.AllowedPrefixes, k)
		}
		for k := range raftCounters {
			conf.AllowedPrefixes = append(conf.AllowedPrefixes, k)
		}
		_, _ = gometrics.NewGlobal(conf, raftSink{})
	})
}

// raftSink is a go-metrics sink that keeps only the keys mapped above.
type raftSink struct{}

func (raftSink) SetGauge([]string, float32)                              {}
func (raftSink) SetGaugeWithLabels([]string, float32, []gometrics.Label) {}
func (raftSink) EmitKey([]string, float32)                               {}
func (s raftSink) IncrCounter(key []string, val float32)                 { s.IncrCounterWithLabels(key, val, nil) }
func (s raftSink) AddSample(key []string, val float32)                   { s.AddSampleWithLabels(key, val, nil) }
func (raftSink) IncrCounterWithLabels(key []string, val float32, _ []gometrics.Label) {
	if reason, ok := raftCounters[strings.Join(key, ".")]; ok {
		transitions.WithLabelValues(reason).Add(float64(val))
	}
}

// AddSampleWithLabels drops the labels (a peer's id): the histograms are
// per server, whichever peer was measured.
func (raftSink) AddSampleWithLabels(key []string, val float32, _ []gometrics.Label) {
	if h, ok := raftTimers[strings.Join(key, ".")]; ok {
		h.Observe(float64(val) / 1000)
	}
}

// raftCollectors are the process-wide raft histograms and counters every
// server's registry exposes.
func raftCollectors() []prometheus.Collector {
	return []prometheus.Collector{applyDuration, commitDuration, fsmApplyDuration, leaderContact, heartbeatDuration, transitions}
}
