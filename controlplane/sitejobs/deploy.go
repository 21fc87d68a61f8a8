package sitejobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/blobs"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/state"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// DeployPlugin installs a plugin or theme ZIP into a ready site.
const DeployPlugin = "deploy_plugin"

// DeployPayload is what a deploy_plugin job carries: the ZIP by its blob
// name, never its bytes.
type DeployPayload struct {
	BlobSHA256 string `json:"blobSha256"`
	Activate   bool   `json:"activate"`
	// Source says where the ZIP came from: library:<slug>, url or upload.
	Source string `json:"source"`
}

// Blobs reads and drops stored ZIPs.
type Blobs interface {
	Get(sha string) ([]byte, error)
	Delete(sha string) error
}

func (r *Runners) deploy(ctx context.Context, j *state.Job, progress func(int)) error {
	var p DeployPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return fmt.Errorf("deploy_plugin payload: %w", err)
	}
	err := r.deployOnce(ctx, j, p, progress)
	// Once the job is over, its ZIP goes unless the Library (or another
	// deploy) holds it: uploads and URL downloads, and the ZIP of an entry
	// deleted meanwhile.
	if err == nil || errors.As(err, new(*jobs.Failure)) {
		if !BlobInUse(r.Store, p.BlobSHA256, j.ID) {
			_ = r.Blobs.Delete(p.BlobSHA256)
		}
	}
	return err
}

func (r *Runners) deployOnce(ctx context.Context, j *state.Job, p DeployPayload, progress func(int)) error {
	s, err := r.site(j)
	if err != nil {
		return err
	}
	if s.Status != state.SiteReady {
		return &jobs.Failure{Code: "invalid_request", Message: "the site is " + s.Status + "; plugins install on a ready site"}
	}
	zip, err := r.Blobs.Get(p.BlobSHA256)
	if errors.Is(err, blobs.ErrMissing) {
		return &jobs.Failure{Code: "zip_missing", Message: "the ZIP is no longer held by the control plane (" + p.Source + "); deploy again"}
	}
	if err != nil {
		return err
	}
	progress(20)
	agent, err := r.Agents.Agent(s.NodeID)
	if err != nil {
		return &jobs.Failure{Code: "node_unavailable", Message: err.Error()}
	}
	if _, err := agent.InstallPlugin(ctx, connect.NewRequest(&agentv1.InstallPluginRequest{SiteId: s.ID, JobId: j.ID,
		Zip: zip, Activate: p.Activate})); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return failure("installing "+p.Source, err)
	}
	return nil
}

// BlobInUse reports whether a Library entry or an unfinished deploy job
// other than exceptJob still needs a blob, so it is not dropped under it.
func BlobInUse(store *state.Store, sha, exceptJob string) bool {
	if inUse, err := store.LibraryBlobInUse(sha); err != nil || inUse {
		return true
	}
	pending, err := pendingDeploys(store)
	if err != nil {
		return true
	}
	for jobID, blob := range pending {
		if blob == sha && jobID != exceptJob {
			return true
		}
	}
	return false
}

// WantedBlobs are the ZIPs every server keeps: the Library's and those of
// deploys not finished yet (a new leader may have to run them).
func WantedBlobs(store *state.Store) ([]string, error) {
	out, err := store.LibraryBlobs()
	if err != nil {
		return nil, err
	}
	pending, err := pendingDeploys(store)
	for _, sha := range pending {
		out = append(out, sha)
	}
	return out, err
}

// pendingDeploys maps each unfinished deploy job to its ZIP.
func pendingDeploys(store *state.Store) (map[string]string, error) {
	js, _, err := store.UnfinishedJobs()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, j := range js {
		var p DeployPayload
		if j.Type == DeployPlugin && json.Unmarshal(j.Payload, &p) == nil && p.BlobSHA256 != "" {
			out[j.ID] = p.BlobSHA256
		}
	}
	return out, nil
}
