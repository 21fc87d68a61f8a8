package promreg_test

import (
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/promreg"
)

// TestNames: a registered family is listed whether or not it has a sample
// yet (a scrape would not show an unused vector), and only once.
func TestNames(t *testing.T) {
	tests := []struct {
		name       string
		collectors []prometheus.Collector
		want       []string
	}{
		{"unused vector", []prometheus.Collector{prometheus.NewCounterVec(prometheus.CounterOpts{Name: "a_total", Help: "a"}, []string{"x"})},
			[]string{"a_total"}},
		{"histogram and gauge", []prometheus.Collector{
			prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "ns", Name: "h_seconds", Help: "h"}),
			prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ns", Subsystem: "sub", Name: "g", Help: "g"}),
		}, []string{"ns_h_seconds", "ns_sub_g"}},
		{"const metric collector", []prometheus.Collector{constCollector{}}, []string{"c_value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := promreg.New()
			r.MustRegister(tt.collectors...)
			if got := r.Names(); !slices.Equal(got, tt.want) {
				t.Fatalf("names %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRegisterRefusesDuplicates keeps the registry's own checks.
func TestRegisterRefusesDuplicates(t *testing.T) {
	r := promreg.New()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "dup_total", Help: "d"})
	r.MustRegister(c)
	if err := r.Register(prometheus.NewCounter(prometheus.CounterOpts{Name: "dup_total", Help: "d"})); err == nil {
		t.Fatal("a duplicate was registered")
	}
	if got := r.Names(); !slices.Equal(got, []string{"dup_total"}) {
		t.Fatalf("names %v", got)
	}
}

// TestHandler serves what was registered.
func TestHandler(t *testing.T) {
	r := promreg.New()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "served_total", Help: "s"})
	c.Add(3)
	r.MustRegister(c)
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if !strings.Contains(string(body), "served_total 3") {
		t.Fatalf("scrape: %s", body)
	}
}

type constCollector struct{}

var constDesc = prometheus.NewDesc("c_value", "c", []string{"k"}, nil)

func (constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- constDesc }
func (constCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(constDesc, prometheus.GaugeValue, 1, "v")
}
