// Package importspec is what the API and the imports service say to each
// other: callers, creates, uploads' parts and progress. It holds no Raft
// command.
package importspec

import (
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
)

// MaxChunk bounds one upload request's body.
const MaxChunk = 64 << 20

// Multipart modes: parts go straight to the object store, or (no store
// configured) the client uses the chunked upload instead.
const (
	ModeDirect = "direct"
	ModeLocal  = "local"
)

// Manifest entry kinds: an archive (tar, tar.gz, tar.zst, ZIP) or a SQL
// dump.
const (
	KindArchive = "archive"
	KindSQL     = "sql"
)

// Caller is who acts on imports, in which workspace.
type Caller struct {
	Workspace *state.Workspace
	By        *state.Account
	// Client is the OAuth client of a connector's (scoped) token, empty
	// for a personal one. Such a caller sees only its client's imports
	// and restores only into new sandboxes or sites its client's imports
	// made: its consent page promised nothing more.
	Client string
}

// CreateInput is a new import.
type CreateInput struct {
	SourceURL  string
	SiteID     string
	SizeBytes  int64
	SourceKind string
	// Answer, for a REST request, is rendered from the import and goes in
	// its Raft entry (nil: none).
	Answer *writes.Answer[state.Import]
}

// Phases is every phase Progress shows: the upload, the restore job's
// steps (sitejobs reports creating_site, restoring, finishing, done) and
// the import's end states.
var Phases = []string{"uploading", "creating_site", "restoring", "finishing", "done", state.ImportFailed, state.ImportCancelled}

// Progress is where an import is: uploading, then the restore's phases.
type Progress struct {
	Phase      string `json:"phase" enum:"@importPhase"`
	Percent    int    `json:"percent"`
	BytesDone  int64  `json:"bytesDone"`
	BytesTotal int64  `json:"bytesTotal"`
}

// ObjectIn is an object a client will upload.
type ObjectIn struct {
	Key       string `json:"key"`
	SizeBytes int64  `json:"sizeBytes"`
}

// PartIn is a part the client uploaded, as the store answered it.
type PartIn struct {
	PartNumber int    `json:"partNumber"`
	ETag       string `json:"etag"`
}

// Init is the answer to multipart/init.
type Init struct {
	Mode          string `json:"mode" enum:"@multipartMode" doc:"local: no object store here; upload with PUT …/upload chunks instead."`
	UploadID      string `json:"uploadId"`
	PartSizeBytes int64  `json:"partSizeBytes" doc:"Every part but an object's last has this size (in local mode: the largest chunk)."`
}

// PartURL is a presigned URL for one part.
type PartURL struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}
