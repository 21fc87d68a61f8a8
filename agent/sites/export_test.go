package sites

import (
	"context"
	"io"

	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/internal/urlrewrite"
)

// UnpackForTests reads an import into the site's staging database as
// RestoreArchive does, with the files the site's tar would unpack in its
// container read and dropped instead: the reading, spooling and loading,
// without a container.
func (m *Manager) UnpackForTests(ctx context.Context, s *Site, req RestoreRequest, r io.Reader) (*RestoreResult, error) {
	rw, err := urlrewrite.New(req.SourceURL, s.URL)
	if err != nil {
		return nil, err
	}
	return m.unpack(ctx, s, discardTar{}, stagingDir(req.JobID), s.DBName+"_i", req, r, rw)
}

// discardTar takes the tar a site's container would unpack.
type discardTar struct{}

func (discardTar) ExecReader(_ context.Context, _ string, _, _ []string, _, _ uint32, stdin io.Reader) (*runtime.ExecResult, error) {
	_, err := io.Copy(io.Discard, stdin)
	return &runtime.ExecResult{}, err
}
