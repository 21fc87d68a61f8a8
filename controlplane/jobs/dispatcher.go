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
}

func (f *Failure) Error() string { return f.Code + ": " + f.Message }

// Applier commits a command through Raft.
type Applier interface {
	Apply(ctx context.Context, c fsm.Command) (any, error)
}

// Dispatcher is the leader-side job loop.
type Dispatcher struct {
	store   *state.Store
	raft    Applier
	log     *slog.Logger
	now     func() time.Time
	workers int

	mu       sync.Mutex
	runners  map[string]Runner
	inFlight map[string]bool
}

// Config configures a Dispatcher.
type Config struct {
	Store *state.Store
	Raft  Applier
	// Workers bounds how many jobs run at once; zero means 16.
	Workers int
	Logger  *slog.Logger
	Now     func() time.Time
}

// NewDispatcher returns a dispatcher with no runners.
func NewDispatcher(cfg Config) *Dispatcher {
	if cfg.Workers == 0 {
		cfg.Workers = 16
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{store: cfg.Store, raft: cfg.Raft, log: cfg.Logger.With("component", "jobs"),
		now: cfg.Now, workers: cfg.Workers, runners: map[string]Runner{}, inFlight: map[string]bool{}}
}

// Register sets the runner for a job type.
func (d *Dispatcher) Register(jobType string, r Runner) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runners[jobType] = r
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
	sem := make(chan struct{}, d.workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		pending, watch, err := d.store.UnfinishedJobs()
		if err != nil {
			d.log.Error("list unfinished jobs", "err", err)
			return
		}
		for _, j := range pending {
			// A watch can fire together with cancellation: never start
			// work for a term that has ended.
			if ctx.Err() != nil {
				return
			}
			if !d.claim(j.ID) {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				d.release(j.ID)
				return
			}
			wg.Add(1)
			go func(j *state.Job) {
				defer wg.Done()
				defer func() { <-sem }()
				defer d.release(j.ID)
				d.runOne(ctx, j)
			}(j)
		}
		if err := watch.WatchCtx(ctx); err != nil {
			return
		}
	}
}

func (d *Dispatcher) claim(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inFlight[id] {
		return false
	}
	d.inFlight[id] = true
	return true
}

func (d *Dispatcher) release(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.inFlight, id)
}

func (d *Dispatcher) update(ctx context.Context, u state.JobUpdate) error {
	u.At = d.now().UTC()
	_, err := d.raft.Apply(ctx, fsm.UpdateJob{Update: u})
	return err
}

func (d *Dispatcher) runOne(ctx context.Context, j *state.Job) {
	log := d.log.With("job_id", j.ID, "job_type", j.Type)
	if err := d.update(ctx, state.JobUpdate{ID: j.ID, Status: state.JobRunning, Progress: j.Progress, Dispatch: true}); err != nil {
		log.Warn("mark job running", "err", err)
		return
	}
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
		return
	}
	u := state.JobUpdate{ID: j.ID, Status: state.JobSucceeded}
	if runErr != nil {
		u.Status = state.JobFailed
		var f *Failure
		if errors.As(runErr, &f) {
			u.Error = &state.JobError{Code: f.Code, Message: f.Message}
		} else {
			u.Error = &state.JobError{Code: "job_failed", Message: runErr.Error()}
		}
		log.Warn("job failed", "err", runErr)
	}
	if err := d.update(ctx, u); err != nil {
		log.Warn("record job result", "err", err)
	}
}
