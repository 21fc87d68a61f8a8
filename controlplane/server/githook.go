package server

import (
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/gitpush"
	"github.com/sandboxd/sandboxd/controlplane/repos"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// gitHook answers the push webhooks code hosts deliver for connected
// repositories: 202 with the deploy's job, 200 with why nothing was
// deployed, 401 for a delivery whose signature does not match, 404 for
// an unknown repository or a wrong secret alike.
func gitHook(svc *repos.Service, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest.SetRoute(r.Context(), "POST /hooks/git/{id}/{secret}")
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, gitpush.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				apierr.Write(w, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge, "a push delivery is at most %d bytes", gitpush.MaxBodyBytes))
				return
			}
			apierr.Write(w, apierr.Invalid("", "the body could not be read"))
			return
		}
		res, err := svc.Push(r.Context(), r.PathValue("id"), r.PathValue("secret"), r.Header, body)
		if err != nil {
			apierr.Write(w, err)
			return
		}
		status := http.StatusOK
		if res.JobID != "" {
			status = http.StatusAccepted
			log.Info("push deploys", "component", "githook", "repository_id", r.PathValue("id"), "job_id", res.JobID)
		}
		_ = rest.JSON(w, status, res)
	})
}
