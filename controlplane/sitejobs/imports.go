package sitejobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// Imports is what restores need from the imports service: a place to
// say where a restore is, the object store's objects, and the cleanup of
// a finished import.
type Imports interface {
	Progress(id, phase string, done, total int64)
	OpenObject(ctx context.Context, key string) (io.ReadCloser, int64, error)
	Cleanup(ctx context.Context, imp *state.Import)
}

// importWatch is how often a restore checks that its import still wants
// it (a cancel stops it).
const importWatch = 500 * time.Millisecond

// restoreChunk is how much of an archive one message to an agent holds.
const restoreChunk = 1 << 20

// importRestore makes the import's site when it asked for a new one,
// then streams the archive to the site's node, which restores it.
func (r *Runners) importRestore(ctx context.Context, j *state.Job, progress func(int)) error {
	p, err := payloadOf[jobspec.CreatePayload](j)
	if err != nil {
		return err
	}
	if r.Imports == nil {
		return &jobs.Failure{Code: "service_unavailable", Message: "imports are not configured on this server"}
	}
	imp, err := r.Store.Import(p.ImportID)
	if err != nil {
		return err
	}
	if imp == nil || imp.Status != state.ImportRestoring {
		// Cancelled or removed before the job ran: a sandbox made for it
		// has nothing to hold.
		if imp == nil || imp.NewSite {
			if err := r.discardScratch(ctx, j.SiteID); err != nil {
				return err
			}
		}
		return nil
	}
	site, err := r.site(j)
	if err != nil {
		return r.importFailed(ctx, imp, err)
	}
	if site.Status == state.SiteCreating {
		r.Imports.Progress(imp.ID, "creating_site", 0, imp.SizeBytes)
		if err := r.makeSite(ctx, j, p, func(pc int) { progress(pc / 5) }); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return r.importFailed(ctx, imp, fmt.Errorf("the sandbox could not be made: %s", failureMessage(err)))
		}
		if site, err = r.site(j); err != nil {
			return r.importFailed(ctx, imp, err)
		}
	}
	if site.Status != state.SiteReady {
		return r.importFailed(ctx, imp, &jobs.Failure{Code: "invalid_request", Message: "the site is " + site.Status})
	}
	progress(20)
	res, err := r.streamRestore(ctx, imp, site, j.ID, func(done, total int64) {
		r.Imports.Progress(imp.ID, "restoring", done, total)
		if total > 0 {
			progress(20 + int(75*done/total))
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if now, _ := r.Store.Import(imp.ID); now == nil || now.Status != state.ImportRestoring {
			r.Imports.Cleanup(ctx, imp)
			if now == nil || now.NewSite {
				return r.discardScratch(ctx, site.ID)
			}
			return nil // cancelled: the node left the site as it was
		}
		return r.importFailed(ctx, imp, err)
	}
	if res.AdminLogin != "" {
		_, _ = r.Raft.Apply(ctx, fsm.UpdateSite{Update: state.SiteUpdate{ID: site.ID, Entry: &state.SiteEntry{User: res.AdminLogin},
			At: r.now()}})
	}
	done := *imp
	done.Status, done.UpdatedAt = state.ImportReady, r.now()
	if _, err := r.Raft.Apply(ctx, fsm.PutImport{Import: done, IfStatus: []string{state.ImportRestoring}}); err != nil &&
		!errors.Is(err, state.ErrStale) {
		return err
	}
	r.Imports.Progress(imp.ID, "done", imp.SizeBytes, imp.SizeBytes)
	r.Imports.Cleanup(ctx, imp)
	return nil
}

// importFailed records why an import failed and removes a sandbox made
// for it; the job fails with the same reason.
func (r *Runners) importFailed(ctx context.Context, imp *state.Import, cause error) error {
	msg := failureMessage(cause)
	failed := *imp
	failed.Status, failed.FailureReason, failed.UpdatedAt = state.ImportFailed, msg, r.now()
	_, err := r.Raft.Apply(context.WithoutCancel(ctx), fsm.PutImport{Import: failed, IfStatus: []string{state.ImportRestoring}})
	if err != nil && !errors.Is(err, state.ErrStale) {
		return err
	}
	r.Imports.Cleanup(ctx, imp)
	if imp.NewSite && imp.SiteID != "" {
		if err := r.discardScratch(ctx, imp.SiteID); err != nil {
			return err
		}
	}
	var f *jobs.Failure
	if errors.As(cause, &f) {
		return &jobs.Failure{Code: f.Code, Message: msg}
	}
	return &jobs.Failure{Code: "import_failed", Message: msg}
}

// restorePart is one part of what goes to the node.
type restorePart struct {
	kind, name string
	size       int64
	open       func(ctx context.Context) (io.ReadCloser, error)
}

// partsOf lists an import's parts: its sealed blob, or its objects in
// the manifest's order.
func (r *Runners) partsOf(ctx context.Context, imp *state.Import) ([]restorePart, error) {
	if imp.Multipart == nil {
		if r.Artifacts == nil {
			return nil, errors.New("no blob store")
		}
		f, size, err := r.Artifacts.Open(ctx, imp.ArtifactID)
		if err != nil {
			return nil, fmt.Errorf("the uploaded archive is not on this server: %w", err)
		}
		f.Close()
		return []restorePart{{kind: "archive", name: "upload", size: size, open: func(ctx context.Context) (io.ReadCloser, error) {
			f, _, err := r.Artifacts.Open(ctx, imp.ArtifactID)
			return f, err
		}}}, nil
	}
	var out []restorePart
	for _, e := range imp.Multipart.Manifest {
		for _, o := range imp.Multipart.Objects {
			if o.Key != e.Key {
				continue
			}
			key := o.StoreKey
			out = append(out, restorePart{kind: e.Kind, name: o.Key, size: o.SizeBytes, open: func(ctx context.Context) (io.ReadCloser, error) {
				rc, size, err := r.Imports.OpenObject(ctx, key)
				if err == nil && size != o.SizeBytes {
					rc.Close()
					return nil, fmt.Errorf("object %s holds %d bytes, not %d", o.Key, size, o.SizeBytes)
				}
				return rc, err
			}})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the import has no manifest")
	}
	return out, nil
}

// streamRestore sends the parts to the site's node and waits for the
// restore; it stops (and the node undoes its staging) when the import
// is cancelled meanwhile.
func (r *Runners) streamRestore(ctx context.Context, imp *state.Import, site *state.Site, jobID string,
	report func(done, total int64)) (*agentv1.RestoreArchiveResponse, error) {
	parts, err := r.partsOf(ctx, imp)
	if err != nil {
		return nil, err
	}
	agent, err := r.Agents.Agent(site.NodeID)
	if err != nil {
		return nil, &jobs.Failure{Code: "node_unavailable", Message: err.Error()}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		t := time.NewTicker(importWatch)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if now, err := r.Store.Import(imp.ID); err == nil && (now == nil || now.Status != state.ImportRestoring) {
					cancel()
					return
				}
			}
		}
	}()
	hdr := &agentv1.RestoreHeader{SiteId: site.ID, JobId: jobID, SourceUrl: imp.SourceURL}
	var total int64
	for _, p := range parts {
		hdr.Parts = append(hdr.Parts, &agentv1.RestorePart{Kind: p.kind, Size: p.size, Name: p.name})
		total += p.size
	}
	stream := agent.RestoreArchive(ctx)
	sendErr := stream.Send(&agentv1.RestoreArchiveRequest{Header: hdr})
	var done int64
	buf := make([]byte, restoreChunk)
	for _, p := range parts {
		if sendErr != nil {
			break
		}
		rc, err := p.open(ctx)
		if err != nil {
			_, _ = stream.CloseAndReceive()
			return nil, fmt.Errorf("reading %s: %w", p.name, err)
		}
		left := p.size
		for left > 0 && sendErr == nil {
			n, rerr := io.ReadFull(rc, buf[:min(int64(len(buf)), left)])
			if n > 0 {
				sendErr = stream.Send(&agentv1.RestoreArchiveRequest{Data: buf[:n]})
				left -= int64(n)
				done += int64(n)
				report(done, total)
			}
			if rerr != nil && left > 0 {
				rc.Close()
				_, _ = stream.CloseAndReceive()
				return nil, fmt.Errorf("reading %s: %w", p.name, rerr)
			}
		}
		rc.Close()
	}
	r.Imports.Progress(imp.ID, "finishing", done, total)
	// An agent that refused early ends the stream: its answer says why.
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return nil, failure("restoring the archive", err)
	}
	return resp.Msg, nil
}
