// Package statemetrics exposes counts read from the replicated state as
// Prometheus gauges: sites by status, unfinished jobs by status and
// registered OAuth clients (against their cap). Every
// server reports the same values (its replica), so dashboards take the
// max over servers.
package statemetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// Store is what the collector reads.
type Store interface {
	AllSitesList() ([]*state.Site, error)
	UnfinishedJobList() ([]*state.Job, error)
	OAuthClientCount() (int, error)
}

var (
	descSites = prometheus.NewDesc("sandboxd_sites", "Sites by status (creating, ready, failed, deleting); pooled sites are in sandboxd_pool_sites.",
		[]string{"status"}, nil)
	descJobs    = prometheus.NewDesc("sandboxd_jobs", "Unfinished jobs by status (queued, running).", []string{"status"}, nil)
	descClients = prometheus.NewDesc("sandboxd_oauth_clients", "Registered OAuth clients (anyone may register one; capped by --oauth-max-clients).",
		nil, nil)
	descUp = prometheus.NewDesc("sandboxd_state_read_ok", "1 when the last scrape could read the state, 0 when it failed.", nil, nil)
)

// Collector reads the state on each scrape.
type Collector struct{ store Store }

// New returns a collector over store.
func New(store Store) *Collector { return &Collector{store: store} }

// FromStore adapts the state store to Store.
func FromStore(s *state.Store) Store { return storeAdapter{s} }

type storeAdapter struct{ s *state.Store }

func (a storeAdapter) AllSitesList() ([]*state.Site, error) {
	sites, _, err := a.s.AllSites()
	return sites, err
}

func (a storeAdapter) OAuthClientCount() (int, error) { return a.s.OAuthClientCount() }

func (a storeAdapter) UnfinishedJobList() ([]*state.Job, error) {
	jobs, _, err := a.s.UnfinishedJobs()
	return jobs, err
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSites
	ch <- descJobs
	ch <- descClients
	ch <- descUp
}

// Collect implements prometheus.Collector. Every known status is reported,
// zero included, so a status that empties shows 0 rather than vanishing.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ok := 1.0
	sites := map[string]int{state.SiteCreating: 0, state.SiteReady: 0, state.SiteFailed: 0, state.SiteDeleting: 0}
	if all, err := c.store.AllSitesList(); err == nil {
		for _, s := range all {
			if s.Pool == "" {
				sites[s.Status]++
			}
		}
	} else {
		ok = 0
	}
	jobs := map[string]int{state.JobQueued: 0, state.JobRunning: 0}
	if all, err := c.store.UnfinishedJobList(); err == nil {
		for _, j := range all {
			jobs[j.Status]++
		}
	} else {
		ok = 0
	}
	for status, n := range sites {
		ch <- prometheus.MustNewConstMetric(descSites, prometheus.GaugeValue, float64(n), status)
	}
	for status, n := range jobs {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(n), status)
	}
	if n, err := c.store.OAuthClientCount(); err == nil {
		ch <- prometheus.MustNewConstMetric(descClients, prometheus.GaugeValue, float64(n))
	} else {
		ok = 0
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, ok)
}
