package sitejobs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/blobs"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/library"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/safefetch"
	"github.com/sandboxd/sandboxd/internal/wpzip"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// Blobs reads, stores and drops ZIPs.
type Blobs interface {
	Get(ctx context.Context, sha string) ([]byte, error)
	Put(ctx context.Context, data []byte) (string, error)
	Delete(ctx context.Context, sha string) error
}

// Fetcher downloads a customer-given URL without reaching private
// addresses (safefetch.Client), up to max bytes.
type Fetcher interface {
	Get(ctx context.Context, raw string, max int64, header http.Header) ([]byte, error)
}

// Job failure codes of deploy_plugin besides the shared ones.
const (
	// CodeZipFetchFailed: the zipUrl download failed (refused address,
	// unreachable host, non-200 answer).
	CodeZipFetchFailed = "zip_fetch_failed"
	// CodePayloadTooLarge: the ZIP at zipUrl is over wpzip.MaxZipBytes.
	CodePayloadTooLarge = "payload_too_large"
)

func (r *Runners) deploy(ctx context.Context, j *state.Job, progress func(int)) error {
	p, err := payloadOf[jobspec.DeployPayload](j)
	if err != nil {
		return err
	}
	sha, err := r.deployOnce(ctx, j, p, progress)
	// Once the job is over, its ZIP goes unless the Library (or another
	// deploy) holds it: uploads and URL downloads, and the ZIP of an entry
	// deleted meanwhile. A download is only ever needed by this run (a
	// re-run fetches again), so it goes even when the run is cut short; a
	// copy a crash leaves behind is collected by the leader (blobs.Syncer
	// Collect), as nothing names it.
	over := err == nil || errors.As(err, new(*jobs.Failure)) || p.ZipURL != ""
	if sha != "" && over && !library.BlobInUse(r.Store, sha, j.ID) {
		_ = r.Blobs.Delete(context.WithoutCancel(ctx), sha)
	}
	return err
}

// deployOnce installs the job's ZIP and returns the blob it used.
func (r *Runners) deployOnce(ctx context.Context, j *state.Job, p jobspec.DeployPayload, progress func(int)) (string, error) {
	s, err := r.site(j)
	if err != nil {
		return p.BlobSHA256, err
	}
	if s.Status != state.SiteReady {
		return p.BlobSHA256, &jobs.Failure{Code: "invalid_request", Message: "the site is " + s.Status + "; plugins install on a ready site"}
	}
	var zip []byte
	if p.ZipURL != "" {
		if zip, err = r.fetchZip(ctx, p.ZipURL); err != nil {
			return "", err
		}
		if p.BlobSHA256, err = r.Blobs.Put(ctx, zip); err != nil {
			return "", fmt.Errorf("store fetched zip: %w", err)
		}
	} else {
		zip, err = r.Blobs.Get(ctx, p.BlobSHA256)
		if errors.Is(err, blobs.ErrMissing) {
			return p.BlobSHA256, &jobs.Failure{Code: "zip_missing", Message: "the ZIP is no longer held by the control plane (" + p.Source + "); deploy again"}
		}
		if err != nil {
			return p.BlobSHA256, err
		}
	}
	progress(20)
	agent, err := r.agentOf(s)
	if err != nil {
		return p.BlobSHA256, err
	}
	if _, err := agent.InstallPlugin(ctx, connect.NewRequest(&agentv1.InstallPluginRequest{SiteId: s.ID, JobId: j.ID,
		Zip: zip, Activate: p.Activate})); err != nil {
		if ctx.Err() != nil {
			return p.BlobSHA256, ctx.Err()
		}
		return p.BlobSHA256, failure("installing "+p.Source, err)
	}
	return p.BlobSHA256, nil
}

// fetchZip downloads a zipUrl and checks it as every ZIP bound for a site
// is checked. The error never quotes the URL (it may hold a signed query
// string), only its host.
func (r *Runners) fetchZip(ctx context.Context, raw string) ([]byte, error) {
	host := raw
	if u, err := url.Parse(raw); err == nil {
		host = u.Host
	}
	if r.Fetch == nil {
		return nil, &jobs.Failure{Code: CodeZipFetchFailed, Message: "this server does not fetch URLs"}
	}
	data, err := r.Fetch.Get(ctx, raw, wpzip.MaxZipBytes, nil)
	var ue *url.Error
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, safefetch.ErrTooLarge):
		return nil, &jobs.Failure{Code: CodePayloadTooLarge,
			Message: fmt.Sprintf("the ZIP at %s is over %d bytes", host, wpzip.MaxZipBytes)}
	case errors.As(err, &ue):
		return nil, &jobs.Failure{Code: CodeZipFetchFailed, Message: "fetching the ZIP from " + host + ": " + ue.Err.Error()}
	default:
		return nil, &jobs.Failure{Code: CodeZipFetchFailed, Message: "fetching the ZIP from " + host + ": " + err.Error()}
	}
	if len(data) == 0 {
		return nil, &jobs.Failure{Code: "invalid_request", Message: "the ZIP at " + host + " is empty"}
	}
	if _, err := wpzip.Inspect(data, wpzip.DefaultLimits); err != nil {
		return nil, &jobs.Failure{Code: "invalid_request",
			Message: "the ZIP at " + host + ": " + strings.TrimPrefix(err.Error(), wpzip.ErrInvalid.Error()+": ")}
	}
	return data, nil
}
