package api

import (
	"context"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// SiteView is the addendum's site record.
type SiteView struct {
	ID               string     `json:"id"`
	OrgID            string     `json:"orgId"`
	UserID           string     `json:"userId"`
	CreatedByUserID  string     `json:"createdByUserId"`
	Name             string     `json:"name"`
	Slug             string     `json:"slug"`
	Status           string     `json:"status" enum:"@siteStatus" doc:"unavailable: its node is down, or the site is being switched to another node."`
	URL              string     `json:"url"`
	PHPVersion       string     `json:"phpVersion"`
	WordPressVersion *string    `json:"wordpressVersion"`
	TemplateID       *string    `json:"templateId"`
	NodeID           *string    `json:"nodeId"`
	ExpiresAt        *time.Time `json:"expiresAt"`
	FailureReason    *string    `json:"failureReason"`
	// RestoredFromSnapshotAt is when the snapshot the site was restored
	// from was taken, after the node it ran on was lost: changes made
	// after that time are gone. Null for a site that never lost data.
	RestoredFromSnapshotAt *time.Time `json:"restoredFromSnapshotAt" doc:"Set when the site was restored from a snapshot after its node was lost: its data is as of this time."`
	// Sleeping and LastRequestAt: see state.Site.
	Sleeping      bool       `json:"sleeping" doc:"The site is asleep for want of requests (its status stays ready): its next request, SSH session or operation wakes it, usually within a tenth of a second."`
	LastRequestAt *time.Time `json:"lastRequestAt" doc:"The minute of the site's latest request through an edge, SSH session or operation, as its node last reported; null when none was seen."`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
}

func siteView(s *state.Site) SiteView {
	return SiteView{ID: s.ID, OrgID: s.WorkspaceID, UserID: s.UserID, CreatedByUserID: s.CreatedByUserID, Name: s.Name,
		Slug: s.Slug, Status: s.Status, URL: s.URL, PHPVersion: s.PHPVersion, WordPressVersion: optional(s.WordPressVersion),
		TemplateID: optional(s.TemplateID), NodeID: optional(s.NodeID), ExpiresAt: s.ExpiresAt,
		FailureReason: optional(s.FailureReason), RestoredFromSnapshotAt: s.RestoredFrom, Sleeping: s.Sleeping, LastRequestAt: s.LastRequestAt,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

type siteResponse struct {
	Site SiteView `json:"site"`
}

type sitesResponse struct {
	Sites []SiteView `json:"sites"`
}

type siteJobResponse struct {
	Site  SiteView `json:"site"`
	JobID string   `json:"jobId"`
}

// CreateSiteRequest is the body of POST /api/app/sites (all optional).
type CreateSiteRequest struct {
	Name             string `json:"name,omitempty"`
	PHPVersion       string `json:"phpVersion,omitempty" doc:"One of 8.5 8.4 8.3 8.2 8.1 7.4; default 8.2. A version no node has an image for is refused."`
	WordPressVersion string `json:"wordpressVersion,omitempty"`
	TemplateID       string `json:"templateId,omitempty"`
	ExpiresInMinutes *int   `json:"expiresInMinutes,omitempty" doc:"1..43200; the site is deleted when it expires."`
}

// SiteChanges is what the routes that change a site need from the sites
// service; each returns the job that carries the change out.
type SiteChanges interface {
	Create(ctx context.Context, in sitespec.Create) (*state.Site, string, error)
	Delete(ctx context.Context, s *state.Site) (*state.Site, string, error)
	Reset(ctx context.Context, ans *writes.Answer[sitespec.Made], s *state.Site) (*state.Site, string, error)
	Restore(ctx context.Context, ans *writes.Answer[sitespec.Made], s *state.Site, templateID string) (*state.Site, string, error)
	SwitchPHP(ctx context.Context, s *state.Site, version string) (string, error)
	SetPHPConfig(ctx context.Context, s *state.Site, settings map[string]any) (map[string]string, string, error)
	Deploy(ctx context.Context, ans *writes.Answer[sitespec.Made], s *state.Site, d sitespec.Deploy) (string, error)
}

var siteParam = map[string]string{"id": "site"}

// siteRoutes are sites: create, list, delete, reset, sign in.
type siteRoutes struct {
	*base
	sites SiteChanges
	tools SiteTools
}

func (a siteRoutes) register(r *rest.Router) {
	create := guard{scope: scopeWorkspace, capability: access.Create}
	member := guard{scope: scopeWorkspace}
	a.bearer(r, create, rest.Route{Method: "POST", Path: "/api/app/sites", Tag: "sites", Status: http.StatusAccepted,
		Summary: "Create a WordPress site; poll the job or the site until it is ready.", Request: CreateSiteRequest{},
		Response: siteJobResponse{}, Idempotent: true, Errors: []string{apierr.CodeInvalidRequest, apierr.CodePHPVersionUnavailable,
			apierr.CodePlanLimitReached, apierr.CodePayloadTooLarge}, Handler: a.createSite})
	a.bearer(r, member, rest.Route{Method: "GET", Path: "/api/app/sites", Tag: "sites", Summary: "List the workspace's sites.",
		Response: sitesResponse{}, Handler: a.listSites})
	a.bearer(r, member, rest.Route{Method: "GET", Path: "/api/app/sites/{id}", Tag: "sites", Summary: "One site.",
		Params: siteParam, Response: siteResponse{}, Errors: []string{apierr.CodeSiteNotFound},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, siteResponse{Site: siteView(s)})
		}})
	a.bearer(r, create, rest.Route{Method: "DELETE", Path: "/api/app/sites/{id}", Tag: "sites", Status: http.StatusAccepted,
		Summary: "Delete a site: its container, database and files.", Params: siteParam, Response: siteJobResponse{},
		Errors: []string{apierr.CodeSiteNotFound}, Handler: a.deleteSite})
	a.bearer(r, create, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/reset", Tag: "sites", Status: http.StatusAccepted,
		Summary: "Reset a ready site to what it was made from (a fresh install, or its template), keeping its id and URL.", Params: siteParam, Response: siteJobResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}, Handler: a.resetSite})
	a.bearer(r, member, rest.Route{Method: "POST", Path: "/api/sites/{id}/magic-login", Tag: "sites",
		Summary: "A one-time link that opens the site signed in to wp-admin.", Params: siteParam, Response: sitespec.LoginLink{},
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}, Handler: a.magicLogin})
}

func (a *base) siteIn(req *http.Request) (*state.Site, error) {
	c := CallerFrom(req.Context())
	s, err := a.store.Site(req.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if s == nil || s.WorkspaceID != c.Workspace.ID {
		return nil, apierr.NotFound(apierr.CodeSiteNotFound, "site")
	}
	return s, nil
}

func (a siteRoutes) createSite(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body CreateSiteRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	return createSite(a.base, a.sites, w, req, sitespec.Create{Workspace: c.Workspace, By: c.Account, Name: body.Name, PHPVersion: body.PHPVersion,
		WordPressVersion: body.WordPressVersion, TemplateID: body.TemplateID, ExpiresInMinutes: body.ExpiresInMinutes})
}

// createSite makes a site through the sites service and answers 202 {site,
// jobId}, rendered from what the service made so a replay is the same
// answer.
func createSite(b *base, sites SiteChanges, w http.ResponseWriter, req *http.Request, in sitespec.Create) error {
	in.Answer = answer(b, req, http.StatusAccepted, siteJobAnswer)
	_, _, err := sites.Create(req.Context(), in)
	return respond(b, w, req, in.Answer, err)
}

// siteJobAnswer is the answer of a write that changes a site with a job.
func siteJobAnswer(m sitespec.Made) any {
	return siteJobResponse{Site: siteView(&m.Site), JobID: m.JobID}
}

func (a siteRoutes) listSites(w http.ResponseWriter, req *http.Request) error {
	ss, err := a.store.SitesOf(CallerFrom(req.Context()).Workspace.ID)
	if err != nil {
		return err
	}
	out := make([]SiteView, 0, len(ss))
	for _, s := range ss {
		out = append(out, siteView(s))
	}
	return rest.JSON(w, http.StatusOK, sitesResponse{Sites: out})
}

func (a siteRoutes) deleteSite(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	next, job, err := a.sites.Delete(req.Context(), s)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusAccepted, siteJobResponse{Site: siteView(next), JobID: job})
}

func (a siteRoutes) resetSite(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	// The answer is the site as the reset leaves it, rendered from what
	// the service made so a replay under an Idempotency-Key is the same.
	ans := answer(a.base, req, http.StatusAccepted, siteJobAnswer)
	_, _, err = a.sites.Reset(req.Context(), ans, s)
	return respond(a.base, w, req, ans, err)
}

func (a siteRoutes) magicLogin(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	link, err := a.tools.MagicLogin(req.Context(), s)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, link)
}
