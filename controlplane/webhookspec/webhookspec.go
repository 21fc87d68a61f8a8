// Package webhookspec is what the API says of demo-launch webhooks: their
// event types and value sets. It holds no Raft command.
package webhookspec

// Event types.
const (
	DemoReady   = "demo.ready"
	DemoExpired = "demo.expired"
)

// The value sets of an Event, for the API document.
var (
	Events      = []string{DemoReady, DemoExpired}
	DemoStatus  = []string{"ready", "expired"}
	SourceKinds = []string{"template_launch", "test"}
)
