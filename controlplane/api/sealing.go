package api

import (
	"context"
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sealingspec"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Sealing is what the sealing key routes need of the server: its own
// keyring, every server's, and the leader's rotation.
type Sealing interface {
	Local() sealingspec.Status
	Keyrings(ctx context.Context) []sealingspec.Status
	Rotate(ctx context.Context, dryRun bool) (*sealingspec.Rotation, error)
}

// KeyringPath is where a server asks another for its keyring (the ids of
// its sealing keys, never the keys).
const KeyringPath = "/internal/sealing/keyring"

// RotateSealingKeyRequest asks for a rotation.
type RotateSealingKeyRequest struct {
	DryRun bool `json:"dryRun,omitempty" doc:"Count what would be resealed; change nothing."`
}

type rotationResponse struct {
	Rotation sealingspec.Rotation `json:"rotation"`
}

type keyringsResponse struct {
	Servers []sealingspec.Status `json:"servers"`
}

// KeyringResponse is one server's answer at KeyringPath.
type KeyringResponse struct {
	Keyring sealingspec.Status `json:"keyring"`
}

// sealingRoutes are the servers' sealing keys and their rotation.
type sealingRoutes struct {
	*base
	sealing Sealing
}

func (a sealingRoutes) register(r *rest.Router) {
	a.operator(r, rest.Route{Method: "GET", Path: "/api/admin/sealing-key",
		Summary:  "Every server's sealing keys, by id (the first seals), and whether they open the cluster's values.",
		Response: keyringsResponse{}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			return rest.JSON(w, http.StatusOK, keyringsResponse{Servers: a.sealing.Keyrings(req.Context())})
		}})
	a.operator(r, rest.Route{Method: "POST", Path: "/api/admin/sealing-key/rotate",
		Summary: "Seal every sealed value of the state again with the current sealing key (the first of every server's keys). " +
			"Idempotent: a second run reseals nothing, and a run cut short is finished by the next. Values no key opens are counted, never dropped.",
		Request: RotateSealingKeyRequest{}, Response: rotationResponse{},
		Errors: []string{apierr.CodeConflict},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			var body RotateSealingKeyRequest
			if err := rest.DecodeJSON(req, &body); err != nil {
				return err
			}
			rot, err := a.sealing.Rotate(req.Context(), body.DryRun)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, rotationResponse{Rotation: *rot})
		}})
	a.internal(r, rest.Route{Method: "GET", Path: KeyringPath, Summary: "This server's sealing key ids.",
		Response: KeyringResponse{}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			return rest.JSON(w, http.StatusOK, KeyringResponse{Keyring: a.sealing.Local()})
		}})
}
