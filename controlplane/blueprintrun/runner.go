// Package blueprintrun carries out Blueprint runs on the leader: it
// reads the run's source, fetches each step's resources (through the
// resource mirror and the address guard, from the run's bundle, from
// the workspace's Library), has the site's agent run the step inside the
// site's container, and records every step's outcome through Raft. A
// failing step ends the run; the steps after it are skipped.
package blueprintrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/blueprint"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/state"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// Agents gives a client for the agent on a node.
type Agents interface {
	Agent(nodeID string) (agentv1connect.AgentServiceClient, error)
}

// Config wires a Runner.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	Agents
	// Fetch downloads a resource URL through the resource mirror and the
	// address guard, up to max bytes.
	Fetch func(ctx context.Context, url string, max int64) ([]byte, error)
	// GitURL is the URL git may clone for a git:directory resource
	// (mapped by the mirror, checked by the guard) with the address git
	// must connect to ("host:port:addr", empty for the operator's
	// mirror), or why not.
	GitURL func(ctx context.Context, raw string) (url, pin string, err error)
	// Blob reads a stored blob (bundles, Library ZIPs).
	Blob func(ctx context.Context, sha string) ([]byte, error)
	// Env is what the checks know of this service.
	Env    func() blueprint.Env
	Now    func() time.Time
	Logger *slog.Logger
}

// Runner carries out runs.
type Runner struct{ cfg Config }

// New returns a Runner.
func New(cfg Config) *Runner {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Runner{cfg: cfg}
}

func (r *Runner) now() time.Time {
	if r.cfg.Now != nil {
		return r.cfg.Now().UTC().Truncate(time.Millisecond)
	}
	return time.Now().UTC().Truncate(time.Millisecond)
}

// Limits of a run's record.
const (
	maxLog     = 256 << 10
	maxStepLog = 16 << 10
	// stepTimeout bounds one step (a large plugin, a long import).
	stepTimeout = 15 * time.Minute
)

// ErrRunFailed is a run that ended failed; the run says why.
var ErrRunFailed = errors.New("the Blueprint run failed")

// Run carries out a run on its (ready) site. It converges when called
// again: finished steps are not run twice, and a step that was running
// when the last leader stopped is recorded as interrupted. It returns
// ErrRunFailed (wrapped with the reason) when the run failed.
func (r *Runner) Run(ctx context.Context, runID string, progress func(int)) error {
	run, err := r.cfg.Store.BlueprintRun(runID)
	if err != nil {
		return err
	}
	if run == nil {
		return fmt.Errorf("run %s: %w", runID, state.ErrNotFound)
	}
	run = own(run)
	if run.Terminal() {
		if run.Status == state.RunFailed {
			return fmt.Errorf("%w: %s", ErrRunFailed, run.FailureReason)
		}
		return nil
	}
	site, err := r.cfg.Store.Site(run.SiteID)
	if err != nil {
		return err
	}
	if site == nil || site.Status != state.SiteReady {
		return r.finish(ctx, run, "the site is not ready (deleted, or being changed) and the Blueprint cannot run on it")
	}
	env := r.cfg.Env()
	env.Reach = nil // reachability is the fetch's to say, step by step
	env.Bundle = run.BundleSHA256 != ""
	checked := blueprint.Check(run.Source, env)
	if !checked.Valid {
		var msgs []string
		for _, f := range checked.Report {
			if f.Severity == blueprint.SeverityError {
				msgs = append(msgs, f.Path+": "+f.Message)
			}
		}
		return r.finish(ctx, run, "the Blueprint cannot run here: "+strings.Join(msgs, "; "))
	}
	bp := checked.Blueprint
	if run.Status == state.RunPending || len(run.Steps) != len(bp.Steps) {
		now := r.now()
		run.Steps = make([]state.RunStep, len(bp.Steps))
		for i, s := range bp.Steps {
			run.Steps[i] = state.RunStep{Name: s.Name, Status: state.RunPending, Caption: caption(s), Path: s.Path}
		}
		run.Status, run.StartedAt, run.RunnerVersion = state.RunRunning, &now, RunnerVersion
		if err := r.put(ctx, run); err != nil {
			return err
		}
	}
	agent, err := r.cfg.Agents.Agent(site.NodeID)
	if err != nil {
		return err // the job is tried again; the run stays running
	}
	res := &resolver{r: r, run: run, site: site}
	for i, s := range bp.Steps {
		st := &run.Steps[i]
		switch st.Status {
		case state.RunSucceeded:
			continue
		case state.RunRunning:
			st.Status = state.RunFailed
			return r.failStep(ctx, run, i, "interrupted: the control plane changed leader while the step ran, so whether it finished is unknown; run the Blueprint again")
		}
		st.Status = state.RunRunning
		if err := r.put(ctx, run); err != nil {
			return err
		}
		t0 := time.Now()
		log, user, version, stepErr := r.step(ctx, agent, res, s)
		if version != "" {
			run.RunnerVersion = version // the node's runner did the step
		}
		st.DurationMs = time.Since(t0).Milliseconds()
		r.appendLog(run, fmt.Sprintf("== %s %s (%d ms)\n%s", s.Path, s.Name, st.DurationMs, clip(log, maxStepLog)))
		if stepErr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			st.Status = state.RunFailed
			reason := stepErr.Error()
			var limit *jobs.Failure
			if errors.As(stepErr, &limit) {
				reason = limit.Message
			}
			r.appendLog(run, "error: "+reason+"\n")
			err := r.failStep(ctx, run, i, reason)
			if limit != nil && errors.Is(err, ErrRunFailed) {
				// The run's job fails with the limit's code.
				return fmt.Errorf("%w%w", err, limit)
			}
			return err
		}
		st.Status = state.RunSucceeded
		if user != "" {
			run.LoginUser = user
		}
		if progress != nil {
			progress(100 * (i + 1) / len(bp.Steps))
		}
		if err := r.put(ctx, run); err != nil {
			return err
		}
	}
	run.LandingPage = bp.LandingPage
	return r.finish(ctx, run, "")
}

// RunnerVersion names this runner in run records until a node's step
// runner (which names itself) has run a step.
const RunnerVersion = "sandboxd-blueprints/1"

// step fetches a step's resources and has the agent run it; the error is
// the step's, in words for the run's failure reason.
func (r *Runner) step(ctx context.Context, agent agentv1connect.AgentServiceClient, res *resolver, s blueprint.Step) (log, user, version string, err error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	in, err := res.prepare(ctx, s)
	if err != nil {
		return res.notes(), "", "", err
	}
	args, err := json.Marshal(in.args)
	if err != nil {
		return "", "", "", err
	}
	extras, err := json.Marshal(in.extras)
	if err != nil {
		return "", "", "", err
	}
	resp, err := agent.RunBlueprintStep(ctx, connect.NewRequest(&agentv1.RunBlueprintStepRequest{
		SiteId: res.site.ID, JobId: res.run.JobID, Step: s.Name, ArgsJson: args, Blobs: in.blobs, ExtrasJson: extras}))
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeResourceExhausted && ce.Meta().Get(agentv1.RefusalKey) == agentv1.RefusalDiskFull {
			// The site's disk, which holds its files and its database,
			// is full: the plan's limit.
			return res.notes(), "", "", &jobs.Failure{Code: "plan_limit_reached", Message: ce.Message()}
		}
		if errors.As(err, &ce) {
			return res.notes(), "", "", fmt.Errorf("the site's node could not run the step: %s", ce.Message())
		}
		return res.notes(), "", "", fmt.Errorf("the site's node could not run the step: %v", err)
	}
	m := resp.Msg
	log = res.notes() + m.Log
	if !m.Ok {
		return log, "", m.RunnerVersion, fmt.Errorf("%s", m.ErrorMessage)
	}
	return log, m.User, m.RunnerVersion, nil
}

func caption(s blueprint.Step) string {
	if s.Caption != "" {
		return s.Caption
	}
	str := func(k string) string { v, _ := s.Args[k].(string); return v }
	res := func(k string) string {
		m, _ := s.Args[k].(map[string]any)
		for _, f := range []string{"slug", "name", "url", "path"} {
			if v, ok := m[f].(string); ok && v != "" {
				return v
			}
		}
		return ""
	}
	switch s.Name {
	case "installPlugin":
		return strings.TrimSpace("Installing plugin " + firstOf(res("pluginData"), res("pluginZipFile")))
	case "installTheme":
		return strings.TrimSpace("Installing theme " + firstOf(res("themeData"), res("themeZipFile")))
	case "activatePlugin":
		return "Activating " + firstOf(str("pluginName"), str("pluginPath"))
	case "activateTheme":
		return "Activating theme " + str("themeFolderName")
	case "writeFile", "mkdir", "rm", "rmdir":
		return s.Name + " " + str("path")
	case "wp-cli":
		return "wp-cli: " + clip(str("command"), 100)
	case "importWxr":
		return "Importing content"
	case "login":
		return "Signing in as " + firstOf(str("username"), "admin")
	case "setSiteOptions":
		return "Setting site options"
	case "runPHP":
		return "Running PHP code"
	case "runSql":
		return "Running SQL"
	case "setSiteLanguage":
		return "Setting the language to " + str("language")
	}
	return s.Name
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "\n… (cut)\n"
}

func (r *Runner) appendLog(run *state.BlueprintRun, s string) {
	if strings.HasPrefix(s, "error: ") {
		// The failing step's error always gets in.
		run.Log += clip(s, 4<<10)
		return
	}
	if len(run.Log)+len(s) > maxLog {
		if !strings.HasSuffix(run.Log, "(log full)\n") {
			run.Log += "… (log full)\n"
		}
		return
	}
	run.Log += s
}

// failStep ends the run at step i: the steps after it are skipped.
func (r *Runner) failStep(ctx context.Context, run *state.BlueprintRun, i int, reason string) error {
	for j := i + 1; j < len(run.Steps); j++ {
		run.Steps[j].Status = state.StepSkipped
	}
	return r.finish(ctx, run, run.Steps[i].Path+" ("+run.Steps[i].Name+"): "+reason)
}

// finish records the run's end: succeeded with no reason, else failed.
func (r *Runner) finish(ctx context.Context, run *state.BlueprintRun, reason string) error {
	now := r.now()
	run.FinishedAt = &now
	if run.StartedAt == nil {
		run.StartedAt = &now
	}
	if reason == "" {
		// The site's login entry first: a client that sees the run
		// succeeded signs in where the Blueprint says.
		if err := r.saveEntry(ctx, run); err != nil {
			return err
		}
		run.Status = state.RunSucceeded
	} else {
		run.Status, run.FailureReason = state.RunFailed, reason
		for j := range run.Steps {
			if run.Steps[j].Status == state.RunPending {
				run.Steps[j].Status = state.StepSkipped
			}
		}
	}
	if err := r.put(ctx, run); err != nil {
		return err
	}
	if reason != "" {
		return fmt.Errorf("%w: %s", ErrRunFailed, reason)
	}
	return nil
}

// saveEntry records where the run's site signs in (its login step's
// user, its landing page), if the Blueprint says.
func (r *Runner) saveEntry(ctx context.Context, run *state.BlueprintRun) error {
	if run.LoginUser == "" && run.LandingPage == "" {
		return nil
	}
	entry := state.SiteEntry{User: run.LoginUser, Path: run.LandingPage}
	_, err := r.cfg.Raft.Apply(ctx, fsm.UpdateSite{Update: state.SiteUpdate{ID: run.SiteID, Entry: &entry, At: r.now()}})
	if errors.Is(err, state.ErrNotFound) {
		return nil // the site is gone: nothing to sign in to
	}
	return err
}

// put records the run's progress; the source (up to 512 KiB) stays out
// of the Raft entry, which every step writes.
func (r *Runner) put(ctx context.Context, run *state.BlueprintRun) error {
	rec := *run
	rec.Source = nil
	_, err := r.cfg.Raft.Apply(ctx, fsm.PutRun{Run: rec})
	return err
}

// Abort fails a run that cannot start (its site could not be made).
func (r *Runner) Abort(ctx context.Context, runID, reason string) error {
	run, err := r.cfg.Store.BlueprintRun(runID)
	if err != nil || run == nil || run.Terminal() {
		return err
	}
	if err := r.finish(ctx, own(run), reason); !errors.Is(err, ErrRunFailed) {
		return err
	}
	return nil
}

// Failed reports whether err is a run that failed (rather than one that
// could not be carried on, which its job retries).
func (r *Runner) Failed(err error) bool { return errors.Is(err, ErrRunFailed) }

// own copies a run read from the store, which shares its rows with every
// reader: the runner changes its copy and writes it back through Raft.
func own(run *state.BlueprintRun) *state.BlueprintRun {
	c := *run
	c.Steps = slices.Clone(run.Steps)
	return &c
}
