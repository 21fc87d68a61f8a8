package agentmetrics_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/agentmetrics"
	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
)

// TestMetrics: what the agent records shows in its scrape, by state and
// result only: no site, address or token.
func TestMetrics(t *testing.T) {
	m := agentmetrics.New()
	m.ContainerStarted(300*time.Millisecond, nil)
	m.ContainerStarted(time.Second, errors.New("start task wp-site_x: exit 1 at 10.200.0.9"))
	m.Registered(nil)
	m.Heartbeat(time.Unix(1700000000, 0), nil)
	m.Heartbeat(time.Unix(1700000002, 0), errors.New("dial http://10.0.0.1:8080"))
	m.Undo(5<<20, 0)
	m.Undo(300<<20, 2)
	m.Restarted(nil)
	m.MemoryEnded(1)
	m.Prepared(40, 30)
	m.Prepared(12, 10)
	m.Sites(map[string]int{agentmetrics.SiteReady: 3, agentmetrics.SiteFailed: 1, "bogus": 9})

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	tests := []string{
		`sandboxd_agent_container_starts_total{result="ok"} 1`,
		`sandboxd_agent_container_starts_total{result="error"} 1`,
		`sandboxd_agent_container_start_duration_seconds_count 1`,
		`sandboxd_agent_heartbeats_total{result="ok"} 1`,
		`sandboxd_agent_heartbeats_total{result="error"} 1`,
		`sandboxd_agent_registrations_total{result="error"} 0`,
		`sandboxd_agent_last_heartbeat_timestamp_seconds 1.7e+09`,
		`sandboxd_agent_sites{state="ready"} 3`,
		`sandboxd_agent_sites{state="stopped"} 0`,
		`sandboxd_agent_sites{state="failed"} 1`,
		`sandboxd_agent_db_undo_bytes 3.145728e+08`,
		`sandboxd_agent_db_transactions_ended_total 2`,
		`sandboxd_agent_db_restarts_total{result="ok"} 1`,
		`sandboxd_agent_db_memory_connections_ended_total 1`,
		`sandboxd_agent_db_restarts_total{result="error"} 0`,
		`sandboxd_agent_db_prepared_transactions 2`,
		`sandboxd_agent_db_prepared_rolled_back_total 40`,
	}
	for _, want := range tests {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(text, "bogus") {
		t.Error("an unknown state became a label")
	}
	if found := promtest.Addresses(text); len(found) > 0 {
		t.Errorf("scrape shows addresses %q", found)
	}
	if !strings.Contains(strings.Join(m.Names(), " "), "sandboxd_agent_sites") {
		t.Errorf("names %v", m.Names())
	}
}
