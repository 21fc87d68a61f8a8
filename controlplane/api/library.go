package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/blobs"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitejobs"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/seal"
	"github.com/sandboxd/sandboxd/internal/wpzip"
)

// CodeLibraryEntryNotFound is the contract's code for an unknown entry.
const CodeLibraryEntryNotFound = "plugin_library_entry_not_found"

// Library limits.
const (
	// MaxZipBytes bounds a plugin or theme ZIP (upload, release or URL).
	MaxZipBytes = wpzip.MaxZipBytes
	// MaxLicenseKey bounds a license key.
	MaxLicenseKey = 1024
)

// LibraryEntry is the contract's PluginLibraryEntry.
type LibraryEntry struct {
	ID                   string     `json:"id"`
	Slug                 string     `json:"slug"`
	Name                 string     `json:"name"`
	Source               string     `json:"source" enum:"upload,github_release"`
	Kind                 string     `json:"kind" enum:"plugin,theme" doc:"Read from the ZIP's WordPress header."`
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

func (a *API) registerLibrary(r *rest.Router) {
	read := guard{scope: scopeWorkspace}
	write := guard{scope: scopeWorkspace, capability: access.Reusables}
	nf := []string{CodeLibraryEntryNotFound}
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/plugin-library", Tag: "library",
		Summary: "List the workspace's Library.", Response: libraryListResponse{}, Handler: a.listLibrary})
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/plugin-library", Tag: "library", Status: http.StatusCreated,
		Summary:   "Upload a plugin or theme ZIP (up to 64 MiB). kind, name and slug come from its WordPress header.",
		Multipart: map[string]string{"file": "file: the ZIP.", "licenseKey": "Optional license key; stored sealed."},
		Response:  libraryEntryResponse{}, MaxBody: MaxZipBytes + 1<<20, Idempotent: true,
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

func (a *API) entryIn(req *http.Request) (*state.LibraryEntry, error) {
	c := CallerFrom(req.Context())
	e, err := a.store.LibraryEntry(c.Workspace.ID, req.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, apierr.NotFound(CodeLibraryEntryNotFound, "library entry")
	}
	return e, nil
}

func (a *API) listLibrary(w http.ResponseWriter, req *http.Request) error {
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

func (a *API) getLibrary(w http.ResponseWriter, req *http.Request) error {
	e, err := a.entryIn(req)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, libraryEntryResponse{Plugin: libraryView(e)})
}

func checkLicense(field, key string) error {
	switch {
	case strings.TrimSpace(key) == "":
		return apierr.Invalid(field, "%s must not be empty", field)
	case len(key) > MaxLicenseKey:
		return apierr.Invalid(field, "%s is over %d bytes", field, MaxLicenseKey)
	case strings.ContainsAny(key, "\r\n\x00"):
		return apierr.Invalid(field, "%s must be one line", field)
	}
	return nil
}

// inspectZip checks a ZIP the way every path into a site does.
func inspectZip(field string, data []byte) (*wpzip.Info, error) {
	if len(data) == 0 {
		return nil, apierr.Invalid(field, "the ZIP is empty")
	}
	info, err := wpzip.Inspect(data, wpzip.DefaultLimits)
	if err != nil {
		return nil, apierr.Invalid(field, "%s", strings.TrimPrefix(err.Error(), wpzip.ErrInvalid.Error()+": "))
	}
	return info, nil
}

var libSlugRE = regexp.MustCompile(`[^a-z0-9]+`)

// librarySlug derives a slug from the entry's name (or its directory).
func librarySlug(name, dir string) string {
	s := strings.Trim(libSlugRE.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if s == "" {
		s = strings.Trim(libSlugRE.ReplaceAllString(strings.ToLower(dir), "-"), "-")
	}
	if len(s) > 60 {
		s = strings.Trim(s[:60], "-")
	}
	if s == "" {
		s = "plugin" // ids hold an underscore, slugs never do: the two cannot clash
	}
	return s
}

// createEntry stores the ZIP, adds the entry under the first free slug
// and answers 201 with it.
func (a *API) createEntry(w http.ResponseWriter, req *http.Request, e state.LibraryEntry, zip []byte, info *wpzip.Info, licenseKey *string) error {
	ctx := req.Context()
	sha, err := a.storeZip(ctx, zip)
	if err != nil {
		return err
	}
	now := a.now()
	e.ID = ids.New("lib")
	e.Kind, e.Name, e.SizeBytes, e.BlobSHA256, e.CreatedAt, e.UpdatedAt = info.Kind, info.Name, int64(len(zip)), sha, now, now
	if licenseKey != nil {
		e.LicenseSealed, e.LicenseHint = a.cfg.Sealer.Seal(*licenseKey, e.ID), seal.Hint(*licenseKey)
	}
	plan, err := a.ownerPlan(CallerFrom(ctx).Workspace)
	if err != nil {
		a.dropBlob(sha)
		return err
	}
	quota, err := a.cfg.Plans.Quota(plan, plans.LibraryEntries)
	if err != nil {
		a.dropBlob(sha)
		return err
	}
	base := librarySlug(info.Name, info.Dir)
	for i := 1; i <= 50; i++ {
		e.Slug = base
		if i > 1 {
			e.Slug = fmt.Sprintf("%s-%d", base, i)
		}
		if dup, err := a.store.LibraryEntry(e.WorkspaceID, e.Slug); err != nil {
			return err
		} else if dup != nil {
			continue
		}
		applied, err := a.commitOnce(w, req, fsm.PutLibraryEntry{Entry: e, Quota: quota}, nil,
			http.StatusCreated, libraryEntryResponse{Plugin: libraryView(&e)})
		var ae *apierr.Error
		if errors.As(err, &ae) && ae.Code == apierr.CodeConflict {
			continue // another upload took the slug meanwhile
		}
		if err != nil || !applied {
			a.dropBlob(sha) // kept only if an entry (a replayed twin's) names it
		}
		return err
	}
	a.dropBlob(sha)
	return apierr.Conflict("no free slug for %q in this workspace", base)
}

func (a *API) uploadLibrary(w http.ResponseWriter, req *http.Request) error {
	f, err := rest.ReadForm(req, []string{"file"}, []string{"licenseKey"})
	if err != nil {
		return err
	}
	if f.FileField == "" {
		return apierr.Invalid("file", "the multipart body needs a file part named file holding the ZIP")
	}
	var key *string
	if k, ok := f.Field["licenseKey"]; ok {
		if err := checkLicense("licenseKey", k); err != nil {
			return err
		}
		key = &k
	}
	info, err := inspectZip("file", f.File)
	if err != nil {
		return err
	}
	filename := path.Base(strings.ReplaceAll(f.Filename, `\`, "/"))
	if filename == "." || filename == "/" || filename == "" {
		filename = info.Dir + ".zip"
	}
	return a.createEntry(w, req, state.LibraryEntry{WorkspaceID: CallerFrom(req.Context()).Workspace.ID,
		Source: "upload", Filename: filename}, f.File, info, key)
}

var repoRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$`)

// parseRepository accepts owner/name or a https://github.com/owner/name URL.
func parseRepository(s string) (string, error) {
	s = strings.TrimSpace(s)
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		if u.Scheme != "https" || !strings.EqualFold(u.Host, "github.com") {
			return "", errors.New("repository must be owner/name or https://github.com/owner/name")
		}
		s = strings.Trim(u.Path, "/")
		s = strings.TrimSuffix(s, ".git")
	}
	if !repoRE.MatchString(s) || strings.Contains(s, "..") {
		return "", errors.New("repository must be owner/name")
	}
	return s, nil
}

func (a *API) addGitHubLibrary(w http.ResponseWriter, req *http.Request) error {
	var body GitHubEntryRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	repo, err := parseRepository(body.Repository)
	if err != nil {
		return apierr.Invalid("repository", "%v", err)
	}
	if body.LicenseKey != nil {
		if err := checkLicense("licenseKey", *body.LicenseKey); err != nil {
			return err
		}
	}
	rel, zip, err := a.latestRelease(req.Context(), repo)
	if err != nil {
		return err
	}
	info, err := inspectZip("repository", zip)
	if err != nil {
		return err
	}
	return a.createEntry(w, req, state.LibraryEntry{WorkspaceID: CallerFrom(req.Context()).Workspace.ID,
		Source: "github_release", GithubRepository: repo, Filename: rel.asset, Version: rel.tag}, zip, info, body.LicenseKey)
}

func (a *API) refreshLibrary(w http.ResponseWriter, req *http.Request) error {
	e, err := a.entryIn(req)
	if err != nil {
		return err
	}
	if e.Source != "github_release" {
		return apierr.Invalid("", "only repository entries can be refreshed; upload a new ZIP instead")
	}
	rel, zip, err := a.latestRelease(req.Context(), e.GithubRepository)
	if err != nil {
		return err
	}
	if rel.tag == e.Version {
		return rest.JSON(w, http.StatusOK, libraryRefreshResponse{Plugin: libraryView(e), Updated: false})
	}
	info, err := inspectZip("repository", zip)
	if err != nil {
		return err
	}
	sha, err := a.storeZip(req.Context(), zip)
	if err != nil {
		return err
	}
	next := *e
	oldBlob := e.BlobSHA256
	next.Version, next.Filename, next.SizeBytes, next.BlobSHA256, next.Kind, next.Name, next.UpdatedAt =
		rel.tag, rel.asset, int64(len(zip)), sha, info.Kind, info.Name, a.now()
	if _, err := a.apply(req.Context(), fsm.PutLibraryEntry{Entry: next, Replace: true},
		apierr.NotFound(CodeLibraryEntryNotFound, "library entry")); err != nil {
		return err
	}
	a.dropBlob(oldBlob)
	return rest.JSON(w, http.StatusOK, libraryRefreshResponse{Plugin: libraryView(&next), Updated: true})
}

// dropBlob deletes a ZIP that no entry and no unfinished deploy needs.
func (a *API) dropBlob(sha string) {
	if !sitejobs.BlobInUse(a.store, sha, "") {
		if err := a.cfg.Blobs.Delete(sha); err != nil {
			a.log.Warn("drop library zip", "sha256", sha, "err", err)
		}
	}
}

func (a *API) deleteLibrary(w http.ResponseWriter, req *http.Request) error {
	e, err := a.entryIn(req)
	if err != nil {
		return err
	}
	if _, err := a.apply(req.Context(), fsm.DeleteLibraryEntry{ID: e.ID}, nil); err != nil {
		return err
	}
	a.dropBlob(e.BlobSHA256)
	return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
}

func (a *API) putLicense(w http.ResponseWriter, req *http.Request) error {
	var body LicenseKeyRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	if err := checkLicense("licenseKey", body.LicenseKey); err != nil {
		return err
	}
	e, err := a.entryIn(req)
	if err != nil {
		return err
	}
	res, err := a.apply(req.Context(), fsm.SetLibraryLicense{ID: e.ID, Sealed: a.cfg.Sealer.Seal(body.LicenseKey, e.ID),
		Hint: seal.Hint(body.LicenseKey), At: a.now()}, apierr.NotFound(CodeLibraryEntryNotFound, "library entry"))
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, libraryEntryResponse{Plugin: libraryView(res.(*state.LibraryEntry))})
}

func (a *API) deleteLicense(w http.ResponseWriter, req *http.Request) error {
	e, err := a.entryIn(req)
	if err != nil {
		return err
	}
	res, err := a.apply(req.Context(), fsm.SetLibraryLicense{ID: e.ID, At: a.now()}, apierr.NotFound(CodeLibraryEntryNotFound, "library entry"))
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, libraryEntryResponse{Plugin: libraryView(res.(*state.LibraryEntry))})
}

// release is the part of a code host's latest release the Library uses.
type release struct {
	tag, asset string
}

// latestRelease asks the code host's releases API for the repository's
// latest release and downloads its first .zip asset.
func (a *API) latestRelease(ctx context.Context, repo string) (*release, []byte, error) {
	base := strings.TrimRight(a.cfg.GitHubAPI, "/")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/repos/"+repo+"/releases/latest", nil)
	if err != nil {
		return nil, nil, err
	}
	hreq.Header.Set("Accept", "application/vnd.github+json")
	hreq.Header.Set("User-Agent", "sandboxd")
	resp, err := a.cfg.GitHubHTTP.Do(hreq)
	if err != nil {
		return nil, nil, apierr.Unavailable("the code host did not answer: %v", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, nil, apierr.Invalid("repository", "%s has no published release (or does not exist)", repo)
	case resp.StatusCode != http.StatusOK:
		return nil, nil, apierr.Unavailable("the code host answered %s", resp.Status)
	}
	var body struct {
		TagName string `json:"tag_name"`
		Assets  []struct {
			Name string `json:"name"`
			URL  string `json:"browser_download_url"`
			Size int64  `json:"size"`
		} `json:"assets"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 4<<20)).Decode(&body); err != nil {
		return nil, nil, apierr.Unavailable("the code host's release answer is unreadable: %v", err)
	}
	for _, as := range body.Assets {
		if !strings.HasSuffix(strings.ToLower(as.Name), ".zip") {
			continue
		}
		if as.Size > MaxZipBytes {
			return nil, nil, apierr.Invalid("repository", "the release asset %s is %d bytes; the limit is %d", as.Name, as.Size, MaxZipBytes)
		}
		zip, err := a.cfg.Fetch.Get(ctx, as.URL, MaxZipBytes, nil)
		if err != nil {
			return nil, nil, apierr.Invalid("repository", "downloading %s: %v", as.Name, err)
		}
		return &release{tag: body.TagName, asset: path.Base(as.Name)}, zip, nil
	}
	return nil, nil, apierr.Invalid("repository", "the latest release of %s (%s) has no .zip asset", repo, body.TagName)
}

func (a *API) registerBlobs(r *rest.Router) {
	a.operator(r, rest.Route{Method: "GET", Path: "/internal/blobs/{sha}", Params: map[string]string{"sha": "blob"},
		Summary: "A stored ZIP by its SHA-256, for peer servers replicating the Library (application/octet-stream).",
		Errors:  []string{apierr.CodeNotFound}, Handler: a.getBlob})
	a.operator(r, rest.Route{Method: "PUT", Path: "/internal/blobs/{sha}", Params: map[string]string{"sha": "blob"},
		Summary: "Store a ZIP a peer is about to name in the replicated state (application/octet-stream body; must hash to {sha}).",
		Errors:  []string{apierr.CodeInvalidRequest, apierr.CodePayloadTooLarge}, MaxBody: blobs.MaxBlob, Handler: a.putBlob})
}

func (a *API) putBlob(w http.ResponseWriter, req *http.Request) error {
	data, err := io.ReadAll(req.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return apierr.New(http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge, "blob over %d bytes", mb.Limit)
		}
		return apierr.Invalid("", "reading the blob: %v", err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != req.PathValue("sha") {
		return apierr.Invalid("sha", "the body does not hash to the path's SHA-256")
	}
	if _, err := a.cfg.Blobs.Put(data); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, okResponse{OK: true})
}

// storeZip keeps a ZIP on this server and on a peer before anything names
// it in the replicated state.
func (a *API) storeZip(ctx context.Context, zip []byte) (string, error) {
	sha, err := a.cfg.Blobs.Put(zip)
	if err != nil {
		return "", fmt.Errorf("store zip: %w", err)
	}
	if a.cfg.ReplicateBlob != nil {
		if err := a.cfg.ReplicateBlob(ctx, sha, zip); err != nil {
			a.log.Warn("zip not replicated", "sha256", sha, "err", err)
			return "", apierr.Unavailable("the ZIP could not be copied to another server; retry")
		}
	}
	return sha, nil
}

func (a *API) getBlob(w http.ResponseWriter, req *http.Request) error {
	data, err := a.cfg.Blobs.Get(req.PathValue("sha"))
	if err != nil {
		return apierr.New(http.StatusNotFound, apierr.CodeNotFound, "blob not held here")
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(data)
	return err
}
