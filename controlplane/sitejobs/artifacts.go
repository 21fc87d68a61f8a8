package sitejobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/jobs"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// Artifacts keeps template artifacts as streamed blobs.
type Artifacts interface {
	PutStream(ctx context.Context, r io.Reader, max int64) (string, int64, error)
	Open(ctx context.Context, sha string) (io.ReadCloser, int64, error)
}

// MaxArtifact bounds one template artifact.
const MaxArtifact = 16 << 30

// artifactChunk is how much of an artifact one message to an agent holds.
const artifactChunk = 1 << 20

// streamReader reads the data of a server stream's messages.
type streamReader struct {
	stream *connect.ServerStreamForClient[agentv1.Chunk]
	buf    []byte
}

func (s *streamReader) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		if !s.stream.Receive() {
			if err := s.stream.Err(); err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		s.buf = s.stream.Msg().Data
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

// exportArtifact streams a template's artifact from the node that froze
// it into the blob store and returns its blob.
func (r *Runners) exportArtifact(ctx context.Context, agent agentv1connect.AgentServiceClient, templateID, jobID string) (string, error) {
	if r.Artifacts == nil {
		return "", errors.New("no artifact store")
	}
	stream, err := agent.ExportTemplate(ctx, connect.NewRequest(&agentv1.TemplateRef{TemplateId: templateID, JobId: jobID}))
	if err != nil {
		return "", err
	}
	defer stream.Close()
	sha, _, err := r.Artifacts.PutStream(ctx, &streamReader{stream: stream}, MaxArtifact)
	return sha, err
}

// ensureTemplate makes sure a node holds a template before a site is made
// from it there: a node that does not is sent the template's artifact.
func (r *Runners) ensureTemplate(ctx context.Context, agent agentv1connect.AgentServiceClient, nodeID, templateID, jobID string) error {
	if r.Held != nil && slices.Contains(r.Held.HeldTemplates(nodeID), templateID) {
		return nil
	}
	if tpl, err := r.Store.TemplateByBuild(templateID); err == nil && tpl != nil && tpl.NodeID == nodeID {
		return nil
	}
	return r.sendTemplate(ctx, agent, templateID, jobID)
}

// sendTemplate streams a template's artifact from the blob store to an
// agent, which keeps it as a template of its own; templateID is the
// template's build.
func (r *Runners) sendTemplate(ctx context.Context, agent agentv1connect.AgentServiceClient, templateID, jobID string) error {
	tpl, err := r.Store.TemplateByBuild(templateID)
	if err != nil {
		return err
	}
	if tpl == nil || tpl.ArtifactSHA256 == "" || r.Artifacts == nil {
		return &jobs.Failure{Code: "template_unavailable", Message: "the template is not on the site's node and has no artifact to copy there"}
	}
	f, _, err := r.Artifacts.Open(ctx, tpl.ArtifactSHA256)
	if err != nil {
		return &jobs.Failure{Code: "template_unavailable", Message: "the template's artifact is not on this server yet: " + err.Error()}
	}
	defer f.Close()
	stream := agent.ImportTemplate(ctx)
	send := func(m *agentv1.ImportTemplateRequest) (bool, error) {
		if err := stream.Send(m); err != nil {
			if errors.Is(err, io.EOF) { // the agent answered early (it holds the template)
				return false, nil
			}
			return false, err
		}
		return true, nil
	}
	more, err := send(&agentv1.ImportTemplateRequest{TemplateId: templateID, JobId: jobID})
	buf := make([]byte, artifactChunk)
	for more && err == nil {
		n, rerr := f.Read(buf)
		if n > 0 {
			more, err = send(&agentv1.ImportTemplateRequest{Data: buf[:n]})
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil && err == nil {
			err = fmt.Errorf("read artifact: %w", rerr)
		}
	}
	if err != nil {
		_, _ = stream.CloseAndReceive()
		return err
	}
	if _, err := stream.CloseAndReceive(); err != nil {
		return failure("copying the template to the site's node", err)
	}
	return nil
}
