package main

import (
	"fmt"
	"strings"
	"time"
)

// results is everything the run measured, printed at its end.
type results struct {
	o               opts
	enrol, register float64
	hb              [][2]hbPhase // idle, heartbeating
	hbLeader        string
	place           [][2]placeResult // baseline cluster, fleet
	fail            []failResult
}

func (r *results) print() {
	o := r.o
	fmt.Printf("\nfleetbench: %d agents (heartbeat every %s, spread over 3 servers), %s per measurement, %d pairs alternated\n",
		o.agents, o.interval, o.seconds, o.pairs)
	fmt.Printf("  enrolment (join token → certificate, %d at once) / registration:  %.1f s / %.1f s\n", o.parallel, r.enrol, r.register)

	if len(r.hb) > 0 {
		fmt.Printf("heartbeats: this process (3 servers, leader %s) with the fleet idle but connected (A) / heartbeating (B)\n", r.hbLeader)
	}
	var sumUS, sumRate, sumAgent float64
	var roles [4]float64
	for i, p := range r.hb {
		a, b := p[0], p[1]
		us := perHeartbeat(a, b)
		for j, x := range hbRoles(a, b, r.hbLeader, us) {
			roles[j] += x
		}
		sumUS += us
		sumRate += b.heartbeatsPerSec
		agent := b.agentCPU.Seconds() / float64(max(b.heartbeats, 1)) * 1e6
		sumAgent += agent
		fmt.Printf("  pair %d: CPU %5.1f%% / %5.1f%% of a core, %6.0f heartbeats/s (p50 %.1f ms, p99 %.1f ms, %d failed): %6.1f µs server CPU per heartbeat (agent side %.1f µs)\n",
			i+1, pct(a.cpu, a.dur), pct(b.cpu, b.dur), b.heartbeatsPerSec, b.p50, b.p99, b.failed, us, agent)
	}
	if n := float64(len(r.hb)); n > 0 {
		fmt.Printf("  server CPU per heartbeat, mean of pairs:              %8.1f µs  (%.0f heartbeats/s sustained, %.1f%% of a core; agent side %.1f µs)\n",
			sumUS/n, sumRate/n, sumUS/n*sumRate/n/1e4, sumAgent/n)
		fmt.Printf("    of which the leader %.0f µs, the two followers (a third of the agents each, forwarding) %.0f µs, the rest (GC, runtime) %.0f µs\n",
			roles[0]/n, roles[1]/n, (roles[2]+roles[3])/n)
	}

	if len(r.place) > 0 {
		fmt.Printf("placements: POST /api/app/sites, %d clients, against the leader; %d nodes (A) / %d nodes (B)\n", o.clients, o.baseAgents, o.agents)
	}
	var sa, sb float64
	for i, p := range r.place {
		a, b := p[0], p[1]
		sa += a.w.perSec
		sb += b.w.perSec
		fmt.Printf("  pair %d: %6.0f / %6.0f sites/s committed (%.2fx), p50 %s / %s, p99 %s / %s, process CPU per site %s / %s\n",
			i+1, a.w.perSec, b.w.perSec, b.w.perSec/a.w.perSec, msStr(a.w.p50), msStr(b.w.p50), msStr(a.w.p99), msStr(b.w.p99),
			usStr(a.cpu, a.w.n), usStr(b.cpu, b.w.n))
		fmt.Printf("          create jobs finished %.0f / %.0f per s; %d / %d left at the end, done %s / %s later (leaders %s, %s)\n",
			a.jobsDone, b.jobsDone, a.backlog, b.backlog, a.drain.Round(100*time.Millisecond), b.drain.Round(100*time.Millisecond), a.leader, b.leader)
		ra, rb := siteRoles(a), siteRoles(b)
		fmt.Printf("          CPU per site: leader %.0f / %.0f µs, followers %.0f / %.0f µs, API clients %.0f / %.0f µs, the rest (GC, runtime, the other cluster) %.0f / %.0f µs\n",
			ra[0], rb[0], ra[1], rb[1], ra[2], rb[2], ra[3], rb[3])
		if a.terms+b.terms > 0 {
			fmt.Printf("          warning: %d / %d elections during the measurement (an overloaded leader missed its Raft heartbeats)\n", a.terms, b.terms)
		}
		if a.notReady+b.notReady > 0 {
			fmt.Printf("  warning: %d / %d nodes were not ready at the start\n", a.notReady, b.notReady)
		}
	}
	if n := float64(len(r.place)); n > 0 {
		verdict := "met"
		if sb/n < 1000 {
			verdict = "NOT met"
		}
		fmt.Printf("  sites/s committed with %d nodes, mean:                %8.0f  (%.2fx the %d-node baseline; goal >= 1000: %s)\n",
			o.agents, sb/n, sb/sa, o.baseAgents, verdict)
	}

	if len(r.fail) > 0 {
		fmt.Printf("failover: leader killed, %d creates/s sent and the fleet heartbeating; election timeout %s (baseline), heartbeat timeout %s\n",
			o.failoverRate, electionTimeout, heartbeatTimeout)
	}
	for i, f := range r.fail {
		fmt.Printf("  kill %d: creates (%.0f/s before) commit again after %s (%.2fx), heartbeats accepted again after %s (%.2fx); 99%% of agents %s, all %s; %d creates and %d heartbeats failed; %d Raft terms\n",
			i+1, f.before, msStr(f.creates), ratio(f.creates), msStr(f.hbFirst), ratio(f.hbFirst), msStr(f.hb99), msStr(f.hbAll), f.createFailed, f.hbFailed, f.terms)
		if len(f.why) > 0 {
			fmt.Printf("          creates failed with: %v\n", f.why)
		}
	}
}

// roles splits sampled CPU into the leader's, the followers' (servers of
// the leader's cluster), the API clients' and the rest.
func roles(m map[string]time.Duration, leader string) [4]time.Duration {
	cluster, _, _ := strings.Cut(leader, "/")
	var out [4]time.Duration
	for k, v := range m {
		switch {
		case k == leader:
			out[0] += v
		case strings.HasPrefix(k, cluster+"/"):
			out[1] += v
		case k == "api-clients":
			out[2] += v
		default:
			out[3] += v
		}
	}
	return out
}

// hbRoles splits us, the CPU per heartbeat, by what the profiles of the
// idle and heartbeating measurements sampled for each role.
func hbRoles(idle, beat hbPhase, leader string, us float64) [4]float64 {
	a, b := roles(idle.byLabel, leader), roles(beat.byLabel, leader)
	var extra [4]float64
	var sum float64
	for i := range extra {
		extra[i] = b[i].Seconds()/beat.dur.Seconds() - a[i].Seconds()/idle.dur.Seconds()
		sum += extra[i]
	}
	var out [4]float64
	for i := range out {
		if sum > 0 {
			out[i] = us * extra[i] / sum
		}
	}
	return out
}

// siteRoles is the process CPU per committed site (µs) split by role as
// the profile sampled it.
func siteRoles(p placeResult) [4]float64 {
	r := roles(p.byLabel, p.leader)
	var sampled time.Duration
	for _, x := range r {
		sampled += x
	}
	var out [4]float64
	if sampled == 0 || p.w.n == 0 {
		return out
	}
	for i, x := range r {
		out[i] = p.cpu.Seconds() * (x.Seconds() / sampled.Seconds()) / float64(p.w.n) * 1e6
	}
	return out
}

// perHeartbeat is the CPU the heartbeats added, per heartbeat (µs).
func perHeartbeat(idle, beat hbPhase) float64 {
	extra := beat.cpu.Seconds()/beat.dur.Seconds() - idle.cpu.Seconds()/idle.dur.Seconds()
	return extra / beat.heartbeatsPerSec * 1e6
}

func pct(cpu, dur time.Duration) float64 { return 100 * cpu.Seconds() / dur.Seconds() }

func ratio(d time.Duration) float64 { return d.Seconds() / electionTimeout.Seconds() }

func msStr(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

func usStr(cpu time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f µs", cpu.Seconds()/float64(n)*1e6)
}
