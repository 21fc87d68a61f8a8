package promtest_test

import (
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
)

func TestAddresses(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string
	}{
		{"metrics text", "# HELP go_gc_gogc_percent Sourced from /gc/gogc:percent.\ngo_info{version=\"go1.26.8\"} 1\nx_bucket{le=\"0.005\"} 3", nil},
		{"url", `{"leader":"http://127.0.0.1:8080"}`, []string{"http://127.0.0.1:8080", "127.0.0.1:8080"}},
		{"ipv4 alone", `backend 10.200.0.7`, []string{"10.200.0.7"}},
		{"ipv6 with port", `raft [::1]:7000`, []string{"[::1]:7000"}},
		{"host and port", `dial db.internal:3306`, []string{"db.internal:3306"}},
		{"localhost", `localhost:8090`, []string{"localhost:8090"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := promtest.Addresses(tt.text); !slices.Equal(got, tt.want) {
				t.Fatalf("Addresses(%q) = %q, want %q", tt.text, got, tt.want)
			}
		})
	}
}
