package jobs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// Job results as metric labels.
const (
	resultSucceeded   = "succeeded"
	resultFailed      = "failed"
	resultInterrupted = "interrupted" // leadership ended mid-run; the next leader runs it again
)

// unknownType labels a job whose type no runner handles, so a stray type
// in the store cannot add series.
const unknownType = "unknown"

// metrics are the dispatcher's job timings on this server (jobs run on
// the leader, so a fleet's are the sum over its servers).
type metrics struct {
	duration *prometheus.HistogramVec
	wait     *prometheus.HistogramVec
}

func newMetrics() *metrics {
	// From a second to an hour: a reset takes seconds, an import or a
	// Blueprint run minutes.
	buckets := []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	return &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sandboxd", Subsystem: "job", Name: "duration_seconds",
			Help:    "Time from a job's dispatch to its end, by job type and result (succeeded, failed, interrupted).",
			Buckets: buckets,
		}, []string{"type", "result"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sandboxd", Subsystem: "job", Name: "queue_wait_seconds",
			Help:    "Time a job waited queued before a worker took it, by job type.",
			Buckets: buckets,
		}, []string{"type"}),
	}
}

// typeLabel is a job's type when a runner handles it, else unknownType.
func (d *Dispatcher) typeLabel(jobType string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.runners[jobType]; ok {
		return jobType
	}
	return unknownType
}

// observeStart records how long j waited in the queue.
func (d *Dispatcher) observeStart(j *state.Job, now time.Time) {
	if !j.CreatedAt.IsZero() && j.Status == state.JobQueued {
		d.metrics.wait.WithLabelValues(d.typeLabel(j.Type)).Observe(max(0, now.Sub(j.CreatedAt).Seconds()))
	}
}

// observeEnd records a run's duration and result.
func (d *Dispatcher) observeEnd(j *state.Job, took time.Duration, result string) {
	d.metrics.duration.WithLabelValues(d.typeLabel(j.Type), result).Observe(took.Seconds())
}

// Describe and Collect make the dispatcher a Prometheus collector.
func (d *Dispatcher) Describe(ch chan<- *prometheus.Desc) {
	d.metrics.duration.Describe(ch)
	d.metrics.wait.Describe(ch)
}

// Collect reports the job timings.
func (d *Dispatcher) Collect(ch chan<- prometheus.Metric) {
	d.metrics.duration.Collect(ch)
	d.metrics.wait.Collect(ch)
}
