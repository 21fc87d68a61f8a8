package api

import (
	"context"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/importspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Imports is what the import routes need from the imports service.
type Imports interface {
	Create(ctx context.Context, c importspec.Caller, in importspec.CreateInput) (*state.Import, error)
	In(c importspec.Caller, id string) (*state.Import, error)
	List(c importspec.Caller) ([]*state.Import, error)
	Upload(ctx context.Context, imp *state.Import, offset int64, body io.Reader) (int64, error)
	Complete(ctx context.Context, c importspec.Caller, imp *state.Import) (*state.Import, string, error)
	Cancel(ctx context.Context, imp *state.Import) (*state.Import, error)
	Delete(ctx context.Context, imp *state.Import) error
	ProgressOf(imp *state.Import) importspec.Progress
	Received(imp *state.Import) int64
	InitMultipart(ctx context.Context, imp *state.Import, objects []importspec.ObjectIn) (*importspec.Init, error)
	PartURLFor(ctx context.Context, imp *state.Import, key string, part int) (*importspec.PartURL, error)
	CompleteObject(ctx context.Context, imp *state.Import, key string, parts []importspec.PartIn) (*state.Import, error)
	Finalize(ctx context.Context, c importspec.Caller, imp *state.Import, manifest []state.ManifestEntry) (*state.Import, string, error)
	AbortMultipart(ctx context.Context, imp *state.Import) (*state.Import, error)
}

// OffsetHeader carries an upload chunk's byte offset.
const OffsetHeader = "X-Service-Offset"

// ImportView is the contract's Import.
type ImportView struct {
	ID              string    `json:"id"`
	UserID          string    `json:"userId"`
	OrgID           string    `json:"orgId"`
	CreatedByUserID string    `json:"createdByUserId"`
	SourceKind      string    `json:"sourceKind" enum:"@importSourceKind"`
	SourceURL       string    `json:"sourceUrl" doc:"The live site's URL; its occurrences in the database become the sandbox's URL."`
	ArtifactID      string    `json:"artifactId" doc:"The sealed archive, once complete."`
	SiteID          string    `json:"siteId" doc:"The sandbox restored into (a new one is made at completion when none was given)."`
	Status          string    `json:"status" enum:"@importStatus"`
	FailureReason   string    `json:"failureReason"`
	SizeBytes       int64     `json:"sizeBytes"`
	ReceivedBytes   int64     `json:"receivedBytes" doc:"Bytes uploaded so far: the offset of the next chunk."`
	JobID           string    `json:"jobId" doc:"The import_restore job, once complete."`
	CreatedAt       time.Time `json:"createdAt"`
	UpdatedAt       time.Time `json:"updatedAt"`
	SiteURL         *string   `json:"siteUrl,omitempty" doc:"In list items: the current URL of a ready linked site."`
}

func (a importRoutes) importView(imp *state.Import) ImportView {
	return ImportView{ID: imp.ID, UserID: imp.UserID, OrgID: imp.WorkspaceID, CreatedByUserID: imp.CreatedByUserID,
		SourceKind: imp.SourceKind, SourceURL: imp.SourceURL, ArtifactID: imp.ArtifactID, SiteID: imp.SiteID, Status: imp.Status,
		FailureReason: imp.FailureReason, SizeBytes: imp.SizeBytes, ReceivedBytes: a.imports.Received(imp), JobID: imp.JobID,
		CreatedAt: imp.CreatedAt, UpdatedAt: imp.UpdatedAt}
}

// CreateImportRequest starts an import.
type CreateImportRequest struct {
	SourceURL  string `json:"sourceUrl" doc:"The live site's URL (its WordPress home)."`
	SiteID     string `json:"siteId,omitempty" doc:"A ready sandbox to restore into in place; omit it to get a new sandbox. A connector's (scoped) token names only sites its own client's imports made (site_not_found otherwise)."`
	SizeBytes  int64  `json:"sizeBytes" doc:"The archive's exact size in bytes (at least 1)."`
	SourceKind string `json:"sourceKind,omitempty" enum:"@importSourceKind" doc:"remote_plugin for the connector plugin; archive (default) for any other client."`
}

type importResponse struct {
	Import ImportView `json:"import"`
}

// importDeleteResponse is a cancel's import, or a removal's deleted.
type importDeleteResponse struct {
	Import  *ImportView `json:"import,omitempty" doc:"Without action: the cancelled import."`
	Deleted *bool       `json:"deleted,omitempty" doc:"With action=delete: true."`
}

type importsResponse struct {
	Imports []ImportView `json:"imports"`
}

type importJobResponse struct {
	Import ImportView `json:"import"`
	JobID  string     `json:"jobId"`
}

type chunkResponse struct {
	ReceivedBytes int64 `json:"receivedBytes"`
}

// ImportDetail is one import with its sandbox and where its restore is.
type ImportDetail struct {
	Import   ImportView          `json:"import"`
	Site     *SiteView           `json:"site"`
	Progress importspec.Progress `json:"progress"`
	SiteURL  *string             `json:"siteUrl" doc:"Once ready: the sandbox's URL."`
	LoginURL *string             `json:"loginUrl" doc:"Once ready: a one-time link that opens wp-admin signed in (a new one on every read, valid 5 minutes; a site keeps its 32 newest unused links, older ones stop working)."`
}

// MultipartInitRequest declares the objects of a direct upload.
type MultipartInitRequest struct {
	Objects []importspec.ObjectIn `json:"objects" doc:"The objects to upload; their sizes add up to the import's sizeBytes."`
}

// PartURLRequest asks for one part's upload URL.
type PartURLRequest struct {
	Key        string `json:"key"`
	PartNumber int    `json:"partNumber"`
}

// CompleteObjectRequest finishes one object.
type CompleteObjectRequest struct {
	Key   string              `json:"key"`
	Parts []importspec.PartIn `json:"parts,omitempty" doc:"The parts as uploaded (partNumber, etag); checked against the store's own list."`
}

// FinalizeRequest starts the restore of a direct upload.
type FinalizeRequest struct {
	Manifest Manifest `json:"manifest"`
}

// Manifest orders the objects restored as one archive.
type Manifest struct {
	Objects []ManifestObject `json:"objects"`
}

// ManifestObject is one object of a manifest.
type ManifestObject struct {
	Key  string `json:"key"`
	Kind string `json:"kind" enum:"@importObjectKind" doc:"archive: a tar, tar.gz, tar.zst or ZIP; sql: a SQL dump."`
}

var importParam = map[string]string{"id": "import"}

// importRoutes are imports and their uploads.
type importRoutes struct {
	*base
	imports Imports
	tools   SiteTools
}

func (a importRoutes) register(r *rest.Router) {
	if a.imports == nil {
		return
	}
	read := guard{scope: scopeWorkspace, oauthScope: "import:read"}
	write := guard{scope: scopeWorkspace, capability: access.Create, oauthScope: "import:write"}
	nf := []string{apierr.CodeImportNotFound}
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/imports", Tag: "imports",
		Summary:  "List the workspace's imports, each with its ready site's URL (a connector's token: only its own client's imports).",
		Response: importsResponse{}, Handler: a.listImports})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/imports", Tag: "imports", Status: http.StatusCreated,
		Summary: "Start an import: upload its archive next (PUT …/upload in chunks, or multipart), then complete it.",
		Request: CreateImportRequest{}, Response: importResponse{}, Idempotent: true,
		Errors:  []string{apierr.CodeInvalidRequest, apierr.CodeSiteNotFound, apierr.CodeConflict, apierr.CodePayloadTooLarge},
		Handler: a.createImport})
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/imports/{id}", Tag: "imports", Params: importParam,
		Summary: "One import: its sandbox, restore progress and, once ready, the site URL and a one-time login URL " +
			"(a connector's token reads only its own client's imports: import_not_found otherwise).",
		Response: ImportDetail{}, Errors: nf, Handler: a.getImport})
	a.bearer(r, write, rest.Route{Method: "PUT", Path: "/api/app/imports/{id}/upload", Tag: "imports", Params: importParam,
		Summary: "Append a chunk (application/octet-stream, at most 64 MiB) at byte X-Service-Offset, which must equal the " +
			"bytes received so far (409 offset_mismatch with details.expectedOffset otherwise: go on from there).",
		Response: chunkResponse{}, MaxBody: importspec.MaxChunk,
		Errors:  append([]string{apierr.CodeInvalidRequest, apierr.CodeOffsetMismatch, apierr.CodePayloadTooLarge}, nf...),
		Handler: a.uploadImport})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/imports/{id}/complete", Tag: "imports", Params: importParam,
		Status: http.StatusAccepted, Summary: "Seal the uploaded archive and start the restore (asking again answers the same).",
		Response: importJobResponse{}, Errors: append([]string{apierr.CodeInvalidRequest, apierr.CodeConflict, apierr.CodePlanLimitReached}, nf...),
		Handler: a.completeImport})
	a.bearer(r, write, rest.Route{Method: "DELETE", Path: "/api/app/imports/{id}", Tag: "imports", Params: importParam,
		Query: map[string]string{"action": "delete: remove the history row (cancelling the import first if unfinished); " +
			"an already-made sandbox stays. Without it: cancel an unfinished import and keep its row."},
		Summary: "Cancel an import, or with ?action=delete remove its row.", Response: importDeleteResponse{},
		Errors: append([]string{apierr.CodeInvalidRequest, apierr.CodeConflict}, nf...), Handler: a.deleteImport})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/imports/{id}/multipart/init", Tag: "imports", Params: importParam,
		Summary: "Declare the objects of a direct upload to the object store (mode direct), or learn that there is " +
			"none here (mode local: use the chunked upload).",
		Request: MultipartInitRequest{}, Response: importspec.Init{}, Errors: append([]string{apierr.CodeInvalidRequest, apierr.CodeConflict}, nf...),
		Handler: a.multipartInit})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/imports/{id}/multipart/part-url", Tag: "imports", Params: importParam,
		Summary: "A presigned URL to PUT one part of an object to (valid one hour).",
		Request: PartURLRequest{}, Response: importspec.PartURL{}, Errors: append([]string{apierr.CodeInvalidRequest}, nf...),
		Handler: a.multipartPartURL})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/imports/{id}/multipart/complete-object", Tag: "imports", Params: importParam,
		Summary: "Join an object's uploaded parts.", Request: CompleteObjectRequest{}, Response: importResponse{},
		Errors: append([]string{apierr.CodeInvalidRequest, apierr.CodeConflict}, nf...), Handler: a.multipartCompleteObject})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/imports/{id}/multipart/finalize", Tag: "imports", Params: importParam,
		Status: http.StatusAccepted, Summary: "Start the restore of the uploaded objects, read in the manifest's order as one archive.",
		Request: FinalizeRequest{}, Response: importJobResponse{},
		Errors:  append([]string{apierr.CodeInvalidRequest, apierr.CodeConflict, apierr.CodePlanLimitReached}, nf...),
		Handler: a.multipartFinalize})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/imports/{id}/multipart/abort", Tag: "imports", Params: importParam,
		Summary: "Abort the upload: the import fails and the uploaded objects are removed.", Response: importResponse{},
		Errors: append([]string{apierr.CodeInvalidRequest, apierr.CodeConflict}, nf...), Handler: a.multipartAbort})
}

// importCaller is the caller as the imports service sees it: a
// connector's token acts for its OAuth client.
func importCaller(c *Caller) importspec.Caller {
	ic := importspec.Caller{Workspace: c.Workspace, By: c.Account}
	if c.Token.Scoped() {
		ic.Client = c.Token.ClientID
	}
	return ic
}

func (a importRoutes) importIn(req *http.Request) (*state.Import, error) {
	return a.imports.In(importCaller(CallerFrom(req.Context())), req.PathValue("id"))
}

func (a importRoutes) listImports(w http.ResponseWriter, req *http.Request) error {
	list, err := a.imports.List(importCaller(CallerFrom(req.Context())))
	if err != nil {
		return err
	}
	out := importsResponse{Imports: make([]ImportView, 0, len(list))}
	for _, imp := range list {
		v := a.importView(imp)
		if s, _ := a.readySite(imp); s != nil {
			v.SiteURL = &s.URL
		}
		out.Imports = append(out.Imports, v)
	}
	return rest.JSON(w, http.StatusOK, out)
}

// readySite is an import's site once the import and the site are ready.
func (a importRoutes) readySite(imp *state.Import) (*state.Site, error) {
	if imp.Status != state.ImportReady || imp.SiteID == "" {
		return nil, nil
	}
	s, err := a.store.Site(imp.SiteID)
	if err != nil || s == nil || s.Status != state.SiteReady {
		return nil, err
	}
	return s, nil
}

func (a importRoutes) createImport(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body CreateImportRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusCreated, func(imp state.Import) any { return importResponse{Import: a.importView(&imp)} })
	_, err := a.imports.Create(req.Context(), importCaller(c), importspec.CreateInput{SourceURL: body.SourceURL,
		SiteID: body.SiteID, SizeBytes: body.SizeBytes, SourceKind: body.SourceKind, Answer: ans})
	return respond(a.base, w, req, ans, err)
}

func (a importRoutes) getImport(w http.ResponseWriter, req *http.Request) error {
	imp, err := a.importIn(req)
	if err != nil {
		return err
	}
	out := ImportDetail{Import: a.importView(imp), Progress: a.imports.ProgressOf(imp)}
	if imp.SiteID != "" {
		if s, err := a.store.Site(imp.SiteID); err != nil {
			return err
		} else if s != nil {
			v := siteView(s)
			out.Site = &v
		}
	}
	if s, err := a.readySite(imp); err != nil {
		return err
	} else if s != nil {
		out.SiteURL = &s.URL
		if a.tools != nil {
			link, err := a.tools.MagicLogin(req.Context(), s)
			if err != nil {
				a.log.Warn("import login link", "import_id", imp.ID, "err", err)
			} else {
				out.LoginURL = &link.URL
			}
		}
	}
	return rest.JSON(w, http.StatusOK, out)
}

func (a importRoutes) uploadImport(w http.ResponseWriter, req *http.Request) error {
	imp, err := a.importIn(req)
	if err != nil {
		return err
	}
	if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt != "application/octet-stream" {
		return apierr.Invalid("Content-Type", "an upload chunk is sent as application/octet-stream")
	}
	raw := strings.TrimSpace(req.Header.Get(OffsetHeader))
	offset, err := strconv.ParseInt(raw, 10, 64)
	if raw == "" || err != nil || offset < 0 {
		return apierr.Invalid(strings.ToLower(OffsetHeader), "header %s must be the chunk's byte offset (0 for the first)", strings.ToLower(OffsetHeader)).
			With("expectedOffset", a.imports.Received(imp))
	}
	n, err := a.imports.Upload(req.Context(), imp, offset, req.Body)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, chunkResponse{ReceivedBytes: n})
}

func (a importRoutes) completeImport(w http.ResponseWriter, req *http.Request) error {
	imp, err := a.importIn(req)
	if err != nil {
		return err
	}
	if err := drainEmpty(req); err != nil {
		return err
	}
	out, jobID, err := a.imports.Complete(req.Context(), importCaller(CallerFrom(req.Context())), imp)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusAccepted, importJobResponse{Import: a.importView(out), JobID: jobID})
}

// drainEmpty accepts a body-less POST or an empty JSON object.
func drainEmpty(req *http.Request) error {
	b, err := io.ReadAll(io.LimitReader(req.Body, 1<<10))
	if err != nil {
		return apierr.Invalid("", "the body could not be read")
	}
	if s := strings.TrimSpace(string(b)); s != "" && s != "{}" {
		return apierr.Invalid("", "this request takes no body")
	}
	return nil
}

func (a importRoutes) deleteImport(w http.ResponseWriter, req *http.Request) error {
	imp, err := a.importIn(req)
	if err != nil {
		return err
	}
	switch req.URL.Query().Get("action") {
	case "":
		out, err := a.imports.Cancel(req.Context(), imp)
		if err != nil {
			return err
		}
		v := a.importView(out)
		return rest.JSON(w, http.StatusOK, importDeleteResponse{Import: &v})
	case "delete":
		if err := a.imports.Delete(req.Context(), imp); err != nil {
			return err
		}
		yes := true
		return rest.JSON(w, http.StatusOK, importDeleteResponse{Deleted: &yes})
	}
	return apierr.Invalid("action", "action must be delete, or left out to cancel")
}

func (a importRoutes) multipartInit(w http.ResponseWriter, req *http.Request) error {
	imp, err := a.importIn(req)
	if err != nil {
		return err
	}
	var body MultipartInitRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	out, err := a.imports.InitMultipart(req.Context(), imp, body.Objects)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, out)
}

func (a importRoutes) multipartPartURL(w http.ResponseWriter, req *http.Request) error {
	imp, err := a.importIn(req)
	if err != nil {
		return err
	}
	var body PartURLRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	out, err := a.imports.PartURLFor(req.Context(), imp, body.Key, body.PartNumber)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, out)
}

func (a importRoutes) multipartCompleteObject(w http.ResponseWriter, req *http.Request) error {
	imp, err := a.importIn(req)
	if err != nil {
		return err
	}
	var body CompleteObjectRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	out, err := a.imports.CompleteObject(req.Context(), imp, body.Key, body.Parts)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, importResponse{Import: a.importView(out)})
}

func (a importRoutes) multipartFinalize(w http.ResponseWriter, req *http.Request) error {
	imp, err := a.importIn(req)
	if err != nil {
		return err
	}
	var body FinalizeRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	manifest := make([]state.ManifestEntry, 0, len(body.Manifest.Objects))
	for _, o := range body.Manifest.Objects {
		manifest = append(manifest, state.ManifestEntry{Key: o.Key, Kind: o.Kind})
	}
	out, jobID, err := a.imports.Finalize(req.Context(), importCaller(CallerFrom(req.Context())), imp, manifest)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusAccepted, importJobResponse{Import: a.importView(out), JobID: jobID})
}

func (a importRoutes) multipartAbort(w http.ResponseWriter, req *http.Request) error {
	imp, err := a.importIn(req)
	if err != nil {
		return err
	}
	out, err := a.imports.AbortMultipart(req.Context(), imp)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, importResponse{Import: a.importView(out)})
}
