package cluster

import (
	"strconv"
	"time"

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
	descContact  = prometheus.NewDesc("sandboxd_raft_last_contact_seconds",
		"Follower: seconds since the leader was last heard from (0 on the leader, -1 when never).", nil, nil)
	descLeader = prometheus.NewDesc("sandboxd_raft_has_leader", "1 when this node knows a leader, 0 during an election or a partition.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descTerm, descLast, descCommit, descApplied, descPeers, descSnapshot, descPending,
		descContact, descLeader} {
		ch <- d
	}
	for _, c := range raftCollectors() {
		c.Describe(ch)
	}
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
	ch <- prometheus.MustNewConstMetric(descContact, prometheus.GaugeValue, lastContact(st["last_contact"]))
	hasLeader := 0.0
	if c.n.LeaderID() != "" {
		hasLeader = 1
	}
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, hasLeader)
	for _, c := range raftCollectors() {
		c.Collect(ch)
	}
}

// lastContact reads raft's last_contact stat: "never", "0" on the
// leader, or a duration.
func lastContact(v string) float64 {
	switch v {
	case "never", "":
		return -1
	case "0":
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return -1
	}
	return d.Seconds()
}
