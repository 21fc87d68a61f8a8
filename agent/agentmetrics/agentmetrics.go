// Package agentmetrics is a node agent's Prometheus metrics: its sites by
// state, container starts, and its registrations and heartbeats towards
// the control plane. No label names a site, an address or a token.
package agentmetrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sandboxd/sandboxd/internal/promreg"
)

// Site states, as the agent last reported them to the control plane.
const (
	SiteReady   = "ready"
	SiteStopped = "stopped"
	SiteFailed  = "failed" // should run, but its container does not
)

// Results of a call towards containerd or the control plane.
const (
	ResultOK    = "ok"
	ResultError = "error"
)

// Metrics are one agent's metrics, each in its own registry (two agents
// in one process, as in tests, keep theirs apart).
type Metrics struct {
	reg        *promreg.Registry
	starts     *prometheus.CounterVec
	startTime  prometheus.Histogram
	heartbeats *prometheus.CounterVec
	registers  *prometheus.CounterVec
	lastBeat   prometheus.Gauge
	undo       prometheus.Gauge
	undoEnded  prometheus.Counter
	memEnded   prometheus.Counter
	// prepared is what the last check left of the prepared XA
	// transactions; preparedRolledBack counts those it rolled back.
	prepared           prometheus.Gauge
	preparedRolledBack prometheus.Counter
	dbRestarts         *prometheus.CounterVec
	// wakes and wakeTime are sites woken from sleep; sleeps the steps
	// deeper; byDepth and memory what the last heartbeat counted.
	wakes    *prometheus.CounterVec
	wakeTime *prometheus.HistogramVec
	sleeps   *prometheus.CounterVec
	byDepth  *prometheus.GaugeVec
	memory   *prometheus.GaugeVec

	mu    sync.Mutex
	sites map[string]int
}

// Depths a site sleeps at, and the doors it is woken through (the
// labels of the sleep metrics; agent/sites names them).
var (
	Depths = []string{"awake", "dozing", "asleep"}
	Doors  = []string{"edge", "ssh", "api", "login", "node"}
)

var descSites = prometheus.NewDesc("sandboxd_agent_sites", "The node's sites by state (ready, stopped, failed) at the last heartbeat.",
	[]string{"state"}, nil)

// New returns an agent's metrics, registered with Go and process metrics.
func New() *Metrics {
	m := &Metrics{reg: promreg.New(), sites: map[string]int{SiteReady: 0, SiteStopped: 0, SiteFailed: 0},
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "container_starts_total",
			Help: "Site containers the agent asked containerd to run (create and start, or find running after a restart), by result.",
		}, []string{"result"}),
		startTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "container_start_duration_seconds",
			Help:    "Time containerd took to have a site's container running.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "heartbeats_total",
			Help: "Heartbeats the agent sent to the control plane, by result.",
		}, []string{"result"}),
		registers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "registrations_total",
			Help: "Registrations the agent attempted with the control plane, by result.",
		}, []string{"result"}),
		lastBeat: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "last_heartbeat_timestamp_seconds",
			Help: "Unix time of the last heartbeat the control plane accepted.",
		}),
		undo: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "db_undo_bytes",
			Help: "Undo log in use in the node's MariaDB, which every site shares (capped at --mariadb-system-max-mb).",
		}),
		undoEnded: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "db_transactions_ended_total",
			Help: "Site database connections the agent ended because their transactions held the shared undo log past half its cap.",
		}),
		memEnded: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "db_memory_connections_ended_total",
			Help: "Site database connections the agent ended because they held more of MariaDB's memory than one connection may (--mariadb-session-mem-mb).",
		}),
		prepared: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "db_prepared_transactions",
			Help: "Prepared XA transactions left in the node's MariaDB after the agent's last check: those of live connections and those it had no time for (counted up to 10000).",
		}),
		preparedRolledBack: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "db_prepared_rolled_back_total",
			Help: "Prepared XA transactions, left by sites without a connection, that the agent rolled back.",
		}),
		dbRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "db_restarts_total",
			Help: "Times the agent found the node's MariaDB stopped (a crash, the OOM killer) and started it again, by result.",
		}, []string{"result"}),
		wakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "site_wakes_total",
			Help: "Sleeping sites woken, by door (edge, ssh, api, login, node), the depth they slept at (dozing, asleep) and result.",
		}, []string{"door", "from", "result"}),
		wakeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "site_wake_seconds",
			Help:    "Time from a sleeping site's first request to its web server taking it (a thaw, or a start until Apache listens), by depth.",
			Buckets: []float64{.002, .005, .01, .025, .05, .1, .2, .4, .8, 1.6, 3.2, 6.4},
		}, []string{"from"}),
		sleeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "site_sleeps_total",
			Help: "Idle sites put one depth deeper (dozing: frozen, memory to compressed swap; asleep: processes stopped), by result.",
		}, []string{"to", "result"}),
		byDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "sites_by_depth",
			Help: "The node's running sites by how they sleep (awake, dozing, asleep) at the last heartbeat.",
		}, []string{"depth"}),
		memory: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sandboxd", Subsystem: "agent", Name: "site_memory_bytes",
			Help: "Host memory (RAM and swap, from their cgroups) the node's awake and dozing sites hold, at the last heartbeat.",
		}, []string{"depth"}),
	}
	for _, r := range []string{ResultOK, ResultError} {
		for _, from := range Depths[1:] {
			for _, door := range Doors {
				m.wakes.WithLabelValues(door, from, r)
			}
			m.sleeps.WithLabelValues(from, r)
		}
	}
	for _, d := range Depths {
		m.byDepth.WithLabelValues(d)
	}
	for _, d := range Depths[:2] {
		m.memory.WithLabelValues(d)
	}
	for _, r := range []string{ResultOK, ResultError} {
		m.starts.WithLabelValues(r)
		m.heartbeats.WithLabelValues(r)
		m.registers.WithLabelValues(r)
		m.dbRestarts.WithLabelValues(r)
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.starts, m.startTime, m.heartbeats, m.registers, m.lastBeat, m.undo, m.undoEnded, m.memEnded, m.prepared, m.preparedRolledBack, m.dbRestarts, sitesCollector{m},
		m.wakes, m.wakeTime, m.sleeps, m.byDepth, m.memory)
	return m
}

func result(err error) string {
	if err != nil {
		return ResultError
	}
	return ResultOK
}

// ContainerStarted records one container start and how long it took.
func (m *Metrics) ContainerStarted(took time.Duration, err error) {
	m.starts.WithLabelValues(result(err)).Inc()
	if err == nil {
		m.startTime.Observe(took.Seconds())
	}
}

// Heartbeat records one heartbeat's outcome at now.
func (m *Metrics) Heartbeat(now time.Time, err error) {
	m.heartbeats.WithLabelValues(result(err)).Inc()
	if err == nil {
		m.lastBeat.Set(float64(now.UnixNano()) / 1e9)
	}
}

// Registered records one registration attempt's outcome.
func (m *Metrics) Registered(err error) { m.registers.WithLabelValues(result(err)).Inc() }

// Undo records one check of the shared undo log: how much was in use and
// how many site connections were ended for holding it.
func (m *Metrics) Undo(usedBytes int64, ended int) {
	m.undo.Set(float64(usedBytes))
	m.undoEnded.Add(float64(ended))
}

// MemoryEnded records site connections ended for the memory they held.
func (m *Metrics) MemoryEnded(ended int) { m.memEnded.Add(float64(ended)) }

// Prepared records one check of the prepared XA transactions: how many
// were listed and how many were rolled back.
func (m *Metrics) Prepared(listed, rolledBack int) {
	m.prepared.Set(float64(listed - rolledBack))
	m.preparedRolledBack.Add(float64(rolledBack))
}

// Restarted records one restart of the node's MariaDB after it stopped.
func (m *Metrics) Restarted(err error) { m.dbRestarts.WithLabelValues(result(err)).Inc() }

// Sites records how many of the node's sites are in each state.
func (m *Metrics) Sites(byState map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range m.sites {
		m.sites[s] = byState[s]
	}
}

// Woke records one wake of a site from depth from, through door.
func (m *Metrics) Woke(from, door string, took time.Duration, err error) {
	m.wakes.WithLabelValues(door, from, result(err)).Inc()
	if err == nil {
		m.wakeTime.WithLabelValues(from).Observe(took.Seconds())
	}
}

// Slept records one step of a site to depth to.
func (m *Metrics) Slept(to string, err error) { m.sleeps.WithLabelValues(to, result(err)).Inc() }

// Depths records the sites by depth.
func (m *Metrics) Depths(awake, dozing, asleep int) {
	m.byDepth.WithLabelValues("awake").Set(float64(awake))
	m.byDepth.WithLabelValues("dozing").Set(float64(dozing))
	m.byDepth.WithLabelValues("asleep").Set(float64(asleep))
}

// DepthMemory records the memory the awake and the dozing sites hold.
func (m *Metrics) DepthMemory(awakeBytes, dozingBytes int64) {
	m.memory.WithLabelValues("awake").Set(float64(awakeBytes))
	m.memory.WithLabelValues("dozing").Set(float64(dozingBytes))
}

// Handler serves the metrics in the Prometheus format.
func (m *Metrics) Handler() http.Handler { return m.reg.Handler() }

// Names lists the metrics Handler may show.
func (m *Metrics) Names() []string { return m.reg.Names() }

// sitesCollector reports the site counts.
type sitesCollector struct{ m *Metrics }

func (c sitesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descSites }

func (c sitesCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	for s, n := range c.m.sites {
		ch <- prometheus.MustNewConstMetric(descSites, prometheus.GaugeValue, float64(n), s)
	}
}
