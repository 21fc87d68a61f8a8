package api

import (
	"net/http"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// InstalledPlugin is a plugin or theme installed in a site.
type InstalledPlugin struct {
	Slug    string `json:"slug" doc:"Its directory under wp-content/plugins or wp-content/themes."`
	Name    string `json:"name"`
	Version string `json:"version"`
	Active  bool   `json:"active"`
	Kind    string `json:"kind" enum:"plugin,theme"`
}

type installedPluginsResponse struct {
	Plugins []InstalledPlugin `json:"plugins"`
}

// DeployPluginRequest is the JSON body of POST …/plugins: one source.
type DeployPluginRequest struct {
	LibraryPlugin *string `json:"libraryPlugin,omitempty" doc:"A Library entry's slug or id."`
	ZipURL        *string `json:"zipUrl,omitempty" doc:"An http(s) URL of a ZIP (at most 64 MiB), downloaded by the deploy job, not the request: a failed download fails the job (error.code zip_fetch_failed, or payload_too_large). Private, loopback, link-local and metadata addresses are refused (an address in the URL at once, a resolved one by the job)."`
	Activate      bool    `json:"activate,omitempty"`
}

// maxZipURL bounds a zipUrl, which travels in the replicated job (signed
// download URLs run to a few KiB).
const maxZipURL = 8 << 10

type deployResponse struct {
	JobID string `json:"jobId"`
}

func (a *API) registerPlugins(r *rest.Router) {
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	errs := []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/plugins", Tag: "sites", Params: siteParam,
		Summary: "Plugins and themes installed in the site, with their active state.", Response: installedPluginsResponse{},
		Errors: errs, Handler: a.listPlugins})
	a.bearer(r, g, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/plugins", Tag: "sites", Params: siteParam,
		Status: http.StatusAccepted,
		Summary: "Deploy a plugin or theme: JSON {libraryPlugin} or {zipUrl}, or a multipart file; activate optional. " +
			"Replaces an installed copy of the same directory. Poll the job: a zipUrl is downloaded and checked by the job, " +
			"so a bad download is the job's error (zip_fetch_failed, payload_too_large, invalid_request), not this answer's.",
		Request: DeployPluginRequest{}, Multipart: map[string]string{"file": "file: the ZIP.", "activate": "true or false."},
		Response: deployResponse{}, MaxBody: MaxZipBytes + 1<<20, Idempotent: true,
		Errors: append(errs, CodeLibraryEntryNotFound, apierr.CodePayloadTooLarge), Handler: a.deployPlugin})
}

func (a *API) listPlugins(w http.ResponseWriter, req *http.Request) error {
	s, agent, err := a.readyAgent(req)
	if err != nil {
		return err
	}
	resp, err := agent.ListPlugins(req.Context(), connect.NewRequest(&agentv1.SiteRef{SiteId: s.ID}))
	if err != nil {
		return agentError(err)
	}
	out := installedPluginsResponse{Plugins: []InstalledPlugin{}}
	for _, p := range resp.Msg.Plugins {
		out.Plugins = append(out.Plugins, InstalledPlugin{Slug: p.Slug, Name: p.Name, Version: p.Version, Active: p.Active, Kind: p.Kind})
	}
	return rest.JSON(w, http.StatusOK, out)
}

func (a *API) deployPlugin(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	var p jobspec.DeployPayload
	var zip []byte
	if rest.IsMultipart(req) {
		f, err := rest.ReadForm(req, []string{"file"}, []string{"activate"})
		if err != nil {
			return err
		}
		if f.FileField == "" {
			return apierr.Invalid("file", "the multipart body needs a file part named file holding the ZIP")
		}
		if p.Activate, err = f.FormBool("activate"); err != nil {
			return err
		}
		zip, p.Source = f.File, "upload"
	} else {
		var body DeployPluginRequest
		if err := rest.DecodeJSON(req, &body); err != nil {
			return err
		}
		p.Activate = body.Activate
		switch {
		case (body.LibraryPlugin == nil) == (body.ZipURL == nil):
			return apierr.Invalid("", "give exactly one of libraryPlugin and zipUrl (or a multipart file)")
		case body.LibraryPlugin != nil:
			e, err := a.store.LibraryEntry(s.WorkspaceID, *body.LibraryPlugin)
			if err != nil {
				return err
			}
			if e == nil {
				return apierr.NotFound(CodeLibraryEntryNotFound, "library entry")
			}
			p.BlobSHA256, p.Source = e.BlobSHA256, "library:"+e.Slug
		default:
			// Only checked here; the job downloads it (see DeployPayload).
			if len(*body.ZipURL) > maxZipURL {
				return apierr.Invalid("zipUrl", "the URL is longer than %d bytes", maxZipURL)
			}
			if _, err := a.cfg.Fetch.CheckURL(*body.ZipURL); err != nil {
				return apierr.Invalid("zipUrl", "%v", err)
			}
			p.ZipURL, p.Source = *body.ZipURL, "url"
		}
	}
	if s.Status != state.SiteReady {
		return notReady(s)
	}
	if zip != nil {
		if _, err := inspectZip("file", zip); err != nil {
			return err
		}
		if p.BlobSHA256, err = a.storeZip(req.Context(), zip); err != nil {
			return err
		}
	}
	job, err := jobs.New(jobspec.DeployPlugin, s.WorkspaceID, s.ID, p, a.now())
	if err != nil {
		return err
	}
	return a.commit(w, req, fsm.CreateJob{Job: job}, nil, http.StatusAccepted, deployResponse{JobID: job.ID})
}
