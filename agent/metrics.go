package agent

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/agent/agentmetrics"
	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/sites"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// meteredRuntime is the runtime the site manager drives, with each
// container start counted and timed. Every other method (exec, streams)
// is the runtime's own.
type meteredRuntime struct {
	*runtime.Runtime
	m *agentmetrics.Metrics
}

// Run counts and times the start of a site's container.
func (r meteredRuntime) Run(ctx context.Context, s runtime.Spec) error {
	start := time.Now()
	err := r.Runtime.Run(ctx, s)
	r.m.ContainerStarted(time.Since(start), err)
	return err
}

// siteStates counts the states a heartbeat reports.
func siteStates(sites []*agentv1.SiteStatus) map[string]int {
	out := map[string]int{}
	for _, s := range sites {
		switch s.State {
		case agentv1.SiteState_SITE_STATE_READY:
			out[agentmetrics.SiteReady]++
		case agentv1.SiteState_SITE_STATE_STOPPED:
			out[agentmetrics.SiteStopped]++
		case agentv1.SiteState_SITE_STATE_FAILED:
			out[agentmetrics.SiteFailed]++
		}
	}
	return out
}

// sleepMetrics tells the agent's metrics of its sites' wakes and sleeps.
type sleepMetrics struct{ m *agentmetrics.Metrics }

func (o sleepMetrics) Woke(from sites.Depth, door sites.Door, took time.Duration, err error) {
	o.m.Woke(string(from), string(door), took, err)
}

func (o sleepMetrics) Slept(to sites.Depth, _ time.Duration, err error) { o.m.Slept(string(to), err) }
