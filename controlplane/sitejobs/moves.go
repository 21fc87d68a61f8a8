package sitejobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ids"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// Snapshot and move settings.
const (
	// DefaultSnapshotsKept is how many snapshots of a site are kept.
	DefaultSnapshotsKept = 2
	// MaxSnapshot bounds one snapshot (both parts).
	MaxSnapshot = 16 << 30
)

// SnapshotReasons say why a snapshot was taken.
const (
	SnapshotSchedule = "schedule"
	SnapshotOperator = "operator"
	SnapshotDrain    = "drain"
)

func (r *Runners) snapshotsKept() int {
	if r.SnapshotsKept > 0 {
		return r.SnapshotsKept
	}
	return DefaultSnapshotsKept
}

// snapshotSite takes a snapshot of a running site into the blob store.
func (r *Runners) snapshotSite(ctx context.Context, j *state.Job, progress func(int)) error {
	var p jobspec.SnapshotPayload
	if len(j.Payload) > 0 {
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			return fmt.Errorf("%s payload: %w", j.Type, err)
		}
	}
	s, err := r.Store.Site(j.SiteID)
	if err != nil {
		return err
	}
	if s == nil {
		return nil // deleted meanwhile
	}
	if s.Status != state.SiteReady {
		return &jobs.Failure{Code: "invalid_request", Message: "the site is " + s.Status + "; only a running site is snapshotted"}
	}
	progress(10)
	_, err = r.takeSnapshot(ctx, s, s.NodeID, j.ID, p.Reason)
	return err
}

// takeSnapshot streams a snapshot of site s from node into the blob
// store and records it.
func (r *Runners) takeSnapshot(ctx context.Context, s *state.Site, node, jobID, reason string) (*state.SiteSnapshot, error) {
	if r.Artifacts == nil {
		return nil, &jobs.Failure{Code: "service_unavailable", Message: "no blob store for snapshots"}
	}
	agent, err := r.Agents.Agent(node)
	if err != nil {
		return nil, &jobs.Failure{Code: "node_unavailable", Message: err.Error()}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := agent.SnapshotSite(ctx, connect.NewRequest(&agentv1.SnapshotSiteRequest{SiteId: s.ID, JobId: jobID, MaxBytes: MaxSnapshot}))
	if err != nil {
		return nil, snapshotFailure(err)
	}
	defer stream.Close()
	type stored struct {
		sha  string
		size int64
		err  error
	}
	// Each part streams into the blob store as it arrives.
	var pw *io.PipeWriter
	var result chan stored
	var sums []stored
	open := func() {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		result = make(chan stored, 1)
		ch := result
		go func() {
			sha, n, err := r.Artifacts.PutStream(ctx, pr, MaxSnapshot)
			pr.CloseWithError(errors.New("the blob store stopped reading"))
			ch <- stored{sha, n, err}
		}()
	}
	closePart := func() error {
		if pw == nil {
			return nil
		}
		pw.Close()
		st := <-result
		pw = nil
		if st.err != nil {
			return fmt.Errorf("storing the snapshot: %w", st.err)
		}
		sums = append(sums, st)
		return nil
	}
	fail := func(err error) (*state.SiteSnapshot, error) {
		if pw != nil {
			pw.CloseWithError(err)
			<-result
		}
		return nil, err
	}
	part := agentv1.SnapshotPart_SNAPSHOT_PART_UNSPECIFIED
	var last *agentv1.SnapshotChunk
	for stream.Receive() {
		m := stream.Msg()
		if m.Done {
			last = m
			break
		}
		if m.Part != part {
			if m.Part < part || m.Part == agentv1.SnapshotPart_SNAPSHOT_PART_UNSPECIFIED {
				return fail(fmt.Errorf("snapshot stream out of order: part %v after %v", m.Part, part))
			}
			if err := closePart(); err != nil {
				return fail(err)
			}
			part = m.Part
			open()
		}
		if _, err := pw.Write(m.Data); err != nil {
			return fail(fmt.Errorf("storing the snapshot: %w", err))
		}
	}
	if err := stream.Err(); err != nil {
		return fail(snapshotFailure(err))
	}
	if last == nil {
		return fail(errors.New("the snapshot stream ended before it was done"))
	}
	if err := closePart(); err != nil {
		return fail(err)
	}
	if len(sums) != 2 || sums[0].size != last.FilesBytes || sums[1].size != last.DatabaseBytes {
		return nil, fmt.Errorf("the snapshot's parts do not match its sizes (%d parts)", len(sums))
	}
	now := r.now()
	sn := state.SiteSnapshot{ID: ids.New("snap"), SiteID: s.ID, NodeID: node, FilesSHA256: sums[0].sha, FilesBytes: sums[0].size,
		DatabaseSHA256: sums[1].sha, DatabaseBytes: sums[1].size, Reason: reason, TakenAt: time.UnixMilli(last.TakenAtUnixMs).UTC(),
		CreatedAt: now}
	if _, err := r.Raft.Apply(ctx, fsm.AddSnapshot{Snapshot: sn, Keep: r.snapshotsKept()}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, nil // the site was deleted meanwhile
		}
		return nil, err
	}
	return &sn, nil
}

// moveSite moves a site to the node its move names: from the running
// site (a drain: copied while it serves, then copied again, briefly
// unavailable, for the switch), or from its latest snapshot (its node
// lost). The old copy is removed (a lost node's when it comes back).
func (r *Runners) moveSite(ctx context.Context, j *state.Job, progress func(int)) error {
	err := r.doMove(ctx, j, progress)
	if err != nil && ctx.Err() == nil {
		// Whatever failed, the move ends: a site is never left moving.
		if s, _ := r.Store.Site(j.SiteID); s != nil && s.Move != nil && s.Move.JobID == j.ID {
			return r.abortMove(ctx, s, j.ID, err)
		}
	}
	return err
}

func (r *Runners) doMove(ctx context.Context, j *state.Job, progress func(int)) error {
	s, err := r.Store.Site(j.SiteID)
	if err != nil {
		return err
	}
	if s == nil || s.Move == nil || s.Move.JobID != j.ID {
		return nil // deleted, or the move was given up
	}
	m := *s.Move
	target, err := r.Agents.Agent(m.To)
	if err != nil {
		return r.abortMove(ctx, s, j.ID, &jobs.Failure{Code: "node_unavailable", Message: err.Error()})
	}
	progress(5)
	switch m.Reason {
	case state.MoveReschedule:
		snap, err := r.Store.LatestSnapshot(s.ID)
		if err != nil {
			return err
		}
		if snap == nil {
			return r.abortMove(ctx, s, j.ID, &jobs.Failure{Code: "no_snapshot", Message: "the site has no snapshot to restore from"})
		}
		st, err := r.prepareCopy(ctx, target, s, j.ID, snap)
		if err != nil {
			return r.abortMove(ctx, s, j.ID, err)
		}
		progress(90)
		taken := snap.TakenAt
		_, err = r.Raft.Apply(ctx, fsm.FinishMove{SiteID: s.ID, JobID: j.ID, Address: st.GetAddress(), Port: int(st.GetPort()),
			RestoredFrom: &taken, At: r.now()})
		if errors.Is(err, state.ErrConflict) {
			// The lost node came back first: the site is served there with
			// nothing lost; the copy goes.
			r.removeCopy(ctx, target, s.ID, j.ID)
			return r.abortMove(ctx, s, j.ID, nil)
		}
		return err
	case state.MoveDrain:
		live, err := r.takeSnapshot(ctx, s, m.From, j.ID, SnapshotDrain)
		if err != nil {
			return r.abortMove(ctx, s, j.ID, err)
		}
		if live == nil {
			return nil // deleted meanwhile
		}
		progress(30)
		st, err := r.prepareCopy(ctx, target, s, j.ID, live)
		if err != nil {
			return r.abortMove(ctx, s, j.ID, err)
		}
		progress(60)
		// The switch: the site answers "unavailable" while what changed
		// since the first copy is taken and restored again.
		start := time.Now()
		if _, err := r.Raft.Apply(ctx, fsm.SwitchMove{SiteID: s.ID, JobID: j.ID, At: r.now()}); err != nil {
			return r.abortMove(ctx, s, j.ID, err)
		}
		final, err := r.takeSnapshot(ctx, s, m.From, j.ID, SnapshotDrain)
		if err != nil || final == nil {
			return r.abortMove(ctx, s, j.ID, errors.Join(err, errors.New("the final snapshot failed")))
		}
		// A restore keeps the copy's address and port.
		if _, err := r.restoreSnapshot(ctx, target, s, j.ID, final); err != nil {
			return r.abortMove(ctx, s, j.ID, err)
		}
		if _, err := r.Raft.Apply(ctx, fsm.FinishMove{SiteID: s.ID, JobID: j.ID, Address: st.GetAddress(), Port: int(st.GetPort()),
			Downtime: time.Since(start), At: r.now()}); err != nil {
			return r.abortMove(ctx, s, j.ID, err)
		}
		progress(95)
		if from, err := r.Agents.Agent(m.From); err == nil {
			r.removeCopy(ctx, from, s.ID, j.ID)
		}
		return nil
	}
	return r.abortMove(ctx, s, j.ID, fmt.Errorf("unknown move reason %q", m.Reason))
}

// prepareCopy makes the site on the target node (same id, slug and URL)
// and restores a snapshot into it; it answers where the copy serves.
func (r *Runners) prepareCopy(ctx context.Context, target agentv1connect.AgentServiceClient, s *state.Site, jobID string,
	snap *state.SiteSnapshot) (*agentv1.SiteStatus, error) {
	owner, _ := r.Store.Account(s.UserID)
	email := "admin@example.invalid"
	if owner != nil {
		email = owner.Email
	}
	var disk int64
	if r.DiskMB != nil {
		disk = int64(r.DiskMB(s))
	}
	var sleep int64
	if r.SleepAfterSeconds != nil {
		sleep = r.SleepAfterSeconds(s)
	}
	resp, err := target.CreateSite(ctx, connect.NewRequest(&agentv1.CreateSiteRequest{SiteId: s.ID, JobId: jobID, Slug: s.Slug,
		Name: s.Name, PhpVersion: s.PHPVersion, WordpressVersion: s.WordPressVersion, Url: s.URL, AdminUser: "admin", AdminEmail: email,
		DiskMb: disk, SleepAfterSeconds: sleep}))
	if err != nil {
		return nil, failure("making the site on its new node", err)
	}
	if _, err := r.restoreSnapshot(ctx, target, s, jobID, snap); err != nil {
		return nil, err
	}
	if len(s.PHPConfig) > 0 {
		if _, err := target.SetPHPConfig(ctx, connect.NewRequest(&agentv1.SetPHPConfigRequest{SiteId: s.ID, JobId: jobID,
			Settings: s.PHPConfig})); err != nil {
			return nil, failure("applying the site's PHP settings on its new node", err)
		}
	}
	return resp.Msg.Status, nil
}

// restoreSnapshot streams a snapshot's two parts into the site's copy on
// a node (its URL unchanged).
func (r *Runners) restoreSnapshot(ctx context.Context, agent agentv1connect.AgentServiceClient, s *state.Site, jobID string,
	snap *state.SiteSnapshot) (*agentv1.RestoreArchiveResponse, error) {
	parts := []struct {
		kind, name, sha string
		size            int64
	}{{"archive", "files.tar.zst", snap.FilesSHA256, snap.FilesBytes}, {"sql", "database.sql", snap.DatabaseSHA256, snap.DatabaseBytes}}
	hdr := &agentv1.RestoreHeader{SiteId: s.ID, JobId: jobID + "-" + snap.ID, SourceUrl: s.URL}
	for _, p := range parts {
		hdr.Parts = append(hdr.Parts, &agentv1.RestorePart{Kind: p.kind, Name: p.name, Size: p.size})
	}
	stream := agent.RestoreArchive(ctx)
	sendErr := stream.Send(&agentv1.RestoreArchiveRequest{Header: hdr})
	buf := make([]byte, restoreChunk)
	for _, p := range parts {
		if sendErr != nil {
			break
		}
		rc, size, err := r.Artifacts.Open(ctx, p.sha)
		if err != nil {
			_, _ = stream.CloseAndReceive()
			return nil, fmt.Errorf("the snapshot's %s is not in the blob store: %w", p.name, err)
		}
		if size != p.size {
			rc.Close()
			_, _ = stream.CloseAndReceive()
			return nil, fmt.Errorf("the snapshot's %s holds %d bytes, not %d", p.name, size, p.size)
		}
		left := p.size
		for left > 0 && sendErr == nil {
			n, rerr := io.ReadFull(rc, buf[:min(int64(len(buf)), left)])
			if n > 0 {
				sendErr = stream.Send(&agentv1.RestoreArchiveRequest{Data: buf[:n]})
				left -= int64(n)
			}
			if rerr != nil && left > 0 {
				rc.Close()
				_, _ = stream.CloseAndReceive()
				return nil, fmt.Errorf("reading the snapshot's %s: %w", p.name, rerr)
			}
		}
		rc.Close()
	}
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return nil, failure("restoring the snapshot", err)
	}
	return resp.Msg, nil
}

// abortMove gives a move up: the site stays where it was; the copy on
// the target goes. cause nil means nothing failed (the move was moot).
func (r *Runners) abortMove(ctx context.Context, s *state.Site, jobID string, cause error) error {
	if ctx.Err() != nil {
		return ctx.Err() // leadership lost: the next leader runs the job again
	}
	reason := ""
	if cause != nil {
		reason = failureMessage(cause)
	}
	res, err := r.Raft.Apply(context.WithoutCancel(ctx), fsm.AbortMove{SiteID: s.ID, JobID: jobID, Reason: reason, At: r.now()})
	if err != nil {
		return err
	}
	// Only a move this ended leaves a copy that is not the site's (a move
	// that finished after all made the target's copy the site).
	if aborted, _ := res.(bool); aborted && s.Move != nil {
		if target, err := r.Agents.Agent(s.Move.To); err == nil {
			r.removeCopy(ctx, target, s.ID, jobID)
		}
	}
	if cause == nil {
		return nil
	}
	r.snapMu.Lock()
	if r.failedMoves == nil {
		r.failedMoves = map[string]time.Time{}
	}
	r.failedMoves[s.ID] = time.Now()
	r.snapMu.Unlock()
	var f *jobs.Failure
	if errors.As(cause, &f) {
		return f
	}
	return &jobs.Failure{Code: "move_failed", Message: reason}
}

// removeCopy deletes a site's copy on a node, best effort (a node that
// keeps it is told to remove it when it next reports it).
func (r *Runners) removeCopy(ctx context.Context, agent agentv1connect.AgentServiceClient, siteID, jobID string) {
	_, _ = agent.DeleteSite(context.WithoutCancel(ctx), connect.NewRequest(&agentv1.SiteRef{SiteId: siteID, JobId: jobID}))
}

// dropMoveTarget removes the copy a move in progress made, when its site
// is deleted.
func (r *Runners) dropMoveTarget(ctx context.Context, s *state.Site, jobID string) {
	if s.Move == nil {
		return
	}
	if target, err := r.Agents.Agent(s.Move.To); err == nil {
		r.removeCopy(ctx, target, s.ID, jobID)
	}
}

// snapshotFailure says why a snapshot failed; an agent of the release
// before snapshots says so plainly.
func snapshotFailure(err error) error {
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		return &jobs.Failure{Code: "node_too_old", Message: "the site's node runs an agent too old to take snapshots; upgrade it"}
	}
	return failure("snapshotting the site", err)
}
