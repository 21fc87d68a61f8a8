package webhooks

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
)

// DefaultSchedule is the wait before each retry: attempt n+1 follows a
// failed attempt n by DefaultSchedule[n-1], give or take Jitter. With the
// first attempt that makes the contract's 8 attempts, the last about
// 4 h 51 min after the event.
var DefaultSchedule = []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
	15 * time.Minute, time.Hour, 3 * time.Hour}

// Jitter is the share a retry's wait varies by, either way, so receivers
// that came back are not hit by every queued retry at once.
const Jitter = 0.2

// Dispatcher is the leader's delivery loop: it sends every pending
// delivery that is due, at most Workers at once, and records each
// attempt's outcome in the replicated state. A leader that dies between
// a send and its record leaves the delivery pending: the next leader
// sends it again under the same idempotency key, for the receiver to
// deduplicate.
type Dispatcher struct {
	Store  *state.Store
	Raft   fsm.Applier
	Sender *Sender
	// Secret opens a webhook's signing secret.
	Secret func(w *state.Webhook) (string, error)
	// Schedule is the retry schedule; nil means DefaultSchedule. Its
	// length plus one is the number of attempts.
	Schedule []time.Duration
	// Poll is how often pending deliveries are looked at; zero means
	// 200 ms. Workers bounds concurrent sends; zero means 32.
	Poll    time.Duration
	Workers int
	Now     func() time.Time
	Log     *slog.Logger

	attempts *prometheus.CounterVec
	once     sync.Once
}

func (d *Dispatcher) init() {
	d.once.Do(func() {
		if d.Schedule == nil {
			d.Schedule = DefaultSchedule
		}
		if d.Poll == 0 {
			d.Poll = 200 * time.Millisecond
		}
		if d.Workers == 0 {
			d.Workers = 32
		}
		if d.Now == nil {
			d.Now = time.Now
		}
		if d.Log == nil {
			d.Log = slog.New(slog.DiscardHandler)
		}
		d.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandboxd_webhook_attempts_total",
			Help: "Webhook delivery attempts on this server, by outcome (delivered, retrying, failed)."}, []string{"outcome"})
		for _, o := range []string{state.DeliveryDelivered, state.DeliveryRetrying, state.DeliveryFailed} {
			d.attempts.WithLabelValues(o) // a series per outcome from the start, for rate()
		}
	})
}

var pendingDesc = prometheus.NewDesc("sandboxd_webhook_deliveries_pending",
	"Webhook deliveries not yet delivered or failed for good, from the replicated state.", nil, nil)

// Attempts is the number of attempts a delivery gets.
func (d *Dispatcher) Attempts() int {
	d.init()
	return len(d.Schedule) + 1
}

// Describe and Collect export the attempt counter and the pending count.
func (d *Dispatcher) Describe(ch chan<- *prometheus.Desc) {
	d.init()
	d.attempts.Describe(ch)
	ch <- pendingDesc
}

// Collect exports the attempt counter and the pending count.
func (d *Dispatcher) Collect(ch chan<- prometheus.Metric) {
	d.init()
	d.attempts.Collect(ch)
	if d.Store != nil {
		if pending, err := d.Store.PendingDeliveries(); err == nil {
			ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(len(pending)))
		}
	}
}

// Run sends deliveries until ctx ends (leadership lost).
func (d *Dispatcher) Run(ctx context.Context) {
	d.init()
	t := time.NewTicker(d.Poll)
	defer t.Stop()
	var mu sync.Mutex
	inflight := map[string]bool{}
	sem := make(chan struct{}, d.Workers)
	// done wakes the loop when a worker frees up, so a backlog is worked
	// off at the receivers' pace, not one round per Poll.
	done := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		pending, err := d.Store.PendingDeliveries()
		if err != nil {
			d.Log.Warn("read pending deliveries", "err", err)
		}
		now := d.Now()
		for _, p := range pending {
			mu.Lock()
			busy := inflight[p.ID]
			mu.Unlock()
			if busy || p.NextAt.After(now) {
				continue
			}
			w, err := d.Store.Webhook(p.WorkspaceID)
			if err != nil || w == nil || !w.SendEvents || !d.paid(p.WorkspaceID) {
				continue // paused (or a plan without webhooks): it waits, with its attempts
			}
			select {
			case sem <- struct{}{}:
			default:
				continue // every worker is busy; the next round takes it
			}
			mu.Lock()
			inflight[p.ID] = true
			mu.Unlock()
			// The list was read before some worker recorded its attempt:
			// read this one again now that no other worker has it.
			if cur, err := d.Store.Delivery(p.ID); err != nil || cur == nil || cur.Done || cur.Attempt != p.Attempt || cur.NextAt.After(now) {
				mu.Lock()
				delete(inflight, p.ID)
				mu.Unlock()
				<-sem
				continue
			}
			wg.Add(1)
			go func(p *state.Delivery, w *state.Webhook) {
				defer wg.Done()
				defer func() { <-sem }()
				d.attempt(ctx, p, w)
				mu.Lock()
				delete(inflight, p.ID)
				mu.Unlock()
				select {
				case done <- struct{}{}:
				default:
				}
			}(p, w)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-done:
		}
	}
}

// paid reports whether a workspace's owner is on a plan with webhooks.
func (d *Dispatcher) paid(workspaceID string) bool {
	ws, err := d.Store.Workspace(workspaceID)
	if err != nil || ws == nil {
		return false
	}
	plan, err := d.Store.PlanOf(ws)
	return err == nil && plan == state.PlanPaid
}

// attempt makes a delivery's next attempt and records it.
func (d *Dispatcher) attempt(ctx context.Context, p *state.Delivery, w *state.Webhook) {
	var a state.Attempt
	if secret, err := d.Secret(w); err != nil {
		// Nothing can be signed: the delivery fails for good rather than
		// spinning (a sealing key this server lacks; the owner sets a new secret).
		d.Log.Error("open a webhook's signing secret", "workspace", w.WorkspaceID, "err", err)
		a = Outcome(d.Attempts(), d.Attempts(), d.Schedule, 0, errors.New("the signing secret could not be read; rotate it"), d.Now().UTC(), 0)
		a.Attempt = p.Attempt + 1
	} else {
		code, sendErr := d.Sender.Send(ctx, Message{URL: w.URL, Secret: secret, DeliveryID: p.ID, EventID: p.EventID, Event: p.Event, Body: p.Body})
		if ctx.Err() != nil {
			return // no longer the leader: the next one makes this attempt
		}
		a = Outcome(p.Attempt+1, d.Attempts(), d.Schedule, code, sendErr, d.Now().UTC(), rand.Float64())
	}
	a.ID = p.ID
	if _, err := d.Raft.Apply(ctx, fsm.RecordAttempt{Attempt: a}); err != nil {
		if !errors.Is(err, state.ErrStale) && !errors.Is(err, state.ErrNotFound) {
			d.Log.Warn("record a delivery attempt", "delivery", p.ID, "err", err)
		}
		return
	}
	d.attempts.WithLabelValues(a.Status).Inc()
	if a.Status == state.DeliveryFailed {
		d.Log.Info("webhook delivery failed for good", "workspace", p.WorkspaceID, "delivery", p.ID, "event", p.Event,
			"attempts", a.Attempt, "err", a.Error)
	}
}

// maxError bounds the error text kept with a delivery.
const maxError = 300

// Outcome is attempt n's record: delivered on a 2xx, failed when it was
// the last of attempts, else retrying after the schedule's wait for n,
// varied by jitter (u is uniform in [0,1)).
func Outcome(n, attempts int, schedule []time.Duration, code int, err error, now time.Time, u float64) state.Attempt {
	a := state.Attempt{Attempt: n, HTTPStatus: code, At: now}
	switch {
	case err == nil:
		a.Status = state.DeliveryDelivered
		return a
	case n >= attempts:
		a.Status = state.DeliveryFailed
	default:
		a.Status = state.DeliveryRetrying
		wait := schedule[min(n-1, len(schedule)-1)]
		a.NextAt = now.Add(time.Duration(float64(wait) * (1 - Jitter + 2*Jitter*u)))
	}
	a.Error = err.Error()
	if len(a.Error) > maxError {
		a.Error = strings.ToValidUTF8(a.Error[:maxError], "")
	}
	return a
}
