// Package promreg is a Prometheus registry that remembers the names of
// the metrics registered with it, so tests can check that dashboards and
// alert rules only use metrics the code really exposes (a family with no
// sample yet is absent from a scrape, so scraping cannot tell).
package promreg

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry is a prometheus.Registry that records what it registers.
type Registry struct {
	*prometheus.Registry

	mu    sync.Mutex
	names map[string]bool
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{Registry: prometheus.NewRegistry(), names: map[string]bool{}}
}

// Register registers c and records the metric names it describes.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return fmt.Errorf("register metrics %v: %w", Names(c), err)
	}
	names := Names(c)
	r.mu.Lock()
	for _, n := range names {
		r.names[n] = true
	}
	r.mu.Unlock()
	return nil
}

// MustRegister registers collectors and panics on the first error, as
// prometheus.Registry does (a duplicate is a programming error).
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Names lists the registered metric names, sorted.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.names))
	for n := range r.names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Handler serves the registry in the Prometheus exposition format. A
// collector that fails (a /proc file a sandbox hides) leaves its metrics
// out rather than failing the whole scrape.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// fqName finds the name in a descriptor's String form, the only way
// client_golang shows it.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Names lists the metric names a collector describes.
func Names(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var out []string
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}
