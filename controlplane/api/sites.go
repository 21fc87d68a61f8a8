package api

import (
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
	"github.com/sandboxd/sandboxd/scheduler"
)

// SiteView is the addendum's site record.
type SiteView struct {
	ID               string     `json:"id"`
	OrgID            string     `json:"orgId"`
	UserID           string     `json:"userId"`
	CreatedByUserID  string     `json:"createdByUserId"`
	Name             string     `json:"name"`
	Slug             string     `json:"slug"`
	Status           string     `json:"status" enum:"creating,ready,failed,deleting"`
	URL              string     `json:"url"`
	PHPVersion       string     `json:"phpVersion"`
	WordPressVersion *string    `json:"wordpressVersion"`
	TemplateID       *string    `json:"templateId"`
	NodeID           *string    `json:"nodeId"`
	ExpiresAt        *time.Time `json:"expiresAt"`
	FailureReason    *string    `json:"failureReason"`
	CreatedAt        time.Time  `json:"createdAt"`
	UpdatedAt        time.Time  `json:"updatedAt"`
}

func siteView(s *state.Site) SiteView {
	return SiteView{ID: s.ID, OrgID: s.WorkspaceID, UserID: s.UserID, CreatedByUserID: s.CreatedByUserID, Name: s.Name,
		Slug: s.Slug, Status: s.Status, URL: s.URL, PHPVersion: s.PHPVersion, WordPressVersion: optional(s.WordPressVersion),
		TemplateID: optional(s.TemplateID), NodeID: optional(s.NodeID), ExpiresAt: s.ExpiresAt,
		FailureReason: optional(s.FailureReason), CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
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

// LoginLink is the contract's one-time login link.
type LoginLink struct {
	Token     string    `json:"token"`
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// PHPVersions are the versions the contract allows.
var PHPVersions = []string{"8.5", "8.4", "8.3", "8.2", "8.1", "7.4"}

// DefaultPHPVersion is used when a request names none.
const DefaultPHPVersion = "8.2"

// LoginTTL is how long a magic-login link works.
const LoginTTL = 5 * time.Minute

var siteParam = map[string]string{"id": "site"}

func (a *API) registerSites(r *rest.Router) {
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
		Summary: "Reset a ready site to a fresh install, keeping its id and URL.", Params: siteParam, Response: siteJobResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}, Handler: a.resetSite})
	a.bearer(r, member, rest.Route{Method: "POST", Path: "/api/sites/{id}/magic-login", Tag: "sites",
		Summary: "A one-time link that opens the site signed in to wp-admin.", Params: siteParam, Response: LoginLink{},
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}, Handler: a.magicLogin})
}

func (a *API) siteIn(req *http.Request) (*state.Site, error) {
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

func notReady(s *state.Site) error {
	return apierr.Invalid("", "the site is %s; this needs a ready site", s.Status).With("status", s.Status)
}

var (
	phpRE  = regexp.MustCompile(`^\d+\.\d+$`)
	wpRE   = regexp.MustCompile(`^\d+\.\d+(\.\d+)?$`)
	slugRE = regexp.MustCompile(`[^a-z0-9]+`)
)

// slugFor makes a DNS label from a name, with a random suffix so slugs
// stay unique and unguessable.
func slugFor(name string) string {
	base := strings.Trim(slugRE.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(base) > 40 {
		base = strings.Trim(base[:40], "-")
	}
	if base == "" {
		base = "site"
	}
	return base + "-" + ids.Random(3)[:5]
}

func (a *API) createSite(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body CreateSiteRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	name := strings.TrimSpace(body.Name)
	if len(name) > 100 || strings.ContainsAny(name, "\x00\r\n") {
		return apierr.Invalid("name", "name must be at most 100 characters on one line")
	}
	php := body.PHPVersion
	if php == "" {
		php = DefaultPHPVersion
	}
	if !phpRE.MatchString(php) || !slices.Contains(PHPVersions, php) {
		return apierr.Invalid("phpVersion", "phpVersion must be one of %s", strings.Join(PHPVersions, ", ")).With("allowed", PHPVersions)
	}
	if body.WordPressVersion != "" && !wpRE.MatchString(body.WordPressVersion) {
		return apierr.Invalid("wordpressVersion", "wordpressVersion must look like 6.1 or 6.1.1")
	}
	if body.TemplateID != "" {
		return apierr.Invalid("templateId", "creating a site from a template is not available yet")
	}
	now := a.now()
	var expires *time.Time
	if m := body.ExpiresInMinutes; m != nil {
		if *m < 1 || *m > 43200 {
			return apierr.Invalid("expiresInMinutes", "expiresInMinutes must be between 1 and 43200")
		}
		t := now.Add(time.Duration(*m) * time.Minute)
		expires = &t
	}
	candidates, err := a.cfg.Nodes.Candidates()
	if err != nil {
		return err
	}
	placement, err := scheduler.Place(candidates, scheduler.Request{PHPVersion: php, Needs: scheduler.Resources{MemoryMB: 256}}, a.cfg.Strategy)
	if err != nil {
		var nofit *scheduler.NoFitError
		if !errors.As(err, &nofit) {
			return err
		}
		if nofit.Nodes == 0 {
			return apierr.Unavailable("no node agent is registered")
		}
		if avail := a.cfg.Nodes.AvailablePHP(); !slices.Contains(avail, php) {
			return apierr.New(http.StatusBadRequest, apierr.CodePHPVersionUnavailable,
				"no runtime image for PHP %s is installed on any node (available: %s)", php, strings.Join(avail, ", ")).
				With("field", "phpVersion").With("phpVersion", php).With("available", avail)
		}
		return apierr.Unavailable("no node can take a PHP %s site right now (%s)", php, nofit.Error())
	}
	plan, err := a.ownerPlan(c.Workspace)
	if err != nil {
		return err
	}
	quota, err := a.cfg.Plans.Quota(plan, plans.Sites)
	if err != nil {
		return err
	}
	slug := slugFor(name)
	if name == "" {
		name = "WordPress sandbox"
	}
	site := state.Site{ID: ids.New(ids.Site), WorkspaceID: c.Workspace.ID, UserID: c.Workspace.OwnerID, CreatedByUserID: c.Account.ID,
		Name: name, Slug: slug, Status: state.SiteCreating, URL: a.cfg.SiteURL(slug), PHPVersion: php, NodeID: placement.NodeID,
		ExpiresAt: expires, CreatedAt: now, UpdatedAt: now}
	payload := jobspec.CreatePayload{AdminUser: "admin", AdminEmail: c.Account.Email, WordPressVersion: body.WordPressVersion,
		DiskMB: a.cfg.Plans.For(plan).SiteDiskMB}
	if !strings.Contains(payload.AdminEmail, ".") { // owner@localhost is no address WordPress accepts
		payload.AdminEmail = "admin@example.com"
	}
	job, err := jobs.New(jobspec.CreateSite, c.Workspace.ID, site.ID, payload, now)
	if err != nil {
		return err
	}
	return a.commit(w, req, fsm.CreateSiteWithJob{Site: site, Job: job, Quota: quota}, nil,
		http.StatusAccepted, siteJobResponse{Site: siteView(&site), JobID: job.ID})
}

func (a *API) listSites(w http.ResponseWriter, req *http.Request) error {
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

// siteJob moves a site to status and queues a job of type jobType for it.
func (a *API) siteJob(w http.ResponseWriter, req *http.Request, s *state.Site, status, jobType string) error {
	now := a.now()
	job, err := jobs.New(jobType, s.WorkspaceID, s.ID, nil, now)
	if err != nil {
		return err
	}
	next := *s
	next.Status, next.UpdatedAt = status, now
	return a.commit(w, req, fsm.UpdateSiteWithJob{Update: state.SiteUpdate{ID: s.ID, Status: status, At: now}, Job: job},
		apierr.NotFound(apierr.CodeSiteNotFound, "site"), http.StatusAccepted, siteJobResponse{Site: siteView(&next), JobID: job.ID})
}

func (a *API) deleteSite(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	return a.siteJob(w, req, s, state.SiteDeleting, jobspec.DeleteSite)
}

func (a *API) resetSite(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	if s.Status != state.SiteReady {
		return notReady(s)
	}
	return a.siteJob(w, req, s, state.SiteCreating, jobspec.ResetSite)
}

func (a *API) magicLogin(w http.ResponseWriter, req *http.Request) error {
	s, agent, err := a.readyAgent(req)
	if err != nil {
		return err
	}
	token, hash := oneTimeToken()
	expires := a.now().Add(LoginTTL)
	_, err = agent.CreateLoginToken(req.Context(), connect.NewRequest(&agentv1.CreateLoginTokenRequest{
		SiteId: s.ID, TokenHash: hash, ExpiresUnix: expires.Unix()}))
	if err != nil {
		return agentError(err)
	}
	return rest.JSON(w, http.StatusOK, LoginLink{Token: token, URL: s.URL + "/?sandbox_login=" + token, ExpiresAt: expires})
}
