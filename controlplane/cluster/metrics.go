package cluster

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

var applyDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
	Namespace: "sandboxd", Subsystem: "raft", Name: "apply_duration_seconds",
	Help:    "Time from submitting a command to its commit and local apply.",
	Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
})

// Collector exposes a node's raft state as Prometheus metrics.
type Collector struct{ n *Node }

// NewCollector returns a collector for n; register it once per node.
func NewCollector(n *Node) *Collector { return &Collector{n: n} }

var (
	descState    = prometheus.NewDesc("sandboxd_raft_state", "1 for the node's current raft state.", []string{"state"}, nil)
	descTerm     = prometheus.NewDesc("sandboxd_raft_term", "Current raft term.", nil, nil)
	descLast     = prometheus.NewDesc("sandboxd_raft_last_log_index", "Index of the last log entry.", nil, nil)
	descCommit   = prometheus.NewDesc("sandboxd_raft_commit_index", "Highest committed index.", nil, nil)
	descApplied  = prometheus.NewDesc("sandboxd_raft_applied_index", "Highest index applied to the FSM.", nil, nil)
	descPeers    = prometheus.NewDesc("sandboxd_raft_peers", "Number of other voters known.", nil, nil)
	descSnapshot = prometheus.NewDesc("sandboxd_raft_last_snapshot_index", "Index of the last snapshot.", nil, nil)
	descPending  = prometheus.NewDesc("sandboxd_raft_fsm_pending", "Committed entries waiting for the FSM.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descTerm, descLast, descCommit, descApplied, descPeers, descSnapshot, descPending} {
		ch <- d
	}
	applyDuration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Stats()
	for _, s := range []string{"Leader", "Follower", "Candidate", "Shutdown"} {
		v := 0.0
		if st["state"] == s {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, s)
	}
	num := func(k string) float64 {
		f, _ := strconv.ParseFloat(st[k], 64)
		return f
	}
	ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, num("term"))
	ch <- prometheus.MustNewConstMetric(descLast, prometheus.GaugeValue, num("last_log_index"))
	ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, num("commit_index"))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, num("applied_index"))
	ch <- prometheus.MustNewConstMetric(descPeers, prometheus.GaugeValue, num("num_peers"))
	ch <- prometheus.MustNewConstMetric(descSnapshot, prometheus.GaugeValue, num("last_snapshot_index"))
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, num("fsm_pending"))
	applyDuration.Collect(ch)
}
