// Package jobs runs asynchronous work on the leader: it watches the store
// for queued jobs, hands each to the Runner registered for its type, and
// records running → succeeded/failed through Raft. A new leader picks up
// jobs left queued or running by the old one, so Runners must be
// idempotent by job id.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// Runner does the work of one job type. Run may be called more than once
// for the same job (after a leader change mid-run) and must converge to
// the same result. It reports progress (0–100) through the callback and
// returns a *Failure to fail the job with a specific code.
type Runner interface {
	Run(ctx context.Context, job *state.Job, progress func(percent int)) error
}

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context, job *state.Job, progress func(int)) error

// Run implements Runner.
func (f RunnerFunc) Run(ctx context.Context, job *state.Job, progress func(int)) error {
	return f(ctx, job, progress)
}

// Failure is a job failure with a code clients can branch on.
type Failure struct {
	Code    string
	Message string
	// Details, when set, are the job error's details (for
	// plan_limit_reached: plan, limit, resource).
	Details map[string]any
}

func (f *Failure) Error() string { return f.Code + ": " + f.Message }

// Dispatcher is the leader-side job loop.
type Dispatcher struct {
	store        *state.Store
	raft         fsm.Applier
	log          *slog.Logger
	now          func() time.Time
	workers      int
	perWorkspace int

	mu      sync.Mutex
	runners map[string]Runner
	// inFlight maps each job a worker holds to its workspace; running
	// counts them per workspace.
	inFlight map[string]string
	running  map[string]int
	// freed is signalled when a worker lets go of a job, so the loop
	// looks again at jobs it held back.
	freed chan struct{}

	metrics *metrics
}

// Config configures a Dispatcher.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	// Workers bounds how many jobs run at once; zero means 16.
	Workers int
	// PerWorkspace bounds how many of them one workspace's jobs may hold,
	// so a workspace with a hundred queued jobs cannot take every worker:
	// its excess stays queued while other workspaces' jobs run. Zero
	// means a quarter of Workers (4 of 16), at least 1: jobs mostly wait
	// on an agent, so four at once already keep one tenant's work moving,
	// and a busy tenant always leaves three quarters of the workers to
	// everyone else. Set it to Workers to turn the bound off.
	PerWorkspace int
	Logger       *slog.Logger
	Now          func() time.Time
}

// NewDispatcher returns a dispatcher with no runners.
func NewDispatcher(cfg Config) *Dispatcher {
	if cfg.Workers == 0 {
		cfg.Workers = 16
	}
	if cfg.PerWorkspace == 0 {
		cfg.PerWorkspace = max(1, cfg.Workers/4)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{store: cfg.Store, raft: cfg.Raft, log: cfg.Logger.With("component", "jobs"),
		now: cfg.Now, workers: cfg.Workers, perWorkspace: cfg.PerWorkspace, runners: map[string]Runner{},
		inFlight: map[string]string{}, running: map[string]int{}, freed: make(chan struct{}, 1),
		metrics: newMetrics()}
}

// Register sets the runner for a job type.
func (d *Dispatcher) Register(jobType string, r Runner) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runners[jobType] = r
}

// Types lists the job types that have a runner, sorted.
func (d *Dispatcher) Types() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.runners))
	for t := range d.runners {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// New makes a queued job row; the caller applies fsm.CreateJob with it.
func New(jobType, workspaceID, siteID string, payload any, now time.Time) (state.Job, error) {
	j := state.Job{ID: ids.New(ids.Job), Type: jobType, WorkspaceID: workspaceID, SiteID: siteID,
		Status: state.JobQueued, CreatedAt: now, UpdatedAt: now}
	if payload != nil {
		b, err := json.Marshal(payload)
		if err != nil {
			return j, fmt.Errorf("job payload: %w", err)
		}
		j.Payload = b
	}
	return j, nil
}

// Run dispatches jobs until ctx ends. It is a cluster.LeaderHook: it
// starts when this node becomes leader and stops when leadership is lost,
// waiting for the jobs it started to notice ctx.
func (d *Dispatcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		pending, watch, err := d.store.UnfinishedJobs()
		if err != nil {
			d.log.Error("list unfinished jobs", "err", err)
			return
		}
		for _, j := range d.claim(pending) {
			// A watch can fire together with cancellation: never start
			// work for a term that has ended.
			if ctx.Err() != nil {
				d.release(j)
				continue
			}
			wg.Add(1)
			go func(j *state.Job) {
				defer wg.Done()
				defer d.release(j)
				if !d.runOne(ctx, j) {
					// Raft refused to record it: the job is still unfinished
					// in the store; let a retry wait a little, not spin.
					select {
					case <-ctx.Done():
					case <-time.After(retryStart):
					}
				}
			}(j)
		}
		if ctx.Err() != nil {
			return
		}
		// Look again when a job is queued or changes, or a worker frees up
		// (a finished job's record can land before its worker lets go).
		watch.Add(d.freed)
		if err := watch.WatchCtx(ctx); err != nil {
			return
		}
	}
}

// claim picks the jobs to start now from pending (oldest first) and marks
// them held. While a worker is free it takes the oldest job of the
// workspace running the fewest, among workspaces under the per-workspace
// bound: first in, first out within a workspace, and a workspace that
// just got a worker waits behind those that have fewer.
func (d *Dispatcher) claim(pending []*state.Job) []*state.Job {
	d.mu.Lock()
	defer d.mu.Unlock()
	queues := map[string][]*state.Job{}
	var order []string
	for _, j := range pending {
		if _, held := d.inFlight[j.ID]; held {
			continue
		}
		if _, seen := queues[j.WorkspaceID]; !seen {
			order = append(order, j.WorkspaceID)
		}
		queues[j.WorkspaceID] = append(queues[j.WorkspaceID], j)
	}
	var out []*state.Job
	for len(d.inFlight) < d.workers {
		best, found := "", false
		for _, ws := range order {
			q := queues[ws]
			if len(q) == 0 || d.running[ws] >= d.perWorkspace {
				continue
			}
			if !found || d.running[ws] < d.running[best] ||
				(d.running[ws] == d.running[best] && q[0].CreatedAt.Before(queues[best][0].CreatedAt)) {
				best, found = ws, true
			}
		}
		if !found {
			break
		}
		q := queues[best]
		j := q[0]
		queues[best] = q[1:]
		d.inFlight[j.ID] = j.WorkspaceID
		d.running[j.WorkspaceID]++
		out = append(out, j)
	}
	return out
}

// release lets go of a job and wakes the loop.
func (d *Dispatcher) release(j *state.Job) {
	d.mu.Lock()
	if ws, held := d.inFlight[j.ID]; held {
		delete(d.inFlight, j.ID)
		if d.running[ws]--; d.running[ws] <= 0 {
			delete(d.running, ws)
		}
	}
	d.mu.Unlock()
	select {
	case d.freed <- struct{}{}:
	default: // a wake-up is already pending
	}
}

func (d *Dispatcher) update(ctx context.Context, u state.JobUpdate) error {
	u.At = d.now().UTC()
	_, err := d.raft.Apply(ctx, fsm.UpdateJob{Update: u})
	return err
}

// retryStart is how long a job whose start or end could not be recorded
// waits before it is tried again.
const retryStart = time.Second

// runOne runs a job to its end; it reports false when marking it running
// or recording its result failed.
func (d *Dispatcher) runOne(ctx context.Context, j *state.Job) bool {
	log := d.log.With("job_id", j.ID, "job_type", j.Type)
	start := time.Now()
	if err := d.update(ctx, state.JobUpdate{ID: j.ID, Status: state.JobRunning, Progress: j.Progress, Dispatch: true}); err != nil {
		log.Warn("mark job running", "err", err)
		return false
	}
	d.observeStart(j, d.now())
	d.mu.Lock()
	runner := d.runners[j.Type]
	d.mu.Unlock()
	var runErr error
	if runner == nil {
		runErr = &Failure{Code: "unsupported_job_type", Message: fmt.Sprintf("no worker handles %q jobs", j.Type)}
	} else {
		runErr = runner.Run(ctx, j, func(p int) {
			if err := d.update(ctx, state.JobUpdate{ID: j.ID, Status: state.JobRunning, Progress: p}); err != nil {
				log.Debug("job progress not recorded", "err", err)
			}
		})
	}
	if ctx.Err() != nil {
		// Leadership ended mid-run: leave the job running; the next
		// leader re-dispatches it.
		log.Info("job interrupted by leadership change")
		d.observeEnd(j, time.Since(start), resultInterrupted)
		return true
	}
	u := state.JobUpdate{ID: j.ID, Status: state.JobSucceeded}
	result := resultSucceeded
	if runErr != nil {
		result = resultFailed
		u.Status = state.JobFailed
		var f *Failure
		if errors.As(runErr, &f) {
			u.Error = &state.JobError{Code: f.Code, Message: f.Message, Details: f.Details}
		} else {
			u.Error = &state.JobError{Code: "job_failed", Message: runErr.Error()}
		}
		log.Warn("job failed", "err", runErr)
	}
	if err := d.update(ctx, u); err != nil {
		log.Warn("record job result", "err", err)
		return false
	}
	d.observeEnd(j, time.Since(start), result)
	return true
}
