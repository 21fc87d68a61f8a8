package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/agent/screenshot"
	"github.com/sandboxd/sandboxd/agent/sites"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// shotTimeout bounds one screenshot: a wait for a free slot, the page's
// load (screenshot.LoadWait) and the capture.
const shotTimeout = 45 * time.Second

func (v *service) TakeScreenshot(ctx context.Context, req *connect.Request[agentv1.TakeScreenshotRequest]) (*connect.Response[agentv1.Screenshot], error) {
	m := req.Msg
	if v.shots == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("this node takes no screenshots"))
	}
	s := v.sites.Get(m.SiteId)
	if s == nil {
		return nil, rpcError(sites.ErrNotFound)
	}
	r := screenshot.Request{SiteURL: s.URL, Path: m.Path, Width: int(m.Width), Height: int(m.Height), FullPage: m.FullPage}
	if r.Path == "" {
		r.Path = "/"
	}
	if r.Width == 0 {
		r.Width = screenshot.DefaultWidth
	}
	if r.Height == 0 {
		r.Height = screenshot.DefaultHeight
	}
	if r.Width < screenshot.MinWidth || r.Width > screenshot.MaxWidth || r.Height < screenshot.MinHeight || r.Height > screenshot.MaxHeight {
		return nil, rpcError(fmt.Errorf("%w: width must be %d to %d and height %d to %d", sites.ErrInvalid,
			screenshot.MinWidth, screenshot.MaxWidth, screenshot.MinHeight, screenshot.MaxHeight))
	}
	if _, err := screenshot.ShotURL(r); err != nil {
		return nil, rpcError(fmt.Errorf("%w: %v", sites.ErrInvalid, err))
	}
	ctx, cancel := context.WithTimeout(ctx, shotTimeout)
	defer cancel()
	release, err := v.sites.Hold(ctx, s.ID, sites.DoorAPI)
	if err != nil {
		return nil, rpcError(err)
	}
	defer release()
	backend, ok := v.sites.Backend(s.ID)
	if !ok {
		return nil, rpcError(fmt.Errorf("%w: site %s is not running", sites.ErrNotRunning, s.ID))
	}
	r.Backend = backend
	if m.SignedIn {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		token := hex.EncodeToString(b)
		sum := sha256.Sum256([]byte(token))
		if err := v.sites.AddLoginToken(s.ID, hex.EncodeToString(sum[:]), time.Now().Add(time.Minute), "", r.Path); err != nil {
			return nil, rpcError(err)
		}
		r.LoginURL = s.URL + "/?sandbox_login=" + token
	}
	start := time.Now()
	shot, err := v.shots.Take(ctx, r)
	if errors.Is(err, screenshot.ErrBusy) {
		return nil, connect.NewError(connect.CodeResourceExhausted, err)
	}
	if err != nil {
		v.log.Warn("screenshot failed", "site_id", s.ID, "err", err)
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	v.log.Info("screenshot taken", "site_id", s.ID, "bytes", len(shot.PNG), "loaded", shot.Loaded, "ms", time.Since(start).Milliseconds())
	return connect.NewResponse(&agentv1.Screenshot{ShotId: shot.ID, Png: shot.PNG, Width: int32(shot.Width), Height: int32(shot.Height),
		Loaded: shot.Loaded, ExpiresUnixMs: shot.ExpiresAt.UnixMilli()}), nil
}

func (v *service) GetScreenshot(_ context.Context, req *connect.Request[agentv1.ScreenshotRef]) (*connect.Response[agentv1.Screenshot], error) {
	if v.shots == nil {
		return nil, connect.NewError(connect.CodeNotFound, screenshot.ErrNotFound)
	}
	png, err := v.shots.Get(req.Msg.ShotId)
	if err != nil {
		return nil, connect.NewError(connect.CodeNotFound, err)
	}
	return connect.NewResponse(&agentv1.Screenshot{ShotId: req.Msg.ShotId, Png: png}), nil
}
