package sitejobs

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/scheduler"
)

// TombstoneTTL is how long a deleted site's node is told to remove its
// copy when it comes back.
const TombstoneTTL = 30 * 24 * time.Hour

// Placer offers the nodes a site may be moved to.
type Placer interface {
	Candidates() ([]scheduler.Node, error)
}

// FleetConfig tunes the leader's care of sites across nodes.
type FleetConfig struct {
	// SnapshotEvery is how old a site's latest snapshot may get before
	// another is taken; zero takes none on a schedule.
	SnapshotEvery time.Duration
	// SnapshotsPerTick bounds how many scheduled snapshots start at once;
	// zero means 4.
	SnapshotsPerTick int
	// RescheduleAfter is how long a node may be down before its sites are
	// restored elsewhere from their snapshots; zero never does it.
	RescheduleAfter time.Duration
	// Tick is how often the leader looks; zero means 2s.
	Tick     time.Duration
	Placer   Placer
	Strategy scheduler.Strategy
	// SiteMemoryMB is what the scheduler reserves for a site.
	SiteMemoryMB int64
}

// Fleet is leader work: scheduled snapshots, restoring a lost node's
// sites on other nodes, and moving a draining node's sites away, one at
// a time per node.
func (r *Runners) Fleet(ctx context.Context, cfg FleetConfig) {
	tick := cfg.Tick
	if tick == 0 {
		tick = 2 * time.Second
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	var pruned time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(pruned) > time.Hour {
			// Deleted sites are remembered a month, for nodes away that long.
			if _, err := r.Raft.Apply(ctx, fsm.PruneTombstones{Before: r.now().Add(-TombstoneTTL)}); err == nil {
				pruned = time.Now()
			}
		}
		sites, _, err := r.Store.AllSites()
		if err != nil {
			continue
		}
		r.forgetGone(sites)
		nodes, err := r.Store.Nodes()
		if err != nil {
			continue
		}
		byID := map[string]*state.Node{}
		for _, n := range nodes {
			byID[n.ID] = n
		}
		if cfg.SnapshotEvery > 0 {
			r.scheduleSnapshots(ctx, sites, byID, cfg)
		}
		r.moveAway(ctx, sites, byID, cfg)
	}
}

// forgetGone drops what the fleet remembers of sites that no longer
// exist (failed moves and snapshots, snapshot jobs), so the leader's
// memory follows the sites it has, not every site it ever had.
func (r *Runners) forgetGone(sites []*state.Site) {
	live := make(map[string]bool, len(sites))
	for _, s := range sites {
		live[s.ID] = true
	}
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	for id := range r.failedMoves {
		if !live[id] {
			delete(r.failedMoves, id)
		}
	}
	for id := range r.failedSnaps {
		if !live[id] {
			delete(r.failedSnaps, id)
		}
	}
	for id := range r.snapJobs {
		if !live[id] {
			delete(r.snapJobs, id)
		}
	}
}

// scheduleSnapshots queues snapshots of running sites whose latest is
// older than SnapshotEvery (or missing), oldest first, a few a tick.
func (r *Runners) scheduleSnapshots(ctx context.Context, sites []*state.Site, nodes map[string]*state.Node, cfg FleetConfig) {
	per := cfg.SnapshotsPerTick
	if per == 0 {
		per = 4
	}
	now := r.now()
	type due struct {
		site *state.Site
		last time.Time
	}
	var list []due
	for _, s := range sites {
		if s.Pool != "" || s.Status != state.SiteReady || s.Move != nil {
			continue
		}
		if n := nodes[s.NodeID]; n == nil || n.Status != state.NodeReady {
			continue
		}
		var last time.Time
		if sn, err := r.Store.LatestSnapshot(s.ID); err != nil {
			continue
		} else if sn != nil {
			last = sn.CreatedAt
		}
		if now.Sub(last) < cfg.SnapshotEvery || r.pendingSnapshot(s.ID) {
			continue
		}
		// A site whose last snapshot failed (an agent too old, a site too
		// big) is tried again a period later, not at every tick.
		r.snapMu.Lock()
		failed, ok := r.failedSnaps[s.ID]
		r.snapMu.Unlock()
		if ok && time.Since(failed) < max(cfg.SnapshotEvery, time.Minute) {
			continue
		}
		list = append(list, due{s, last})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].last.Before(list[j].last) })
	for _, d := range list[:min(per, len(list))] {
		j, err := jobs.New(jobspec.SnapshotSite, d.site.WorkspaceID, d.site.ID, jobspec.SnapshotPayload{Reason: SnapshotSchedule}, now)
		if err != nil {
			continue
		}
		if _, err := r.Raft.Apply(ctx, fsm.CreateJob{Job: j}); err == nil {
			r.snapMu.Lock()
			if r.snapJobs == nil {
				r.snapJobs = map[string]string{}
			}
			r.snapJobs[d.site.ID] = j.ID
			r.snapMu.Unlock()
		}
	}
}

// pendingSnapshot reports a scheduled snapshot of the site not yet ended.
func (r *Runners) pendingSnapshot(siteID string) bool {
	r.snapMu.Lock()
	id, ok := r.snapJobs[siteID]
	r.snapMu.Unlock()
	if !ok {
		return false
	}
	j, err := r.Store.Job(id)
	if err == nil && (j == nil || j.Terminal()) {
		r.snapMu.Lock()
		delete(r.snapJobs, siteID)
		if r.failedSnaps == nil {
			r.failedSnaps = map[string]time.Time{}
		}
		if j != nil && j.Status == state.JobFailed {
			r.failedSnaps[siteID] = time.Now()
		} else {
			delete(r.failedSnaps, siteID)
		}
		r.snapMu.Unlock()
		return false
	}
	return true
}

// moveAway starts moves: every site of a draining node (one at a time
// per node), and every site of a node down for RescheduleAfter that has
// a snapshot.
func (r *Runners) moveAway(ctx context.Context, sites []*state.Site, nodes map[string]*state.Node, cfg FleetConfig) {
	now := r.now()
	moving := map[string]int{} // from node → moves in progress
	for _, s := range sites {
		if s.Move != nil {
			moving[s.Move.From]++
		}
	}
	var candidates []scheduler.Node
	for _, s := range sites {
		n := nodes[s.NodeID]
		if n == nil || s.Move != nil || s.Pool != "" {
			continue
		}
		r.snapMu.Lock()
		failed, ok := r.failedMoves[s.ID]
		r.snapMu.Unlock()
		if ok && time.Since(failed) < time.Minute {
			continue
		}
		var reason string
		switch {
		case n.Status == state.NodeDown && cfg.RescheduleAfter > 0 && now.Sub(n.UpdatedAt) >= cfg.RescheduleAfter &&
			s.Status == state.SiteUnavailable:
			if sn, err := r.Store.LatestSnapshot(s.ID); err != nil || sn == nil {
				continue // nothing to restore from: it waits for its node
			}
			reason = state.MoveReschedule
		case n.Drain != nil && n.Status == state.NodeReady && s.Status == state.SiteReady && moving[n.ID] == 0:
			reason = state.MoveDrain
		default:
			continue
		}
		if candidates == nil {
			var err error
			if candidates, err = cfg.Placer.Candidates(); err != nil {
				return
			}
		}
		p, err := scheduler.Place(candidates, scheduler.Request{PHPVersion: s.PHPVersion, Needs: scheduler.Resources{MemoryMB: cfg.SiteMemoryMB}}, cfg.Strategy)
		if err != nil || p.NodeID == n.ID {
			continue // nowhere to go now; tried again next tick
		}
		j, err := jobs.New(jobspec.MoveSite, s.WorkspaceID, s.ID, jobspec.MovePayload{To: p.NodeID, Reason: reason}, now)
		if err != nil {
			continue
		}
		move := state.SiteMove{JobID: j.ID, From: n.ID, To: p.NodeID, Reason: reason, StartedAt: now}
		if _, err := r.Raft.Apply(ctx, fsm.StartMove{SiteID: s.ID, Move: move, Job: j}); err != nil && !errors.Is(err, state.ErrConflict) {
			return
		}
		moving[n.ID]++
		// The placement counts against the target for the next site.
		for i := range candidates {
			if candidates[i].ID == p.NodeID {
				candidates[i].Used.Sites++
				candidates[i].Used.MemoryMB += cfg.SiteMemoryMB
			}
		}
	}
}
