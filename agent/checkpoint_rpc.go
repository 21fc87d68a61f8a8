package agent

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/agent/sites"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

func checkpointInfo(cp *sites.Checkpoint) *agentv1.CheckpointInfo {
	return &agentv1.CheckpointInfo{CheckpointId: cp.ID, SiteId: cp.SiteID, SizeBytes: cp.SizeBytes, CreatedUnixMs: cp.CreatedAt.UnixMilli()}
}

func (v *service) MakeCheckpoint(ctx context.Context, req *connect.Request[agentv1.CheckpointRef]) (*connect.Response[agentv1.CheckpointInfo], error) {
	cp, err := v.sites.MakeCheckpoint(ctx, req.Msg.SiteId, req.Msg.CheckpointId)
	if err != nil {
		v.log.Warn("checkpoint failed", "site_id", req.Msg.SiteId, "checkpoint_id", req.Msg.CheckpointId, "err", err)
		return nil, rpcError(err)
	}
	return connect.NewResponse(checkpointInfo(cp)), nil
}

func (v *service) ListCheckpoints(_ context.Context, req *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.ListCheckpointsResponse], error) {
	list, err := v.sites.Checkpoints(req.Msg.SiteId)
	if err != nil {
		return nil, rpcError(err)
	}
	out := &agentv1.ListCheckpointsResponse{}
	for i := range list {
		out.Checkpoints = append(out.Checkpoints, checkpointInfo(&list[i]))
	}
	return connect.NewResponse(out), nil
}

func (v *service) DeleteCheckpoint(_ context.Context, req *connect.Request[agentv1.CheckpointRef]) (*connect.Response[agentv1.DeleteCheckpointResponse], error) {
	if err := v.sites.DeleteCheckpoint(req.Msg.SiteId, req.Msg.CheckpointId); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.DeleteCheckpointResponse{}), nil
}

func (v *service) RestoreCheckpoint(ctx context.Context, req *connect.Request[agentv1.CheckpointRef]) (*connect.Response[agentv1.ResetSiteResponse], error) {
	s, err := v.sites.RestoreCheckpoint(ctx, req.Msg.SiteId, req.Msg.CheckpointId)
	if err != nil {
		v.log.Warn("checkpoint restore failed", "site_id", req.Msg.SiteId, "checkpoint_id", req.Msg.CheckpointId, "job_id", req.Msg.JobId, "err", err)
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.ResetSiteResponse{Status: status(s, agentv1.SiteState_SITE_STATE_READY), WordpressVersion: s.WordPressVersion}), nil
}

func (v *service) ForkSite(ctx context.Context, req *connect.Request[agentv1.ForkSiteRequest]) (*connect.Response[agentv1.CreateSiteResponse], error) {
	if req.Msg.Site == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, sites.ErrInvalid)
	}
	start := time.Now()
	s, err := v.sites.Fork(ctx, req.Msg.SourceSiteId, createRequest(req.Msg.Site))
	if err != nil {
		v.log.Warn("fork failed", "site_id", req.Msg.Site.SiteId, "source_id", req.Msg.SourceSiteId, "job_id", req.Msg.Site.JobId, "err", err)
		return nil, rpcError(err)
	}
	v.log.Info("site forked", "site_id", s.ID, "source_id", req.Msg.SourceSiteId, "duration_ms", time.Since(start).Milliseconds())
	return connect.NewResponse(&agentv1.CreateSiteResponse{Status: status(s, agentv1.SiteState_SITE_STATE_READY), WordpressVersion: s.WordPressVersion}), nil
}

func (v *service) RunPHP(ctx context.Context, req *connect.Request[agentv1.RunPHPRequest]) (*connect.Response[agentv1.RunPHPResponse], error) {
	res, err := v.sites.RunPHP(ctx, req.Msg.SiteId, req.Msg.Code, time.Duration(req.Msg.TimeoutSeconds)*time.Second)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.RunPHPResponse{ExitCode: int32(res.ExitCode), Stdout: res.Stdout, Stderr: res.Stderr,
		Truncated: res.Truncated, TimedOut: res.TimedOut}), nil
}

func (v *service) RunSQL(ctx context.Context, req *connect.Request[agentv1.RunSQLRequest]) (*connect.Response[agentv1.RunSQLResponse], error) {
	res, err := v.sites.RunSQL(ctx, req.Msg.SiteId, req.Msg.Query, time.Duration(req.Msg.TimeoutSeconds)*time.Second)
	if err != nil {
		return nil, rpcError(err)
	}
	out := &agentv1.RunSQLResponse{Columns: res.Columns, AffectedRows: res.AffectedRows, Truncated: res.Truncated}
	for _, r := range res.Rows {
		row := &agentv1.SQLRow{Values: make([]*agentv1.SQLValue, len(r))}
		for i, v := range r {
			if v == nil {
				row.Values[i] = &agentv1.SQLValue{Null: true}
			} else {
				row.Values[i] = &agentv1.SQLValue{Value: *v}
			}
		}
		out.Rows = append(out.Rows, row)
	}
	return connect.NewResponse(out), nil
}
