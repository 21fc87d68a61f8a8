package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/apiclient"
)

// bpPollEvery is how often a watched run is read again (tests shorten it).
var bpPollEvery = time.Second

// bpPollTries is how many reads in a row may fail (the server briefly
// unreachable, a leader change) before watching gives up.
const bpPollTries = 5

// bpWatchRun follows a run until it ends and returns its last answer
// ({run}); the error is the run's failure, a read that failed for good,
// or Ctrl-C (which stops the watching, not the run). Progress goes to
// stdout, except with --json.
func bpWatchRun(e *env, c *apiclient.Client, bp, run string) (*apiclient.Response, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	w := newBPWatcher(e)
	path := apiPath(bpPath, bp, "runs", run)
	failed := 0
	for {
		r, err := call(c, "GET", path, nil)
		var ae *apiclient.Error
		switch {
		case err == nil:
			failed = 0
			w.show(r)
			if st := r.Str("run.status"); st == "succeeded" || st == "failed" {
				w.end(r)
				if st == "failed" {
					return r, bpRunFailed(c, r)
				}
				return r, nil
			}
		case errors.As(err, &ae) && ae.Status < 500 && ae.Status != 429:
			return nil, err
		default:
			if failed++; failed >= bpPollTries {
				return nil, fmt.Errorf("watch run %s: %w", run, err)
			}
		}
		select {
		case <-ctx.Done():
			w.interrupted()
			return nil, fmt.Errorf("stopped watching; the run goes on (sandboxctl blueprints watch %s %s)", bp, run)
		case <-time.After(bpPollEvery):
		}
	}
}

// bpWatcher shows a run's steps as they change: a list redrawn in place
// on a terminal, else one line per change of a step.
type bpWatcher struct {
	out   io.Writer
	tty   bool // redraw in place
	color bool
	width int
	now   func() time.Time

	status string      // the run's status last shown
	seen   []string    // each step's status last shown (line mode)
	since  []time.Time // when each step was first seen running (tty mode)
	drawn  int         // lines of the last frame (tty mode)
}

func newBPWatcher(e *env) *bpWatcher {
	w := &bpWatcher{out: e.stdout, width: bpWidth, now: time.Now}
	if e.json {
		w.out = io.Discard
		return w
	}
	if isTerminal(e.stdout) {
		w.tty, w.color = true, e.colorOut()
		if cols := e.termWidth(); cols > 20 {
			w.width = cols
		}
	}
	return w
}

// bpStep is one step of a run answer.
type bpStep struct {
	name, status, caption, path string
	ms                          int64
}

func bpSteps(r *apiclient.Response) []bpStep {
	var out []bpStep
	for _, s := range r.List("run.steps") {
		ms, _ := s["durationMs"].(float64)
		out = append(out, bpStep{name: str(s["name"]), status: str(s["status"]), caption: bpStr(s["caption"]),
			path: bpStr(s["path"]), ms: int64(ms)})
	}
	return out
}

// bpStr is a JSON string, or "".
func bpStr(v any) string {
	s, _ := v.(string)
	return s
}

// show brings the view up to date with a read of the run.
func (w *bpWatcher) show(r *apiclient.Response) {
	steps := bpSteps(r)
	for len(w.seen) < len(steps) {
		w.seen = append(w.seen, "pending")
		w.since = append(w.since, time.Time{})
	}
	for i, s := range steps {
		if s.status == "running" && w.since[i].IsZero() {
			w.since[i] = w.now()
		}
	}
	if w.tty {
		w.draw(r, steps)
		return
	}
	if st := r.Str("run.status"); st != w.status && st != "succeeded" && st != "failed" {
		line := fmt.Sprintf("run %s (%s", r.Str("run.id"), r.Str("run.mode"))
		if site := r.Str("run.siteId"); site != "" {
			line += " on site " + site
		}
		line += "): " + st
		if len(steps) > 0 {
			line += ", " + bpPlural(len(steps), "step")
		}
		fmt.Fprintln(w.out, line)
		w.status = st
	}
	for i, s := range steps {
		if s.status == w.seen[i] {
			continue
		}
		w.seen[i] = s.status
		line := fmt.Sprintf("step %d/%d %s: ", i+1, len(steps), s.name)
		switch s.status {
		case "succeeded":
			line += "done (" + bpDuration(s.ms) + ")"
		case "failed":
			line += "failed"
			if why := bpStepFailure(r, s); why != "" {
				line += ": " + why
			}
		default:
			line += s.status
		}
		fmt.Fprintln(w.out, line)
	}
}

// bpStepFailure is why a step failed: the run's reason without the
// step's own name in front.
func bpStepFailure(r *apiclient.Response, s bpStep) string {
	why := strings.TrimSpace(r.Str("run.failureReason"))
	return strings.TrimPrefix(why, s.path+" ("+s.name+"): ")
}

// draw redraws the run's header and step list over the last frame.
func (w *bpWatcher) draw(r *apiclient.Response, steps []bpStep) {
	var lines []string
	head := fmt.Sprintf("run %s · %s · %s", r.Str("run.id"), r.Str("run.mode"), w.paintStatus(r.Str("run.status")))
	if t, err := time.Parse(time.RFC3339Nano, r.Str("run.startedAt")); err == nil {
		end := w.now()
		if f, err := time.Parse(time.RFC3339Nano, r.Str("run.finishedAt")); err == nil {
			end = f
		}
		head += " · " + bpDuration(end.Sub(t).Milliseconds())
	}
	lines = append(lines, head)
	nameW := 4
	for _, s := range steps {
		nameW = min(22, max(nameW, len(s.name)))
	}
	numW := len(strconv.Itoa(len(steps)))
	for i, s := range steps {
		dur := ""
		switch {
		case s.status == "running":
			dur = bpDuration(w.now().Sub(w.since[i]).Milliseconds())
		case s.status == "succeeded" || s.status == "failed":
			dur = bpDuration(s.ms)
		}
		plain := fmt.Sprintf(" %s %*d %-*s %8s  %s", "x", numW, i+1, nameW, clip(s.name, nameW), dur, s.caption)
		// The symbol is one column wide: clip the plain line, then colour.
		plain = clip(plain, w.width-1)
		lines = append(lines, " "+w.symbol(s.status)+plain[2:])
	}
	var b strings.Builder
	if w.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA\r\x1b[J", w.drawn)
	}
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	io.WriteString(w.out, b.String())
	w.drawn = len(lines)
}

func (w *bpWatcher) symbol(status string) string {
	switch status {
	case "succeeded":
		return paint(w.color, "32", "✓")
	case "failed":
		return paint(w.color, "31", "✗")
	case "running":
		return paint(w.color, "33", "●")
	case "skipped":
		return paint(w.color, "2", "-")
	}
	return paint(w.color, "2", "·")
}

func (w *bpWatcher) paintStatus(s string) string {
	switch s {
	case "succeeded":
		return paint(w.color, "32", s)
	case "failed":
		return paint(w.color, "31", s)
	}
	return s
}

// end closes the view of a run that ended: a sentence when it
// succeeded, the tail of its log when it failed (the reason is the
// command's error, on stderr).
func (w *bpWatcher) end(r *apiclient.Response) {
	steps := bpSteps(r)
	if r.Str("run.status") == "succeeded" {
		took := ""
		s, serr := time.Parse(time.RFC3339Nano, r.Str("run.startedAt"))
		f, ferr := time.Parse(time.RFC3339Nano, r.Str("run.finishedAt"))
		if serr == nil && ferr == nil {
			took = " in " + bpDuration(f.Sub(s).Milliseconds())
		}
		fmt.Fprintf(w.out, "run %s succeeded: %s%s\n", r.Str("run.id"), bpPlural(len(steps), "step"), took)
		return
	}
	if w.tty {
		// The list has no room for why a step failed.
		for i, s := range steps {
			if s.status == "failed" {
				fmt.Fprintf(w.out, "step %d/%d %s: failed: %s\n", i+1, len(steps), s.name, bpStepFailure(r, s))
			}
		}
	}
	log := strings.Split(strings.TrimRight(r.Str("run.log"), "\n"), "\n")
	if len(log) == 1 && log[0] == "" {
		return
	}
	const tail = 15
	if len(log) > tail {
		log = log[len(log)-tail:]
	}
	fmt.Fprintf(w.out, "log (last %s):\n", bpPlural(len(log), "line"))
	for _, l := range log {
		fmt.Fprintln(w.out, "  "+clip(l, w.width-3))
	}
}

// interrupted leaves the terminal on a fresh line after Ctrl-C.
func (w *bpWatcher) interrupted() {
	if w.tty {
		fmt.Fprintln(w.out)
	}
}

// bpDuration is a time as a person reads it: 2.1 s, 3m05s, 2h07m.
func bpDuration(ms int64) string {
	s := ms / 1000
	switch {
	case ms < 60_000:
		return fmt.Sprintf("%.1f s", float64(max(ms, 0))/1000)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}
