package api

import (
	"context"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/templatespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Templates is what the template routes need from the templates service.
type Templates interface {
	Create(ctx context.Context, in templatespec.Create) (*state.Template, string, error)
	Update(ctx context.Context, t *state.Template, p templatespec.Patch) (*state.Template, error)
	Delete(ctx context.Context, t *state.Template) error
}

// TemplateView is the contract's Template record.
type TemplateView struct {
	ID                          string               `json:"id"`
	UserID                      string               `json:"userId"`
	OrgID                       string               `json:"orgId"`
	CreatedByUserID             string               `json:"createdByUserId"`
	Name                        string               `json:"name"`
	Slug                        string               `json:"slug"`
	Description                 string               `json:"description"`
	SourceSiteID                string               `json:"sourceSiteId"`
	ArtifactID                  *string              `json:"artifactId" doc:"The blob holding the template's files and database; null until it is written."`
	Status                      string               `json:"status" enum:"@templateStatus"`
	FailureReason               *string              `json:"failureReason"`
	WordPressVersion            string               `json:"wordpressVersion"`
	PHPVersion                  string               `json:"phpVersion"`
	SizeBytes                   int64                `json:"sizeBytes"`
	WarmPoolSize                int                  `json:"warmPoolSize"`
	LaunchEnabled               bool                 `json:"launchEnabled"`
	LaunchToken                 *string              `json:"launchToken" doc:"Made when launch is first enabled; null before."`
	LaunchCount                 int                  `json:"launchCount"`
	LaunchQuotaMode             string               `json:"launchQuotaMode" enum:"@launchQuotaMode"`
	LaunchEntryMode             string               `json:"launchEntryMode" enum:"@launchEntryMode"`
	LaunchExpirationMode        string               `json:"launchExpirationMode" enum:"@launchExpirationMode"`
	LaunchExpirationMinutes     int                  `json:"launchExpirationMinutes"`
	LaunchLandingPath           string               `json:"launchLandingPath"`
	LaunchBranding              state.LaunchBranding `json:"launchBranding"`
	LaunchProtected             bool                 `json:"launchProtected"`
	LaunchConsentEnabled        bool                 `json:"launchConsentEnabled"`
	LaunchConsentLabel          string               `json:"launchConsentLabel"`
	LaunchConsentDefaultChecked bool                 `json:"launchConsentDefaultChecked"`
	SourceBlueprintID           *string              `json:"sourceBlueprintId"`
	SourceBlueprintRevision     *int                 `json:"sourceBlueprintRevision"`
	CreatedAt                   time.Time            `json:"createdAt"`
	UpdatedAt                   time.Time            `json:"updatedAt"`
}

func templateView(t *state.Template) TemplateView {
	l := t.Launch
	v := TemplateView{ID: t.ID, UserID: t.UserID, OrgID: t.WorkspaceID, CreatedByUserID: t.CreatedByUserID, Name: t.Name,
		Slug: t.Slug, Description: t.Description, SourceSiteID: t.SourceSiteID, ArtifactID: optional(t.ArtifactSHA256),
		Status: t.Status, FailureReason: optional(t.FailureReason), WordPressVersion: t.WordPressVersion, PHPVersion: t.PHPVersion,
		SizeBytes: t.SizeBytes, WarmPoolSize: t.WarmPoolSize, LaunchEnabled: l.Enabled, LaunchToken: optional(l.Token),
		LaunchCount: l.Count, LaunchQuotaMode: l.QuotaMode, LaunchEntryMode: l.EntryMode, LaunchExpirationMode: l.ExpirationMode,
		LaunchExpirationMinutes: l.ExpirationMinutes, LaunchLandingPath: l.LandingPath, LaunchBranding: l.Branding,
		LaunchProtected: l.Protected, LaunchConsentEnabled: l.ConsentEnabled, LaunchConsentLabel: l.ConsentLabel,
		LaunchConsentDefaultChecked: l.ConsentDefaultChecked, SourceBlueprintID: optional(t.SourceBlueprintID),
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt}
	if t.SourceBlueprintID != "" {
		rev := t.SourceBlueprintRevision
		v.SourceBlueprintRevision = &rev
	}
	return v
}

type templateResponse struct {
	Template TemplateView `json:"template"`
}

type templatesResponse struct {
	Templates []TemplateView `json:"templates"`
}

type templateJobResponse struct {
	Template TemplateView `json:"template"`
	JobID    string       `json:"jobId"`
}

// CreateTemplateRequest is the body of POST /api/app/templates.
type CreateTemplateRequest struct {
	SiteID      string `json:"siteId" doc:"A ready site of the workspace; it is stopped for a moment while its files and database are copied."`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// TemplateSiteRequest is the body of POST /api/app/templates/{id}/sites.
type TemplateSiteRequest struct {
	Name             string `json:"name,omitempty" doc:"Default: the template's name."`
	ExpiresInMinutes *int   `json:"expiresInMinutes,omitempty" doc:"1..43200; the site is deleted when it expires."`
}

// RestoreSiteRequest is the body of POST /api/app/sites/{id}/restore.
type RestoreSiteRequest struct {
	TemplateID string `json:"templateId"`
}

var templateParam = map[string]string{"id": "template"}

// templateRoutes are templates and the sites made from them.
type templateRoutes struct {
	*base
	sites     SiteChanges
	templates Templates
}

func (a templateRoutes) register(r *rest.Router) {
	read := guard{scope: scopeWorkspace}
	write := guard{scope: scopeWorkspace, capability: access.Reusables}
	create := guard{scope: scopeWorkspace, capability: access.Create}
	// Leads are people's email addresses: members who manage the
	// workspace's outside connections see them.
	leads := guard{scope: scopeWorkspace, capability: access.Integrations}
	nf := []string{apierr.CodeTemplateNotFound}
	a.bearer(r, write, rest.Route{Method: "POST", Path: "/api/app/templates", Tag: "templates", Status: http.StatusAccepted,
		Summary: "Make a template from a ready site: its files and database, frozen. Poll the job or the template until it is ready.",
		Request: CreateTemplateRequest{}, Response: templateJobResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, apierr.CodePlanLimitReached}, Handler: a.createTemplate})
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/templates", Tag: "templates", Summary: "List the workspace's templates.",
		Response: templatesResponse{}, Handler: a.listTemplates})
	a.bearer(r, read, rest.Route{Method: "GET", Path: "/api/app/templates/{id}", Tag: "templates", Summary: "One template.",
		Params: templateParam, Response: templateResponse{}, Errors: nf, Handler: func(w http.ResponseWriter, req *http.Request) error {
			t, err := a.templateIn(req)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, templateResponse{Template: templateView(t)})
		}})
	a.bearer(r, write, rest.Route{Method: "PATCH", Path: "/api/app/templates/{id}", Tag: "templates",
		Summary: "Change a template's name, description, warm pool or launch settings.", Params: templateParam,
		Request: templatespec.Patch{}, Response: templateResponse{},
		Errors:  append(nf, apierr.CodeInvalidRequest, apierr.CodeTemplateSharingRequiresPaidPlan, apierr.CodePlanLimitReached),
		Handler: a.patchTemplate})
	a.bearer(r, write, rest.Route{Method: "DELETE", Path: "/api/app/templates/{id}", Tag: "templates",
		Summary: "Delete a template; sites made from it keep working.", Params: templateParam, Response: deletedResponse{},
		Errors: nf, Handler: a.deleteTemplate})
	a.bearer(r, create, rest.Route{Method: "POST", Path: "/api/app/templates/{id}/sites", Tag: "templates", Status: http.StatusAccepted,
		Summary: "Make a site from a ready template: its files and database, at the new site's URL.", Params: templateParam,
		Request: TemplateSiteRequest{}, Response: siteJobResponse{}, Idempotent: true,
		Errors: append(nf, apierr.CodeInvalidRequest, apierr.CodePlanLimitReached), Handler: a.siteFromTemplate})
	a.bearer(r, leads, rest.Route{Method: "GET", Path: "/api/app/templates/{id}/leads", Tag: "templates",
		Summary: "The leads the template's public launcher captured (entry mode email), newest first.", Params: templateParam,
		Response: leadsResponse{}, Errors: nf, Handler: a.listLeads})
	a.bearer(r, create, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/restore", Tag: "sites", Status: http.StatusAccepted,
		Summary: "Replace a ready site's files and database with a template's, keeping its id and URL.", Params: siteParam,
		Request: RestoreSiteRequest{}, Response: siteJobResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeTemplateNotFound, apierr.CodeInvalidRequest}, Handler: a.restoreSite})
}

// LeadView is the contract's Launch lead.
type LeadView struct {
	ID         string    `json:"id"`
	TemplateID string    `json:"templateId"`
	Email      string    `json:"email"`
	SiteID     string    `json:"siteId"`
	IPHash     string    `json:"ipHash"`
	CreatedAt  time.Time `json:"createdAt"`
}

type leadsResponse struct {
	Leads []LeadView `json:"leads"`
}

func (a templateRoutes) listLeads(w http.ResponseWriter, req *http.Request) error {
	t, err := a.templateIn(req)
	if err != nil {
		return err
	}
	ls, err := a.store.LeadsOf(t.ID)
	if err != nil {
		return err
	}
	out := make([]LeadView, 0, len(ls))
	for _, l := range ls {
		out = append(out, LeadView{ID: l.ID, TemplateID: l.TemplateID, Email: l.Email, SiteID: l.SiteID, IPHash: l.IPHash, CreatedAt: l.CreatedAt})
	}
	return rest.JSON(w, http.StatusOK, leadsResponse{Leads: out})
}

func (a templateRoutes) templateIn(req *http.Request) (*state.Template, error) {
	return templatespec.In(a.store, CallerFrom(req.Context()).Workspace.ID, req.PathValue("id"))
}

func (a templateRoutes) createTemplate(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body CreateTemplateRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusAccepted, func(m sitespec.Made) any {
		return templateJobResponse{Template: templateView(m.Template), JobID: m.JobID}
	})
	in := templatespec.Create{Workspace: c.Workspace, By: c.Account, SiteID: body.SiteID, Name: body.Name, Description: body.Description,
		Answer: ans}
	_, _, err := a.templates.Create(req.Context(), in)
	return respond(a.base, w, req, ans, err)
}

func (a templateRoutes) listTemplates(w http.ResponseWriter, req *http.Request) error {
	ts, err := a.store.TemplatesOf(CallerFrom(req.Context()).Workspace.ID)
	if err != nil {
		return err
	}
	out := make([]TemplateView, 0, len(ts))
	for _, t := range ts {
		if t.RebuildOf != "" {
			continue // a rebake in progress shows as the template it rebuilds
		}
		out = append(out, templateView(t))
	}
	return rest.JSON(w, http.StatusOK, templatesResponse{Templates: out})
}

func (a templateRoutes) patchTemplate(w http.ResponseWriter, req *http.Request) error {
	t, err := a.templateIn(req)
	if err != nil {
		return err
	}
	var body templatespec.Patch
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	next, err := a.templates.Update(req.Context(), t, body)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, templateResponse{Template: templateView(next)})
}

func (a templateRoutes) deleteTemplate(w http.ResponseWriter, req *http.Request) error {
	t, err := a.templateIn(req)
	if err != nil {
		return err
	}
	if err := a.templates.Delete(req.Context(), t); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
}

func (a templateRoutes) siteFromTemplate(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	t, err := a.templateIn(req)
	if err != nil {
		return err
	}
	var body TemplateSiteRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	return createSite(a.base, a.sites, w, req, sitespec.Create{Workspace: c.Workspace, By: c.Account, Name: body.Name, TemplateID: t.ID,
		ExpiresInMinutes: body.ExpiresInMinutes})
}

func (a templateRoutes) restoreSite(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	var body RestoreSiteRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusAccepted, siteJobAnswer)
	_, _, err = a.sites.Restore(req.Context(), ans, s, body.TemplateID)
	return respond(a.base, w, req, ans, err)
}
