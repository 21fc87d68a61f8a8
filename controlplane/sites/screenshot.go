package sites

import (
	"context"
	"errors"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// Screenshot takes a picture of a page of a ready site with its node's
// browser and gives its short-lived URL (and the PNG, for an MCP answer).
func (s *Service) Screenshot(ctx context.Context, site *state.Site, in sitespec.ScreenshotRequest) (*sitespec.Screenshot, error) {
	if in.Path == "" {
		in.Path = "/"
	}
	switch {
	case !strings.HasPrefix(in.Path, "/") || strings.HasPrefix(in.Path, "//") || strings.ContainsAny(in.Path, "\\\x00\r\n") || len(in.Path) > 2048:
		return nil, apierr.Invalid("path", "path must be a path on the site, starting with /")
	case in.Width != 0 && (in.Width < 320 || in.Width > 2560):
		return nil, apierr.Invalid("width", "width must be 320 to 2560")
	case in.Height != 0 && (in.Height < 240 || in.Height > 2560):
		return nil, apierr.Invalid("height", "height must be 240 to 2560")
	}
	if s.cfg.ShotURL == nil {
		return nil, apierr.Unavailable("screenshots are off on this server")
	}
	a, err := s.agent(site)
	if err != nil {
		return nil, err
	}
	resp, err := a.TakeScreenshot(ctx, connect.NewRequest(&agentv1.TakeScreenshotRequest{SiteId: site.ID, Path: in.Path,
		Width: int32(in.Width), Height: int32(in.Height), FullPage: in.FullPage, SignedIn: in.SignedIn}))
	if err != nil {
		var ce *connect.Error
		switch {
		case errors.As(err, &ce) && ce.Code() == connect.CodeInvalidArgument:
			return nil, apierr.Invalid("", "%s", ce.Message())
		case errors.As(err, &ce) && ce.Code() == connect.CodeResourceExhausted:
			return nil, apierr.Unavailable("the site's node is taking as many screenshots as it may; retry in a few seconds")
		}
		return nil, agentError(err)
	}
	m := resp.Msg
	expires := time.UnixMilli(m.ExpiresUnixMs).UTC()
	return &sitespec.Screenshot{URL: s.cfg.ShotURL(site.NodeID, m.ShotId, expires), Width: int(m.Width), Height: int(m.Height),
		Loaded: m.Loaded, ExpiresAt: expires, PNG: m.Png}, nil
}
