package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/gitdeploy"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/screenshot"
	"github.com/sandboxd/sandboxd/agent/templates"
	"github.com/sandboxd/sandboxd/agent/toolbox"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/agent/sites"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// service implements AgentService on the node's sites: their
// lifecycle, the template store and the toolbox.
type service struct {
	sites     *sites.Manager
	templates *templates.Store
	box       *toolbox.Box
	// git fetches connected repositories into the node's cache.
	git *gitdeploy.Fetcher
	// shots takes the sites' screenshots (nil: none).
	shots *screenshot.Shooter
	log   *slog.Logger
}

var _ agentv1connect.AgentServiceHandler = (*service)(nil)

// rpcError maps site errors to Connect codes.
func rpcError(err error) error {
	switch {
	case errors.Is(err, sites.ErrNotFound), errors.Is(err, sites.ErrCheckpointNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, sites.ErrSQL):
		ce := connect.NewError(connect.CodeInvalidArgument, err)
		ce.Meta().Set(agentv1.RefusalKey, agentv1.RefusalSQL)
		return ce
	case errors.Is(err, sites.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, sites.ErrCheckpointsFull):
		return refusal(err, agentv1.RefusalCheckpointsFull)
	case errors.Is(err, sites.ErrUnavailable):
		ce := connect.NewError(connect.CodeUnavailable, err)
		ce.Meta().Set(agentv1.RefusalKey, agentv1.RefusalNodeUnable)
		return ce
	case errors.Is(err, mariadb.ErrBusy):
		return connect.NewError(connect.CodeAborted, err)
	case errors.Is(err, sites.ErrPayloadTooLarge):
		return refusal(err, agentv1.RefusalTooLarge)
	case errors.Is(err, sites.ErrDiskFull), errors.Is(err, sites.ErrTooLarge):
		return refusal(err, agentv1.RefusalDiskFull)
	case errors.Is(err, sites.ErrNotRunning):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, images.ErrMissing):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// refusal is a CodeResourceExhausted error that names which limit it is.
func refusal(err error, why string) error {
	ce := connect.NewError(connect.CodeResourceExhausted, err)
	ce.Meta().Set(agentv1.RefusalKey, why)
	return ce
}

func status(s *sites.Site, state agentv1.SiteState) *agentv1.SiteStatus {
	return &agentv1.SiteStatus{SiteId: s.ID, State: state, Port: int32(s.Port), Address: s.IP}
}

func (v *service) CreateSite(ctx context.Context, req *connect.Request[agentv1.CreateSiteRequest]) (*connect.Response[agentv1.CreateSiteResponse], error) {
	m := req.Msg
	start := time.Now()
	s, err := v.templates.Create(ctx, createRequest(m), m.TemplateId)
	if err != nil {
		v.log.Warn("create site failed", "site_id", m.SiteId, "job_id", m.JobId, "err", err)
		return nil, rpcError(err)
	}
	v.log.Info("site created", "site_id", s.ID, "port", s.Port, "duration_ms", time.Since(start).Milliseconds())
	return connect.NewResponse(&agentv1.CreateSiteResponse{Status: status(s, agentv1.SiteState_SITE_STATE_READY), WordpressVersion: s.WordPressVersion}), nil
}

// createRequest is the site a CreateSiteRequest asks for.
func createRequest(m *agentv1.CreateSiteRequest) sites.CreateRequest {
	r := sites.CreateRequest{ID: m.SiteId, Slug: m.Slug, Name: m.Name, PHPVersion: m.PhpVersion, WordPressVersion: m.WordpressVersion,
		URL: m.Url, AdminUser: m.AdminUser, AdminEmail: m.AdminEmail}
	if r.AdminUser == "" {
		r.AdminUser = "admin"
	}
	if r.AdminEmail == "" {
		r.AdminEmail = "admin@example.com"
	}
	if l := m.Limits; l != nil {
		r.Limits = sites.Limits{MemoryMB: l.MemoryMb, CPUMilli: l.CpuMilli, Pids: m.PidsLimit}
	}
	r.Limits.DiskMB, r.Limits.SleepAfterSeconds, r.Pooled = m.DiskMb, m.SleepAfterSeconds, m.Pooled
	return r
}

func (v *service) DeleteSite(ctx context.Context, req *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.DeleteSiteResponse], error) {
	existed, err := v.sites.Delete(ctx, req.Msg.SiteId)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.DeleteSiteResponse{Existed: existed}), nil
}

func (v *service) ResetSite(ctx context.Context, req *connect.Request[agentv1.ResetSiteRequest]) (*connect.Response[agentv1.ResetSiteResponse], error) {
	s, err := v.templates.Reset(ctx, req.Msg.SiteId)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.ResetSiteResponse{Status: status(s, agentv1.SiteState_SITE_STATE_READY), WordpressVersion: s.WordPressVersion}), nil
}

func (v *service) FreezeTemplate(ctx context.Context, req *connect.Request[agentv1.FreezeTemplateRequest]) (*connect.Response[agentv1.TemplateInfo], error) {
	start := time.Now()
	t, err := v.templates.Freeze(ctx, req.Msg.SiteId, req.Msg.TemplateId)
	if err != nil {
		v.log.Warn("freeze template failed", "site_id", req.Msg.SiteId, "template_id", req.Msg.TemplateId, "job_id", req.Msg.JobId, "err", err)
		return nil, rpcError(err)
	}
	v.log.Info("template frozen", "site_id", t.SourceSiteID, "template_id", t.ID, "size_bytes", t.SizeBytes,
		"duration_ms", time.Since(start).Milliseconds())
	return connect.NewResponse(&agentv1.TemplateInfo{TemplateId: t.ID, SourceSiteId: t.SourceSiteID, PhpVersion: t.PHPVersion,
		WordpressVersion: t.WordPressVersion, SizeBytes: t.SizeBytes}), nil
}

func (v *service) DeleteTemplate(ctx context.Context, req *connect.Request[agentv1.TemplateRef]) (*connect.Response[agentv1.DeleteTemplateResponse], error) {
	existed, err := v.templates.Delete(ctx, req.Msg.TemplateId)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.DeleteTemplateResponse{Existed: existed}), nil
}

func (v *service) RestoreSite(ctx context.Context, req *connect.Request[agentv1.RestoreSiteRequest]) (*connect.Response[agentv1.ResetSiteResponse], error) {
	s, err := v.templates.Restore(ctx, req.Msg.SiteId, req.Msg.TemplateId)
	if err != nil {
		v.log.Warn("restore site failed", "site_id", req.Msg.SiteId, "template_id", req.Msg.TemplateId, "job_id", req.Msg.JobId, "err", err)
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.ResetSiteResponse{Status: status(s, agentv1.SiteState_SITE_STATE_READY), WordpressVersion: s.WordPressVersion}), nil
}

func (v *service) CreateLoginToken(ctx context.Context, req *connect.Request[agentv1.CreateLoginTokenRequest]) (*connect.Response[agentv1.CreateLoginTokenResponse], error) {
	m := req.Msg
	if err := v.sites.AddLoginToken(m.SiteId, m.TokenHash, time.Unix(m.ExpiresUnix, 0), m.UserLogin, m.RedirectPath); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.CreateLoginTokenResponse{}), nil
}

func debugMsg(d sites.Debug) *agentv1.DebugSettings {
	return &agentv1.DebugSettings{WpDebug: d.WPDebug, WpDebugLog: d.WPDebugLog, WpDebugDisplay: d.WPDebugDisplay, ScriptDebug: d.ScriptDebug}
}

func (v *service) GetDebug(ctx context.Context, req *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.DebugSettings], error) {
	d, err := v.box.GetDebug(req.Msg.SiteId)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(debugMsg(d)), nil
}

func (v *service) SetDebug(ctx context.Context, req *connect.Request[agentv1.SetDebugRequest]) (*connect.Response[agentv1.DebugSettings], error) {
	m := req.Msg
	d, err := v.box.SetDebug(m.SiteId, toolbox.DebugPatch{WPDebug: m.WpDebug, WPDebugLog: m.WpDebugLog, WPDebugDisplay: m.WpDebugDisplay, ScriptDebug: m.ScriptDebug})
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(debugMsg(d)), nil
}

func (v *service) TailDebugLog(ctx context.Context, req *connect.Request[agentv1.TailDebugLogRequest]) (*connect.Response[agentv1.TailDebugLogResponse], error) {
	n := int(req.Msg.Lines)
	if n < 1 || n > 2000 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("lines must be 1..2000"))
	}
	exists, content, truncated, err := v.box.TailDebugLog(ctx, req.Msg.SiteId, n)
	if err != nil {
		return nil, rpcError(err)
	}
	lines := int32(0)
	if content != "" {
		lines = int32(strings.Count(strings.TrimSuffix(content, "\n"), "\n") + 1)
	}
	return connect.NewResponse(&agentv1.TailDebugLogResponse{Exists: exists, Content: content, Lines: lines, Truncated: truncated}), nil
}

func (v *service) TruncateDebugLog(ctx context.Context, req *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.TruncateDebugLogResponse], error) {
	if err := v.box.TruncateDebugLog(ctx, req.Msg.SiteId); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.TruncateDebugLogResponse{}), nil
}

func (v *service) SetPHPConfig(ctx context.Context, req *connect.Request[agentv1.SetPHPConfigRequest]) (*connect.Response[agentv1.PHPConfig], error) {
	settings, err := v.box.SetPHPConfig(ctx, req.Msg.SiteId, req.Msg.Settings)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.PHPConfig{Settings: settings}), nil
}

func (v *service) ListEmails(ctx context.Context, req *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.ListEmailsResponse], error) {
	list, err := v.box.ListEmails(ctx, req.Msg.SiteId)
	if err != nil {
		return nil, rpcError(err)
	}
	resp := &agentv1.ListEmailsResponse{}
	for _, e := range list {
		resp.Emails = append(resp.Emails, &agentv1.Email{Id: e.ID, From: e.From, To: e.To, Subject: e.Subject,
			DateUnix: e.Date.Unix(), Text: e.Text, Html: e.HTML})
	}
	return connect.NewResponse(resp), nil
}

func (v *service) ClearEmails(ctx context.Context, req *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.ClearEmailsResponse], error) {
	if err := v.box.ClearEmails(ctx, req.Msg.SiteId); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.ClearEmailsResponse{}), nil
}

func (v *service) SwitchPHPVersion(ctx context.Context, req *connect.Request[agentv1.SwitchPHPVersionRequest]) (*connect.Response[agentv1.SwitchPHPVersionResponse], error) {
	s, err := v.box.SwitchPHPVersion(ctx, req.Msg.SiteId, req.Msg.PhpVersion)
	if err != nil {
		if errors.Is(err, toolbox.ErrSwitchFailed) {
			return nil, connect.NewError(connect.CodeFailedPrecondition, err)
		}
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.SwitchPHPVersionResponse{Status: status(s, agentv1.SiteState_SITE_STATE_READY), WordpressVersion: s.WordPressVersion}), nil
}

func (v *service) Files(ctx context.Context, req *connect.Request[agentv1.FilesRequest]) (*connect.Response[agentv1.FilesResponse], error) {
	m := req.Msg
	out, err := v.box.Files(ctx, m.SiteId, toolbox.FileOp{Op: m.Op, Path: m.Path, From: m.From, To: m.To,
		Content: m.Content, Filename: m.Filename})
	if fe, ok := toolbox.IsFileError(err); ok {
		return connect.NewResponse(&agentv1.FilesResponse{ErrorCode: fe.Code, ErrorMessage: fe.Message}), nil
	}
	if err != nil {
		return nil, rpcError(err)
	}
	resp := &agentv1.FilesResponse{Path: out.Path, From: out.From, To: out.To, SizeBytes: out.SizeBytes,
		Truncated: out.Truncated, Content: out.Content}
	for _, e := range out.Entries {
		resp.Entries = append(resp.Entries, &agentv1.FileEntry{Name: e.Name, Type: e.Type, SizeBytes: e.SizeBytes, ModifiedAt: e.ModifiedAt})
	}
	return connect.NewResponse(resp), nil
}

func (v *service) GetDatabase(ctx context.Context, req *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.DatabaseInfo], error) {
	d, err := v.sites.Database(req.Msg.SiteId)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.DatabaseInfo{Host: d.Host, Port: int32(d.Port), Name: d.Name, User: d.User, Password: d.Password}), nil
}

func (v *service) CreateAdminerLogin(ctx context.Context, req *connect.Request[agentv1.CreateLoginTokenRequest]) (*connect.Response[agentv1.CreateLoginTokenResponse], error) {
	m := req.Msg
	if err := v.sites.AddAdminerToken(m.SiteId, m.TokenHash, time.Unix(m.ExpiresUnix, 0)); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.CreateLoginTokenResponse{}), nil
}

func pluginMsg(p toolbox.Plugin) *agentv1.Plugin {
	return &agentv1.Plugin{Slug: p.Slug, Name: p.Name, Version: p.Version, Active: p.Active, Kind: p.Kind}
}

func (v *service) ListPlugins(ctx context.Context, req *connect.Request[agentv1.SiteRef]) (*connect.Response[agentv1.ListPluginsResponse], error) {
	ps, err := v.box.ListPlugins(ctx, req.Msg.SiteId)
	if err != nil {
		return nil, rpcError(err)
	}
	out := &agentv1.ListPluginsResponse{}
	for _, p := range ps {
		out.Plugins = append(out.Plugins, pluginMsg(p))
	}
	return connect.NewResponse(out), nil
}

func (v *service) InstallPlugin(ctx context.Context, req *connect.Request[agentv1.InstallPluginRequest]) (*connect.Response[agentv1.InstallPluginResponse], error) {
	m := req.Msg
	p, err := v.box.InstallPlugin(ctx, m.SiteId, m.Zip, m.Activate)
	if err != nil {
		v.log.Warn("install plugin failed", "site_id", m.SiteId, "job_id", m.JobId, "err", err)
		return nil, rpcError(err)
	}
	v.log.Info("plugin installed", "site_id", m.SiteId, "job_id", m.JobId, "slug", p.Slug, "active", p.Active)
	return connect.NewResponse(&agentv1.InstallPluginResponse{Plugin: pluginMsg(*p)}), nil
}

// chunkSize is how much of an artifact one stream message carries.
const chunkSize = 1 << 20

// chunkSender writes to a server stream in messages of chunkSize.
type chunkSender struct {
	stream *connect.ServerStream[agentv1.Chunk]
}

func (c chunkSender) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += chunkSize {
		end := min(off+chunkSize, len(p))
		if err := c.stream.Send(&agentv1.Chunk{Data: p[off:end]}); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

func (v *service) ExportTemplate(ctx context.Context, req *connect.Request[agentv1.TemplateRef], stream *connect.ServerStream[agentv1.Chunk]) error {
	start := time.Now()
	w := bufio.NewWriterSize(chunkSender{stream}, chunkSize)
	if err := v.templates.Export(ctx, req.Msg.TemplateId, w); err != nil {
		v.log.Warn("export template failed", "template_id", req.Msg.TemplateId, "job_id", req.Msg.JobId, "err", err)
		return rpcError(err)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	v.log.Info("template exported", "template_id", req.Msg.TemplateId, "duration_ms", time.Since(start).Milliseconds())
	return nil
}

// streamReader reads the byte chunks a client stream's messages carry
// (data picks a message's) as one stream: template imports and archive
// restores arrive this way.
type streamReader[M any] struct {
	stream *connect.ClientStream[M]
	data   func(*M) []byte
	buf    []byte
}

func (r *streamReader[M]) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if !r.stream.Receive() {
			if err := r.stream.Err(); err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		r.buf = r.data(r.stream.Msg())
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (v *service) ImportTemplate(ctx context.Context, stream *connect.ClientStream[agentv1.ImportTemplateRequest]) (*connect.Response[agentv1.TemplateInfo], error) {
	if !stream.Receive() {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no template named"))
	}
	first := stream.Msg()
	start := time.Now()
	t, err := v.templates.Import(ctx, first.TemplateId, &streamReader[agentv1.ImportTemplateRequest]{stream: stream, data: (*agentv1.ImportTemplateRequest).GetData, buf: first.Data})
	if err != nil {
		v.log.Warn("import template failed", "template_id", first.TemplateId, "job_id", first.JobId, "err", err)
		return nil, rpcError(err)
	}
	v.log.Info("template imported", "template_id", t.ID, "duration_ms", time.Since(start).Milliseconds())
	return connect.NewResponse(&agentv1.TemplateInfo{TemplateId: t.ID, SourceSiteId: t.SourceSiteID, PhpVersion: t.PHPVersion,
		WordpressVersion: t.WordPressVersion, SizeBytes: t.SizeBytes}), nil
}

func (v *service) RenameSite(ctx context.Context, req *connect.Request[agentv1.RenameSiteRequest]) (*connect.Response[agentv1.RenameSiteResponse], error) {
	m := req.Msg
	// Claimed from a pool: its new owner's first request is on the way.
	// Its wake starts now, in the background (a wake that fails does not
	// stop the claim: the first request tries again). Waking it first and
	// holding it through the rename measured no faster (docs/benchmarks.md).
	v.sites.Wake(m.SiteId, sites.DoorAPI)
	s, err := v.sites.Rename(ctx, m.SiteId, m.Slug, m.Url, m.Name, m.AdminEmail, m.SleepAfterSeconds)
	if err != nil {
		v.log.Warn("rename site failed", "site_id", m.SiteId, "err", err)
		return nil, rpcError(err)
	}
	return connect.NewResponse(&agentv1.RenameSiteResponse{Status: status(s, agentv1.SiteState_SITE_STATE_READY)}), nil
}

func (v *service) SetSiteURL(ctx context.Context, req *connect.Request[agentv1.SetSiteURLRequest]) (*connect.Response[agentv1.SetSiteURLResponse], error) {
	m := req.Msg
	s, err := v.sites.SetURL(ctx, m.SiteId, m.Url)
	if err != nil {
		v.log.Warn("set site url failed", "site_id", m.SiteId, "job_id", m.JobId, "err", err)
		return nil, rpcError(err)
	}
	v.log.Info("site url set", "site_id", m.SiteId, "job_id", m.JobId)
	return connect.NewResponse(&agentv1.SetSiteURLResponse{Status: status(s, agentv1.SiteState_SITE_STATE_READY)}), nil
}

// RunnerVersion names the Blueprint step runner this agent carries.
const RunnerVersion = "sandboxd-runner/1"

func (v *service) RunBlueprintStep(ctx context.Context, req *connect.Request[agentv1.RunBlueprintStepRequest]) (*connect.Response[agentv1.RunBlueprintStepResponse], error) {
	m := req.Msg
	in := toolbox.StepRequest{Step: m.Step, Blobs: m.Blobs}
	if err := json.Unmarshal(m.ArgsJson, &in.Args); err != nil || in.Args == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("args_json: not a JSON object"))
	}
	if len(m.ExtrasJson) > 0 {
		if err := json.Unmarshal(m.ExtrasJson, &in); err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("extras_json: %v", err))
		}
		in.Step, in.Blobs = m.Step, m.Blobs
	}
	out := &agentv1.RunBlueprintStepResponse{RunnerVersion: RunnerVersion}
	res, err := v.box.RunBlueprintStep(ctx, m.SiteId, in)
	var se *toolbox.StepError
	switch {
	case errors.As(err, &se):
		out.ErrorCode, out.ErrorMessage, out.Log = se.Code, se.Message, se.Log
		v.log.Info("blueprint step failed", "site_id", m.SiteId, "job_id", m.JobId, "step", m.Step, "code", se.Code)
	case err != nil:
		v.log.Warn("blueprint step could not run", "site_id", m.SiteId, "job_id", m.JobId, "step", m.Step, "err", err)
		return nil, rpcError(err)
	default:
		out.Ok, out.Log, out.User = true, res.Log, res.User
	}
	return connect.NewResponse(out), nil
}

func (v *service) RestoreArchive(ctx context.Context, stream *connect.ClientStream[agentv1.RestoreArchiveRequest]) (*connect.Response[agentv1.RestoreArchiveResponse], error) {
	if !stream.Receive() || stream.Msg().Header == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a restore starts with its header"))
	}
	first := stream.Msg()
	h := first.Header
	req := sites.RestoreRequest{JobID: h.JobId, SourceURL: h.SourceUrl}
	for _, p := range h.Parts {
		if p.Size < 0 {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a part has a negative size"))
		}
		req.Parts = append(req.Parts, sites.RestorePart{Kind: p.Kind, Name: p.Name, Size: p.Size})
	}
	start := time.Now()
	res, err := v.sites.RestoreArchive(ctx, h.SiteId, req, &streamReader[agentv1.RestoreArchiveRequest]{stream: stream, data: (*agentv1.RestoreArchiveRequest).GetData, buf: first.Data})
	if err != nil {
		v.log.Warn("restore failed", "site_id", h.SiteId, "job_id", h.JobId, "err", err)
		return nil, rpcError(err)
	}
	v.log.Info("archive restored", "site_id", h.SiteId, "job_id", h.JobId, "files", res.Files, "bytes", res.Bytes,
		"statements", res.Statements, "tables", res.Tables, "duration_ms", time.Since(start).Milliseconds())
	return connect.NewResponse(&agentv1.RestoreArchiveResponse{Files: res.Files, Bytes: res.Bytes, Statements: res.Statements,
		Tables: int32(res.Tables), TablePrefix: res.Prefix, RewrittenValues: res.Rewritten, AdminLogin: res.AdminLogin,
		SkippedEntries: res.Skipped, Format: res.Format, Notes: res.Notes}), nil
}

// snapshotSender writes one part of a snapshot to the stream in
// messages of chunkSize at most.
type snapshotSender struct {
	stream *connect.ServerStream[agentv1.SnapshotChunk]
	part   agentv1.SnapshotPart
}

func (c snapshotSender) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += chunkSize {
		end := min(off+chunkSize, len(p))
		if err := c.stream.Send(&agentv1.SnapshotChunk{Part: c.part, Data: p[off:end]}); err != nil {
			return off, fmt.Errorf("send the snapshot: %w", err)
		}
	}
	return len(p), nil
}

// SnapshotSite streams a live snapshot of a site (see the proto): the
// parts' chunks, then the sizes marked done.
func (v *service) SnapshotSite(ctx context.Context, req *connect.Request[agentv1.SnapshotSiteRequest], stream *connect.ServerStream[agentv1.SnapshotChunk]) error {
	m := req.Msg
	if m.MaxBytes < 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("max_bytes is negative"))
	}
	start := time.Now()
	files := bufio.NewWriterSize(snapshotSender{stream, agentv1.SnapshotPart_SNAPSHOT_PART_FILES}, chunkSize)
	database := bufio.NewWriterSize(snapshotSender{stream, agentv1.SnapshotPart_SNAPSHOT_PART_DATABASE}, chunkSize)
	info, err := v.sites.Snapshot(ctx, m.SiteId, files, database, m.MaxBytes)
	if err != nil {
		v.log.Warn("snapshot failed", "site_id", m.SiteId, "job_id", m.JobId, "err", err)
		switch {
		case errors.Is(err, context.Canceled):
			return connect.NewError(connect.CodeCanceled, err)
		case errors.Is(err, context.DeadlineExceeded):
			return connect.NewError(connect.CodeDeadlineExceeded, err)
		}
		return rpcError(err)
	}
	if err := stream.Send(&agentv1.SnapshotChunk{Done: true, FilesBytes: info.FilesBytes, DatabaseBytes: info.DatabaseBytes,
		TakenAtUnixMs: info.TakenAt.UnixMilli()}); err != nil {
		return err
	}
	v.log.Info("site snapshot sent", "site_id", m.SiteId, "job_id", m.JobId, "files_bytes", info.FilesBytes,
		"database_bytes", info.DatabaseBytes, "entries", info.Entries, "dropped", info.Dropped,
		"duration_ms", time.Since(start).Milliseconds())
	return nil
}
