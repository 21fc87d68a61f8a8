package nodes

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// Heartbeat results as metric labels.
const (
	heartbeatOK      = "ok"
	heartbeatUnknown = "unknown_node" // the agent re-registers
	heartbeatError   = "error"
)

var (
	descNodes = prometheus.NewDesc("sandboxd_nodes", "Registered node agents by status (ready, down), from the replicated state.",
		[]string{"status"}, nil)
	descAge = prometheus.NewDesc("sandboxd_node_heartbeat_age_seconds",
		"Seconds since this server last heard a node's heartbeat, per node; only the server agents heartbeat to (the leader) has them.",
		[]string{"node"}, nil)
)

// registryMetrics are the registry's counters.
type registryMetrics struct {
	heartbeats    *prometheus.CounterVec
	registrations prometheus.Counter
}

func newRegistryMetrics() registryMetrics {
	m := registryMetrics{
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "node", Name: "heartbeats_total",
			Help: "Agent heartbeats this server received, by result (ok, unknown_node, error).",
		}, []string{"result"}),
		registrations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "node", Name: "registrations_total",
			Help: "Agent registrations this server recorded.",
		}),
	}
	for _, result := range []string{heartbeatOK, heartbeatUnknown, heartbeatError} {
		m.heartbeats.WithLabelValues(result) // every result is a series from the start, for rate()
	}
	return m
}

// forgetHeartbeats drops the heartbeat times when this server stops
// leading: agents heartbeat to the new leader, and ages kept here would
// only grow.
func (r *Registry) forgetHeartbeats() {
	r.mu.Lock()
	clear(r.lastSeen)
	clear(r.orphans) // a later term starts their grace afresh
	r.mu.Unlock()
}

// Describe and Collect make the registry a Prometheus collector: nodes by
// status, heartbeat counts and each node's heartbeat age. Node ids are
// the operator's machines, a bounded label; addresses are never shown.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	ch <- descNodes
	ch <- descAge
	r.metrics.heartbeats.Describe(ch)
	r.metrics.registrations.Describe(ch)
}

// Collect reports the registry's metrics.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{state.NodeReady: 0, state.NodeDown: 0}
	nodes, err := r.cfg.Store.Nodes()
	if err == nil {
		for _, n := range nodes {
			counts[n.Status]++
		}
	}
	for status, n := range counts {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(n), status)
	}
	now := r.now()
	r.mu.Lock()
	for _, n := range nodes {
		if seen, ok := r.lastSeen[n.ID]; ok {
			ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, max(0, now.Sub(seen).Seconds()), n.ID)
		}
	}
	r.mu.Unlock()
	r.metrics.heartbeats.Collect(ch)
	r.metrics.registrations.Collect(ch)
}
