// Package blueprintspec is what the API and the Blueprints service say
// to each other: callers, saves, uploads, patches, checks and reading a
// source. It holds no Raft command.
package blueprintspec

import (
	"bytes"
	"encoding/json"

	"github.com/sandboxd/sandboxd/blueprint"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// MaxSource bounds a source (the API's JSON body limit leaves room for
// the rest of a request).
const MaxSource = 512 << 10

// NotFound is the contract's 404 for a Blueprint.
func NotFound() error { return apierr.NotFound(apierr.CodeBlueprintNotFound, "blueprint") }

// In returns a Blueprint of the workspace; another workspace's is
// indistinguishable from none.
func In(store *state.Store, workspaceID, id string) (*state.Blueprint, error) {
	b, err := store.Blueprint(id)
	if err != nil {
		return nil, err
	}
	if b == nil || b.WorkspaceID != workspaceID {
		return nil, NotFound()
	}
	return b, nil
}

// Source reads a source as the API takes it: a JSON object, or a string
// holding one. field names it in errors.
func Source(raw json.RawMessage, field string) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, apierr.Invalid(field, "%s is required: the Blueprint JSON, as an object or a string", field)
	}
	if raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, apierr.Invalid(field, "%s is not a JSON string", field)
		}
		raw = bytes.TrimSpace([]byte(text))
	}
	if len(raw) > MaxSource {
		return nil, apierr.Invalid(field, "%s is larger than %d KiB", field, MaxSource>>10)
	}
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return nil, apierr.Invalid(field, "%s must be a JSON object (a Playground Blueprint)", field).
			With("finding", blueprint.Check(raw, blueprint.Env{}).Report)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		return nil, apierr.Invalid(field, "%s: %v", field, err)
	}
	return out.Bytes(), nil
}

// Validation is a check's answer.
type Validation struct {
	Valid        bool                `json:"valid"`
	CompatReport []blueprint.Finding `json:"compatReport"`
	Adapted      *Adaptation         `json:"adapted,omitempty" doc:"With adapt: true: a source that runs here and the changes made to get it."`
}

// Adaptation is an adapted source and its changes.
type Adaptation struct {
	Source  json.RawMessage    `json:"source"`
	Changes []blueprint.Change `json:"changes"`
	Valid   bool               `json:"valid" doc:"Whether the adapted source has no error finding left."`
}

// Create is what a new Blueprint is saved from.
type Create struct {
	Workspace   *state.Workspace
	By          *state.Account
	Name        string
	Description string
	Source      []byte
	// Answer, for a REST request, is rendered from the saved Blueprint
	// and goes in its Raft entry (nil: none).
	Answer *writes.Answer[state.Blueprint]
}

// Upload is a bundle upload: exactly one of Bundle (the ZIP) and
// BundleURL. Preview inspects without saving.
type Upload struct {
	Workspace           *state.Workspace
	By                  *state.Account
	Name, Description   string
	Bundle              []byte
	BundleURL           string
	AdaptationsAccepted bool
	Preview             bool
	// Answer, for a REST request, is rendered from the saved Blueprint
	// and goes in its Raft entry (nil: none).
	Answer *writes.Answer[state.Blueprint]
}

// UploadResult is an upload's Blueprint (not saved on a preview) and the
// adaptation it needed, if any.
type UploadResult struct {
	Blueprint *state.Blueprint
	Adapted   *Adaptation
}

// Patch is the body of PATCH /api/app/blueprints/{id}.
type Patch struct {
	Name        *string
	Description *string
	// Source, when set, replaces the source: the revision grows by one.
	Source []byte
}

// Caller is who starts a run, in which workspace.
type Caller struct {
	Workspace *state.Workspace
	By        *state.Account
	// Answer, for a REST request, is rendered from what the call made
	// and goes in its Raft entry (nil: none).
	Answer *writes.Answer[sitespec.Made]
}
