package webhooks_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/webhooks"
	"github.com/sandboxd/sandboxd/internal/promreg/promtest"
)

// TestDispatcherMetrics: every outcome is a series before the first
// attempt (so rate() and alerts see it), and the pending count is read
// from the state.
func TestDispatcherMetrics(t *testing.T) {
	d := &webhooks.Dispatcher{Store: state.NewStore()}
	tests := []struct {
		metric string
		labels map[string]string
	}{
		{"sandboxd_webhook_attempts_total", map[string]string{"outcome": state.DeliveryDelivered}},
		{"sandboxd_webhook_attempts_total", map[string]string{"outcome": state.DeliveryRetrying}},
		{"sandboxd_webhook_attempts_total", map[string]string{"outcome": state.DeliveryFailed}},
		{"sandboxd_webhook_deliveries_pending", nil},
	}
	for _, tt := range tests {
		if v, ok := promtest.Value(t, tt.metric, tt.labels, d); !ok || v != 0 {
			t.Errorf("%s%v = %v (present %v), want 0", tt.metric, tt.labels, v, ok)
		}
	}
}
