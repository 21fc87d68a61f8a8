package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/blobs"
	"github.com/sandboxd/sandboxd/controlplane/libraryspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Library is what the Library routes need from the library service.
type Library interface {
	Upload(ctx context.Context, ans *writes.Answer[state.LibraryEntry], ws *state.Workspace, filename string, zip []byte, licenseKey *string) (*state.LibraryEntry, error)
	AddRelease(ctx context.Context, ans *writes.Answer[state.LibraryEntry], ws *state.Workspace, repository string, licenseKey *string) (*state.LibraryEntry, error)
	Refresh(ctx context.Context, e *state.LibraryEntry) (*state.LibraryEntry, bool, error)
	Delete(ctx context.Context, e *state.LibraryEntry) error
	SetLicense(ctx context.Context, e *state.LibraryEntry, key string) (*state.LibraryEntry, error)
	ClearLicense(ctx context.Context, e *state.LibraryEntry) (*state.LibraryEntry, error)
	ReadLicense(ctx context.Context, e *state.LibraryEntry, by string) (string, error)
}

// PeerBlobs is what the peer blob routes need: ZIPs by SHA-256.
type PeerBlobs interface {
	OpenBlob(ctx context.Context, sha string) (io.ReadCloser, int64, error)
	PutPeerBlob(ctx context.Context, sha string, data []byte) error
}

// LibraryEntry is the contract's PluginLibraryEntry.
type LibraryEntry struct {
	ID                   string     `json:"id"`
	Slug                 string     `json:"slug"`
	Name                 string     `json:"name"`
	Source               string     `json:"source" enum:"@librarySource"`
	Kind                 string     `json:"kind" enum:"@pluginKind" doc:"Read from the ZIP's WordPress header."`
	GithubRepository     *string    `json:"githubRepository"`
	Filename             string     `json:"filename"`
	SizeBytes            int64      `json:"sizeBytes"`
	Version              *string    `json:"version"`
	HasLicenseKey        bool       `json:"hasLicenseKey"`
	LicenseKeyHint       *string    `json:"licenseKeyHint"`
	LicenseKeyLastReadAt *time.Time `json:"licenseKeyLastReadAt"`
	UpdatedAt            time.Time  `json:"updatedAt"`
}

type libraryEntryResponse struct {
	Plugin LibraryEntry `json:"plugin"`
}

type libraryListResponse struct {
	Plugins []LibraryEntry `json:"plugins"`
}

type libraryRefreshResponse struct {
	Plugin  LibraryEntry `json:"plugin"`
	Updated bool         `json:"updated" doc:"Whether a newer release replaced the held ZIP."`
}

// GitHubEntryRequest is the body of POST /api/app/plugin-library/github.
type GitHubEntryRequest struct {
	Repository string  `json:"repository" doc:"owner/name, or a https://github.com/owner/name URL."`
	LicenseKey *string `json:"licenseKey,omitempty"`
}

// LicenseKeyRequest is the body of PUT …/license-key.
type LicenseKeyRequest struct {
	LicenseKey string `json:"licenseKey"`
}

func libraryView(e *state.LibraryEntry) LibraryEntry {
	v := LibraryEntry{ID: e.ID, Slug: e.Slug, Name: e.Name, Source: e.Source, Kind: e.Kind, Filename: e.Filename,
		SizeBytes: e.SizeBytes, HasLicenseKey: e.LicenseSealed != nil, LicenseKeyLastReadAt: e.LicenseLastReadAt, UpdatedAt: e.UpdatedAt}
	if e.GithubRepository != "" {
		v.GithubRepository = &e.GithubRepository
	}
	if e.Version != "" {
		v.Version = &e.Version
	}
	if e.LicenseSealed != nil {
		h := e.LicenseHint
		v.LicenseKeyHint = &h
	}
	return v
}

var libParam = map[string]string{"id": "library"}

// libraryRoutes are the workspace Library and the blobs peers copy.
type libraryRoutes struct {
	*base
	library   Library
	peerBlobs PeerBlobs
}

func (a libraryRoutes) registerLibrary(r *rest.Router) {
	read := guard{scope: scopeWorkspace}
	write := guard{scope: scopeWorkspace, capability: access.Reusables}
	nf := []string{libraryspec.CodeEntryNotFound}
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/plugin-library", Tag: "library",
		Summary: "List the workspace's Library.", Response: libraryListResponse{}, Handler: a.listLibrary})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/plugin-library", Tag: "library", Status: http.StatusCreated,
		Summary:   "Upload a plugin or theme ZIP (up to 64 MiB). kind, name and slug come from its WordPress header.",
		Multipart: map[string]string{"file": "file: the ZIP.", "licenseKey": "Optional license key; stored sealed."},
		Response:  libraryEntryResponse{}, MaxBody: libraryspec.MaxZipBytes + 1<<20, Idempotent: true,
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodePayloadTooLarge, apierr.CodeConflict, apierr.CodePlanLimitReached}, Handler: a.uploadLibrary})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/plugin-library/github", Tag: "library", Status: http.StatusCreated,
		Summary: "Add a repository entry: the latest release's ZIP asset is fetched and its tag kept as version.",
		Request: GitHubEntryRequest{}, Response: libraryEntryResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodeConflict, apierr.CodePlanLimitReached}, Handler: a.addGitHubLibrary})
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/plugin-library/{id}", Tag: "library", Params: libParam,
		Summary: "One entry, by id or slug.", Response: libraryEntryResponse{}, Errors: nf, Handler: a.getLibrary})
	a.bearer(r, write, rest.Route{Method: "DELETE", Path: "/api/app/plugin-library/{id}", Tag: "library", Params: libParam,
		Summary: "Delete an entry and its ZIP.", Response: deletedResponse{}, Errors: nf, Handler: a.deleteLibrary})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/plugin-library/{id}/refresh", Tag: "library", Params: libParam,
		Summary:  "Fetch the repository's latest release; replaces the ZIP when its tag changed.",
		Response: libraryRefreshResponse{}, Errors: append(nf, apierr.CodeInvalidRequest), Handler: a.refreshLibrary})
	a.bearer(r, write, rest.Route{Method: "PUT", Path: "/api/app/plugin-library/{id}/license-key", Tag: "library", Params: libParam,
		Summary: "Set the entry's license key (stored sealed; only its hint is ever shown).",
		Request: LicenseKeyRequest{}, Response: libraryEntryResponse{}, Errors: append(nf, apierr.CodeInvalidRequest),
		Handler: a.putLicense})
	a.bearer(r, write, rest.Route{Method: "DELETE", Path: "/api/app/plugin-library/{id}/license-key", Tag: "library", Params: libParam,
		Summary: "Remove the entry's license key.", Response: libraryEntryResponse{}, Errors: nf, Handler: a.deleteLicense})
}

func (a *base) entryIn(req *http.Request) (*state.LibraryEntry, error) {
	c := CallerFrom(req.Context())
	e, err := a.store.LibraryEntry(c.Workspace.ID, req.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, apierr.NotFound(libraryspec.CodeEntryNotFound, "library entry")
	}
	return e, nil
}

func (a libraryRoutes) listLibrary(w http.ResponseWriter, req *http.Request) error {
	es, err := a.store.LibraryOf(CallerFrom(req.Context()).Workspace.ID)
	if err != nil {
		return err
	}
	out := libraryListResponse{Plugins: []LibraryEntry{}}
	for _, e := range es {
		out.Plugins = append(out.Plugins, libraryView(e))
	}
	return rest.JSON(w, http.StatusOK, out)
}

func (a libraryRoutes) getLibrary(w http.ResponseWriter, req *http.Request) error {
	e, err := a.entryIn(req)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, libraryEntryResponse{Plugin: libraryView(e)})
}

// entryAnswer renders the entry a create applied.
func entryAnswer(e state.LibraryEntry) any { return libraryEntryResponse{Plugin: libraryView(&e)} }

func (a libraryRoutes) uploadLibrary(w http.ResponseWriter, req *http.Request) error {
	f, err := rest.ReadForm(req, []string{"file"}, []string{"licenseKey"})
	if err != nil {
		return err
	}
	if f.FileField == "" {
		return apierr.Invalid("file", "the multipart body needs a file part named file holding the ZIP")
	}
	var key *string
	if k, ok := f.Field["licenseKey"]; ok {
		key = &k
	}
	ws := CallerFrom(req.Context()).Workspace
	ans := answer(a.base, req, http.StatusCreated, entryAnswer)
	_, err = a.library.Upload(req.Context(), ans, ws, f.Filename, f.File, key)
	return respond(a.base, w, req, ans, err)
}

func (a libraryRoutes) addGitHubLibrary(w http.ResponseWriter, req *http.Request) error {
	var body GitHubEntryRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ws := CallerFrom(req.Context()).Workspace
	ans := answer(a.base, req, http.StatusCreated, entryAnswer)
	_, err := a.library.AddRelease(req.Context(), ans, ws, body.Repository, body.LicenseKey)
	return respond(a.base, w, req, ans, err)
}

func (a libraryRoutes) refreshLibrary(w http.ResponseWriter, req *http.Request) error {
	e, err := a.entryIn(req)
	if err != nil {
		return err
	}
	next, updated, err := a.library.Refresh(req.Context(), e)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, libraryRefreshResponse{Plugin: libraryView(next), Updated: updated})
}

func (a libraryRoutes) deleteLibrary(w http.ResponseWriter, req *http.Request) error {
	e, err := a.entryIn(req)
	if err != nil {
		return err
	}
	if err := a.library.Delete(req.Context(), e); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
}

func (a libraryRoutes) putLicense(w http.ResponseWriter, req *http.Request) error {
	var body LicenseKeyRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	e, err := a.entryIn(req)
	if err != nil {
		return err
	}
	next, err := a.library.SetLicense(req.Context(), e, body.LicenseKey)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, libraryEntryResponse{Plugin: libraryView(next)})
}

func (a libraryRoutes) deleteLicense(w http.ResponseWriter, req *http.Request) error {
	e, err := a.entryIn(req)
	if err != nil {
		return err
	}
	next, err := a.library.ClearLicense(req.Context(), e)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, libraryEntryResponse{Plugin: libraryView(next)})
}

func (a libraryRoutes) registerBlobs(r *rest.Router) {
	a.internal(r, rest.Route{Method: "GET", Path: "/internal/blobs/{sha}", Params: map[string]string{"sha": "blob"},
		Summary: "A stored blob (a Library ZIP, a template artifact) by its SHA-256, for peer servers replicating it (application/octet-stream).",
		Errors:  []string{apierr.CodeNotFound}, Handler: a.getBlob})
	a.internal(r, rest.Route{Method: "PUT", Path: "/internal/blobs/{sha}", Params: map[string]string{"sha": "blob"},
		Summary: "Store a ZIP a peer is about to name in the replicated state (application/octet-stream body; must hash to {sha}).",
		Errors:  []string{apierr.CodeInvalidRequest, apierr.CodePayloadTooLarge}, MaxBody: blobs.MaxBlob, Handler: a.putBlob})
}

func (a libraryRoutes) putBlob(w http.ResponseWriter, req *http.Request) error {
	data, err := io.ReadAll(req.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return apierr.New(http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge, "blob over %d bytes", mb.Limit)
		}
		return apierr.Invalid("", "reading the blob: %v", err)
	}
	if err := a.peerBlobs.PutPeerBlob(req.Context(), req.PathValue("sha"), data); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, okResponse{OK: true})
}

func (a libraryRoutes) getBlob(w http.ResponseWriter, req *http.Request) error {
	f, size, err := a.peerBlobs.OpenBlob(req.Context(), req.PathValue("sha"))
	if err != nil {
		return apierr.New(http.StatusNotFound, apierr.CodeNotFound, "blob not held here")
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	_, err = io.CopyN(w, f, size)
	return err
}
