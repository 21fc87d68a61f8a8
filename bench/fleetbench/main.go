// Command fleetbench measures the control plane under a fleet: N
// simulated node agents (each enrolled with its own join token and
// certificate, talking mutual TLS and Connect RPC, all in a child
// process so that this process's CPU is the servers') registering and
// heartbeating against three servers (real Raft over mutual TLS, fsync
// on, default timeouts) in this process. In one run, each figure against
// a baseline measured in the same run, alternated with it (baseline,
// subject, baseline, subject):
//
//   - server CPU per heartbeat: this process's CPU with the fleet
//     heartbeating, less the same with the fleet connected but idle;
//   - placements committed per second (POST /api/app/sites from many
//     clients, each answer after the site and its create job are one
//     committed Raft entry) with the fleet as candidates, next to the same
//     on a second cluster of a few nodes (both fleets heartbeat
//     throughout, so the background is the same);
//   - failover: the leader killed while clients create sites at a steady
//     rate and the fleet heartbeats; the time until a create commits
//     again and until heartbeats are accepted again, next to the
//     configured election timeout.
//
// CPU is split between the leader, the followers, the API clients and
// the rest by the goroutine labels each server's goroutines carry, read
// back from a profile of each measurement.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	raft "github.com/sandboxd/sandboxd/controlplane/cluster"
)

// opts are the run's parameters.
type opts struct {
	agents, baseAgents int
	seconds            time.Duration
	interval           time.Duration
	clients            int
	pairs              int
	failovers          int
	failoverRate       int
	parallel           int
	cpuprofile         string
	hbprofile          string
	phases             map[string]bool
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == childFlag {
		if err := runFleet(); err != nil {
			fmt.Fprintln(os.Stderr, "fleetbench fleet:", err)
			os.Exit(1)
		}
		return
	}
	var o opts
	var seconds float64
	var phases string
	var timeout time.Duration
	flag.IntVar(&o.agents, "agents", 1000, "simulated node agents")
	flag.IntVar(&o.baseAgents, "baseline-agents", 10, "node agents of the baseline cluster placements are compared with")
	flag.Float64Var(&seconds, "seconds", 5, "length of each measurement")
	flag.DurationVar(&o.interval, "interval", 2*time.Second, "heartbeat interval the servers tell agents")
	flag.IntVar(&o.clients, "clients", 32, "concurrent API clients creating sites (each its own account)")
	flag.IntVar(&o.pairs, "pairs", 2, "baseline/subject pairs per comparison")
	flag.IntVar(&o.failovers, "failovers", 3, "leader kills under load (0: none)")
	flag.IntVar(&o.failoverRate, "failover-rate", 200, "creates per second sent while the leader is killed")
	flag.IntVar(&o.parallel, "enrol-parallel", 16, "agents enrolling at once")
	flag.StringVar(&phases, "phases", "heartbeats,placements,failover", "what to measure, comma-separated")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the first placement run on the fleet to this file")
	flag.StringVar(&o.hbprofile, "hbprofile", "", "write a CPU profile of the first heartbeating measurement to this file")
	flag.DurationVar(&timeout, "timeout", 30*time.Minute, "stop (and clean up) after this long")
	flag.BoolVar(&verbose, "v", false, "print each step to stderr as it starts")
	flag.BoolVar(&logs, "log", false, "print the servers' warnings and errors to stderr")
	flag.Parse()
	o.seconds = time.Duration(seconds * float64(time.Second))
	o.phases = map[string]bool{}
	for _, p := range strings.Split(phases, ",") {
		switch p = strings.TrimSpace(p); p {
		case "heartbeats", "placements", "failover":
			o.phases[p] = true
		default:
			fmt.Fprintf(os.Stderr, "fleetbench: unknown phase %q (heartbeats, placements, failover)\n", p)
			os.Exit(2)
		}
	}
	// A paused fleet must stay under the down-after (5 intervals) with
	// the interval before the pause and the resume's spread.
	if lim := 5 * o.interval / 2; o.seconds > lim {
		fmt.Printf("fleetbench: -seconds lowered to %s: a paused fleet would be marked down\n", lim)
		o.seconds = lim
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
}

// fleetRun is a cluster with its fleet.
type fleetRun struct {
	c     *cluster
	f     *child
	users []string
}

func run(ctx context.Context, o opts) error {
	dir, err := os.MkdirTemp("", "fleetbench-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	var res results
	res.o = o

	big, err := startFleet(ctx, "fleet", filepath.Join(dir, "fleet"), o.agents, o, &res)
	defer big.close()
	if err != nil {
		return err
	}
	if o.phases["heartbeats"] {
		if err := heartbeatCPU(ctx, big, o, &res); err != nil {
			return err
		}
	}
	if o.phases["placements"] {
		if err := placementPairs(ctx, big, dir, o, &res); err != nil {
			return err
		}
	}
	for i := 0; o.phases["failover"] && i < o.failovers; i++ {
		f, err := failover(ctx, big, o)
		if err != nil {
			return err
		}
		res.fail = append(res.fail, f)
		fmt.Printf("  failover %d: creates back after %s, heartbeats after %s (99%% of agents %s)\n", i+1,
			f.creates.Round(time.Millisecond), f.hbFirst.Round(time.Millisecond), f.hb99.Round(time.Millisecond))
	}
	res.print()
	return nil
}

// placementPairs alternates placements on a cluster of a few nodes
// (started here, stopped at the end) and on the fleet.
func placementPairs(ctx context.Context, big *fleetRun, dir string, o opts, res *results) error {
	small, err := startFleet(ctx, "baseline", filepath.Join(dir, "baseline"), o.baseAgents, o, nil)
	defer small.close()
	if err != nil {
		return err
	}
	for i := 0; i < o.pairs; i++ {
		a, err := placementRun(ctx, small, o, "")
		if err != nil {
			return err
		}
		prof := ""
		if i == 0 {
			prof = o.cpuprofile
		}
		b, err := placementRun(ctx, big, o, prof)
		if err != nil {
			return err
		}
		res.place = append(res.place, [2]placeResult{a, b})
		fmt.Printf("  placements pair %d: %d nodes %.0f/s, %d nodes %.0f/s\n", i+1, o.baseAgents, a.w.perSec, o.agents, b.w.perSec)
	}
	return nil
}

// startFleet starts a cluster and a fleet of n agents registered with it.
func startFleet(ctx context.Context, name, dir string, n int, o opts, res *results) (*fleetRun, error) {
	fr := &fleetRun{}
	t0 := time.Now()
	step("%s: starting 3 servers", name)
	c, err := startCluster(ctx, name, dir, o.interval)
	fr.c = c
	if err != nil {
		return fr, err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%04d", i+1)
	}
	tokens, err := c.joinTokens(ctx, names)
	if err != nil {
		return fr, err
	}
	step("%s: %d agents enrol and register", name, n)
	if fr.f, err = startChild(name); err != nil {
		return fr, err
	}
	r, err := fr.f.do(command{Op: "start", Servers: c.clusterURLs(), Names: names, Tokens: tokens, Interval: o.interval, Parallel: o.parallel})
	if err != nil {
		return fr, err
	}
	if err := c.waitFor(ctx, time.Minute, "every node ready", func() bool {
		ready, _, _ := c.readyNodes(ctx)
		return ready == n
	}); err != nil {
		return fr, err
	}
	if fr.users, err = c.accounts(ctx, o.clients); err != nil {
		return fr, err
	}
	fmt.Printf("fleetbench: %s: 3 servers and %d agents up in %.1fs (enrolment %.1fs, registration %.1fs)\n",
		name, n, time.Since(t0).Seconds(), r.EnrolSeconds, r.RegisterSeconds)
	if res != nil {
		res.enrol, res.register = r.EnrolSeconds, r.RegisterSeconds
	}
	return fr, nil
}

func (fr *fleetRun) close() {
	if fr == nil {
		return
	}
	if fr.c != nil {
		step("%s: stopping", fr.c.name)
	}
	if fr.f != nil {
		fr.f.stop()
	}
	if fr.c != nil {
		fr.c.close()
	}
}

// hbPhase is one measurement of the heartbeat comparison.
type hbPhase struct {
	dur              time.Duration
	cpu, agentCPU    time.Duration
	heartbeats       int64
	failed           int64
	p50, p99         float64
	heartbeatsPerSec float64
	byLabel          map[string]time.Duration // sampled CPU by server
}

// heartbeatCPU alternates the fleet idle but connected (baseline) and
// heartbeating, measuring this process's CPU in each.
func heartbeatCPU(ctx context.Context, fr *fleetRun, o opts, res *results) error {
	leader, err := fr.c.leader(ctx)
	if err != nil {
		return err
	}
	res.hbLeader = fr.c.name + "/" + leader.Node().ID()
	phase := func(beating bool, profile string) (hbPhase, error) {
		if beating {
			fr.f.must("resume")
			// Let every agent's resumed loop settle into its interval.
			sleep(ctx, o.interval)
		} else {
			fr.f.must("pause")
			sleep(ctx, 200*time.Millisecond)
		}
		prof, err := startProfile(profile)
		if err != nil {
			return hbPhase{}, err
		}
		s0 := fr.f.must("stats")
		c0, t0 := processCPU(), time.Now()
		sleep(ctx, o.seconds)
		c1, t1 := processCPU(), time.Now()
		s1 := fr.f.must("stats")
		byLabel, err := prof.stop()
		if err != nil {
			return hbPhase{}, err
		}
		if ctx.Err() != nil {
			return hbPhase{}, ctx.Err()
		}
		p := hbPhase{dur: t1.Sub(t0), cpu: time.Duration(c1 - c0), agentCPU: time.Duration(s1.CPUNanos - s0.CPUNanos),
			heartbeats: s1.OK - s0.OK, failed: s1.Failed - s0.Failed, p50: s1.P50Ms, p99: s1.P99Ms, byLabel: byLabel}
		p.heartbeatsPerSec = float64(p.heartbeats) / p.dur.Seconds()
		return p, nil
	}
	for i := 0; i < o.pairs; i++ {
		idle, err := phase(false, "")
		if err != nil {
			return err
		}
		prof := ""
		if i == 0 {
			prof = o.hbprofile
		}
		beat, err := phase(true, prof)
		if err != nil {
			return err
		}
		res.hb = append(res.hb, [2]hbPhase{idle, beat})
		fmt.Printf("  heartbeats pair %d: idle %.1f%% CPU, heartbeating %.1f%% CPU at %.0f/s\n", i+1,
			100*idle.cpu.Seconds()/idle.dur.Seconds(), 100*beat.cpu.Seconds()/beat.dur.Seconds(), beat.heartbeatsPerSec)
	}
	return nil
}

// placeResult is one placement measurement.
type placeResult struct {
	nodes    int
	w        window
	cpu      time.Duration
	backlog  int
	jobsDone float64 // create jobs finished per second in the window
	leader   string
	terms    uint64 // elections during the measurement (0: one leader throughout)
	byLabel  map[string]time.Duration
	drain    time.Duration
	notReady int
}

// placementRun measures creates against fr's leader for o.seconds (after
// a second's warm-up), then waits for their create jobs to finish. Both
// fleets heartbeat throughout, so the background is the same for the
// baseline and the subject.
func placementRun(ctx context.Context, fr *fleetRun, o opts, profile string) (placeResult, error) {
	var p placeResult
	step("%s: placements", fr.c.name)
	ready, all, err := fr.c.readyNodes(ctx)
	if err != nil {
		return p, err
	}
	p.nodes, p.notReady = all, all-ready
	leader, err := fr.c.leader(ctx)
	if err != nil {
		return p, err
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan []*creator, 1)
	go func() { done <- placements(lctx, fr.users, fr.c.apiURLs(), fr.c.index(leader)) }()
	sleep(ctx, time.Second)
	prof, err := startProfile(profile)
	if err != nil {
		cancel()
		<-done
		return p, err
	}
	term0 := leader.Node().Term()
	u0, err := fr.c.backlog(ctx)
	if err != nil {
		cancel()
		<-done
		_, _ = prof.stop()
		return p, err
	}
	c0, t0 := processCPU(), time.Now()
	sleep(ctx, o.seconds)
	c1, t1 := processCPU(), time.Now()
	u1, err := fr.c.backlog(ctx)
	if now, lerr := fr.c.leader(ctx); lerr == nil {
		p.terms = now.Node().Term() - term0
	}
	byLabel, perr := prof.stop()
	cancel()
	cs := <-done
	if ctx.Err() != nil {
		return p, ctx.Err()
	}
	if err != nil {
		return p, err
	}
	if perr != nil {
		return p, perr
	}
	p.byLabel = byLabel
	p.w = measure(cs, t0, t1)
	p.cpu = time.Duration(c1 - c0)
	// Each create queued one job: those not left in the backlog finished.
	p.jobsDone = float64(p.w.n-(u1-u0)) / t1.Sub(t0).Seconds()
	p.leader = fr.c.name + "/" + leader.Node().ID()
	if p.backlog, err = fr.c.backlog(ctx); err != nil {
		return p, err
	}
	var left int
	step("%s: waiting for %d create jobs", fr.c.name, p.backlog)
	if p.drain, left, err = fr.c.drain(ctx, 2*time.Minute); err != nil {
		return p, err
	}
	if left > 0 {
		return p, fmt.Errorf("%s: %d create jobs still unfinished two minutes after the load", fr.c.name, left)
	}
	return p, nil
}

// failResult is one leader kill under load.
type failResult struct {
	creates, hbFirst, hb99, hbAll time.Duration
	createFailed                  int
	why                           map[string]int
	terms                         uint64 // Raft terms the kill took
	hbFailed                      int64
	before                        float64
}

// failover kills fr's leader while clients create sites at a steady
// rate and the fleet heartbeats, measures when each comes back, then
// restarts the server. The rate is below what the cluster commits: a
// saturated leader is late with its Raft heartbeats, and elections that
// overload starts would be counted as the kill's.
func failover(ctx context.Context, fr *fleetRun, o opts) (failResult, error) {
	var r failResult
	fr.f.must("resume")
	leader, err := fr.c.leader(ctx)
	if err != nil {
		return r, err
	}
	li := fr.c.index(leader)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan []*creator, 1)
	l := &load{Rate: o.failoverRate}
	go func() { done <- l.run(lctx, fr.users, fr.c.apiURLs(), li) }()
	// The kill waits for a second of creates at half the rate or more,
	// under a leader that has held its term for three seconds.
	term, since := leader.Node().Term(), time.Now()
	for start := time.Now(); time.Since(start) < 30*time.Second; {
		n0 := l.Answered.Load()
		sleep(ctx, time.Second)
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		if t := leader.Node().Term(); !leader.Node().IsLeader() || t != term {
			if leader, err = fr.c.leader(ctx); err != nil {
				return r, err
			}
			li, term, since = fr.c.index(leader), leader.Node().Term(), time.Now()
			continue
		}
		if rate := l.Answered.Load() - n0; rate >= int64(o.failoverRate/2) && time.Since(since) >= 3*time.Second {
			break
		}
	}
	survivor := fr.c.servers[(li+1)%3]
	step("%s: killing %s", fr.c.name, fr.c.cfgs[li].NodeID)
	s0 := fr.f.must("stats")
	kill := time.Now()
	fr.c.kill(li)
	if _, err := fr.f.do(command{Op: "mark", At: kill.UnixNano()}); err != nil {
		return r, err
	}
	var rec reply
	for time.Since(kill) < 30*time.Second && ctx.Err() == nil {
		sleep(ctx, 250*time.Millisecond)
		if rec, err = fr.f.do(command{Op: "recovery"}); err != nil {
			return r, err
		}
		if rec.All != 0 {
			break
		}
	}
	sleep(ctx, time.Second)
	r.terms = survivor.Node().Term() - term
	cancel()
	cs := <-done
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	first, err := firstAfter(cs, kill)
	if err != nil {
		return r, err
	}
	after := func(ns int64) time.Duration {
		if ns == 0 {
			return -1
		}
		return time.Duration(ns - kill.UnixNano())
	}
	r.creates, r.hbFirst, r.hb99, r.hbAll = after(first), after(rec.First), after(rec.P99), after(rec.All)
	r.before = measure(cs, kill.Add(-time.Second), kill).perSec
	for _, c := range cs {
		r.createFailed += c.failed
	}
	r.why = failures(cs)
	r.hbFailed = rec.Failed - s0.Failed
	step("%s: restarting %s", fr.c.name, fr.c.cfgs[li].NodeID)
	if err := fr.c.restart(ctx, li); err != nil {
		return r, err
	}
	if _, left, err := fr.c.drain(ctx, 2*time.Minute); err != nil || left > 0 {
		return r, fmt.Errorf("after failover: %d jobs unfinished (%v)", left, err)
	}
	return r, nil
}

// verbose prints each step (-v).
var verbose bool

// step says what the run does next, with -v.
func step(format string, args ...any) {
	if verbose {
		fmt.Fprintf(os.Stderr, "%s fleetbench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// Raft's timeouts, the failover baseline.
var (
	electionTimeout  = raft.DefaultElectionTimeout
	heartbeatTimeout = raft.DefaultHeartbeatTimeout
)
