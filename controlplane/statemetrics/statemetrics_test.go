package statemetrics_test

import (
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/statemetrics"
	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
)

type fakeStore struct {
	sites   []*state.Site
	jobs    []*state.Job
	clients int
	err     error
}

func (f fakeStore) OAuthClientCount() (int, error) { return f.clients, f.err }

func (f fakeStore) AllSitesList() ([]*state.Site, error)     { return f.sites, f.err }
func (f fakeStore) UnfinishedJobList() ([]*state.Job, error) { return f.jobs, f.err }

func TestCollector(t *testing.T) {
	tests := []struct {
		name  string
		store fakeStore
		want  map[string]map[string]float64 // metric → status → value
		ok    float64
	}{
		{"empty state reports zeros", fakeStore{},
			map[string]map[string]float64{"sandboxd_sites": {"creating": 0, "ready": 0, "failed": 0, "deleting": 0},
				"sandboxd_jobs": {"queued": 0, "running": 0}}, 1},
		{"counts by status, pooled sites left to the pool's metrics", fakeStore{
			sites: []*state.Site{{Status: state.SiteReady}, {Status: state.SiteReady}, {Status: state.SiteFailed},
				{Status: state.SiteReady, Pool: "php:8.2/disk:10240"}},
			jobs:    []*state.Job{{Status: state.JobQueued}, {Status: state.JobRunning}, {Status: state.JobRunning}},
			clients: 3},
			map[string]map[string]float64{"sandboxd_sites": {"ready": 2, "failed": 1, "creating": 0},
				"sandboxd_jobs": {"queued": 1, "running": 2}}, 1},
		{"a failed read says so", fakeStore{err: errors.New("closed")},
			map[string]map[string]float64{"sandboxd_sites": {"ready": 0}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := statemetrics.New(tt.store)
			for metric, byStatus := range tt.want {
				for status, want := range byStatus {
					if got, ok := promtest.Value(t, metric, map[string]string{"status": status}, c); !ok || got != want {
						t.Errorf("%s{status=%q} = %v (present %v), want %v", metric, status, got, ok, want)
					}
				}
			}
			if got, _ := promtest.Value(t, "sandboxd_oauth_clients", nil, c); tt.ok == 1 && got != float64(tt.store.clients) {
				t.Errorf("oauth clients %v, want %d", got, tt.store.clients)
			}
			if got, _ := promtest.Value(t, "sandboxd_state_read_ok", nil, c); got != tt.ok {
				t.Errorf("read_ok %v, want %v", got, tt.ok)
			}
		})
	}
}
