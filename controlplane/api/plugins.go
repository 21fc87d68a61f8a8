package api

import (
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/libraryspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

type installedPluginsResponse struct {
	Plugins []sitespec.InstalledPlugin `json:"plugins"`
}

// DeployPluginRequest is the JSON body of POST …/plugins: one source.
type DeployPluginRequest struct {
	LibraryPlugin *string `json:"libraryPlugin,omitempty" doc:"A Library entry's slug or id."`
	ZipURL        *string `json:"zipUrl,omitempty" doc:"An http(s) URL of a ZIP (at most 64 MiB), downloaded by the deploy job, not the request: a failed download fails the job (error.code zip_fetch_failed, or payload_too_large). Private, loopback, link-local and metadata addresses are refused (an address in the URL at once, a resolved one by the job)."`
	Activate      bool    `json:"activate,omitempty"`
}

type deployResponse struct {
	JobID string `json:"jobId"`
}

// pluginRoutes are a site's plugins and their deploys.
type pluginRoutes struct {
	*base
	sites SiteChanges
	tools SiteTools
}

func (a pluginRoutes) register(r *rest.Router) {
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
		Response: deployResponse{}, MaxBody: libraryspec.MaxZipBytes + 1<<20, Idempotent: true,
		Errors: append(errs, libraryspec.CodeEntryNotFound, apierr.CodePayloadTooLarge), Handler: a.deployPlugin})
}

func (a pluginRoutes) listPlugins(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	ps, err := a.tools.Plugins(req.Context(), s)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, installedPluginsResponse{Plugins: ps})
}

func (a pluginRoutes) deployPlugin(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	var d sitespec.Deploy
	if rest.IsMultipart(req) {
		f, err := rest.ReadForm(req, []string{"file"}, []string{"activate"})
		if err != nil {
			return err
		}
		if f.FileField == "" {
			return apierr.Invalid("file", "the multipart body needs a file part named file holding the ZIP")
		}
		if d.Activate, err = f.FormBool("activate"); err != nil {
			return err
		}
		d.Upload = f.File
		if d.Upload == nil {
			d.Upload = []byte{}
		}
	} else {
		var body DeployPluginRequest
		if err := rest.DecodeJSON(req, &body); err != nil {
			return err
		}
		d.LibraryPlugin, d.ZipURL, d.Activate = body.LibraryPlugin, body.ZipURL, body.Activate
	}
	ans := answer(a.base, req, http.StatusAccepted, func(m sitespec.Made) any { return deployResponse{JobID: m.JobID} })
	_, err = a.sites.Deploy(req.Context(), ans, s, d)
	return respond(a.base, w, req, ans, err)
}
