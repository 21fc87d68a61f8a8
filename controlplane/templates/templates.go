// Package templates is the service behind Templates: it freezes a ready
// site into a template through a job, keeps a template's settings (name,
// description, launch link, warm pool) valid, and deletes templates. A
// template's tree on its node outlives its row while sites are made from
// it; sitejobs collects it once none is. It takes ids and state records,
// never an HTTP request.
package templates

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/naming"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/templatespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
)

// Config wires the service.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	Plans plans.Config
	// MaxWarmPool bounds a template's warmPoolSize; zero means 10.
	MaxWarmPool int
	Now         func() time.Time
}

// Service makes, changes and deletes templates.
type Service struct {
	cfg Config
}

// New returns the templates service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxWarmPool == 0 {
		cfg.MaxWarmPool = 10
	}
	return &Service{cfg: cfg}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// Launch defaults: a new template's launch link, off until enabled.
// DefaultLaunch is the launch settings a new template starts with.
var DefaultLaunch = state.Launch{QuotaMode: "visitor", EntryMode: "anonymous", ExpirationMode: "fixed",
	ExpirationMinutes: 60, LandingPath: "/wp-admin/", ConsentLabel: "I agree to be contacted about this product.",
	Branding: state.LaunchBranding{Headline: "Try it in a sandbox of your own", ButtonLabel: "Launch demo"}}

// In returns a template of the workspace: another workspace's is
// indistinguishable from one that does not exist.
func (s *Service) In(workspaceID, id string) (*state.Template, error) {
	return templatespec.In(s.cfg.Store, workspaceID, id)
}

// Ready returns a ready template of the workspace for a site to be made
// from: an unknown one is 404, one still building or failed is
// invalid_request (details.field, details.status).
func Ready(store *state.Store, workspaceID, id, field string) (*state.Template, error) {
	t, err := templatespec.In(store, workspaceID, id)
	if err != nil {
		return nil, err
	}
	if t.Status != state.TemplateReady {
		return nil, apierr.Invalid(field, "the template is %s; sites are made from ready templates", t.Status).With("status", t.Status)
	}
	return t, nil
}

// Create checks the source site, and queues the job that freezes it with
// the building template, in one Raft entry within the owner's template
// quota.
func (s *Service) Create(ctx context.Context, in templatespec.Create) (*state.Template, string, error) {
	name, err := naming.Name(in.Name)
	if err != nil {
		return nil, "", err
	}
	desc, err := naming.Description(in.Description)
	if err != nil {
		return nil, "", err
	}
	if in.SiteID == "" {
		return nil, "", apierr.Invalid("siteId", "siteId is required")
	}
	site, err := s.cfg.Store.Site(in.SiteID)
	if err != nil {
		return nil, "", err
	}
	if site == nil || site.WorkspaceID != in.Workspace.ID {
		return nil, "", apierr.NotFound(apierr.CodeSiteNotFound, "site")
	}
	if site.Status != state.SiteReady || site.Move != nil {
		return nil, "", apierr.Invalid("siteId", "the site is %s; a template is made from a ready site", site.Status).
			With("status", site.Status)
	}
	plan, err := s.cfg.Store.PlanOf(in.Workspace)
	if err != nil {
		return nil, "", err
	}
	quota, err := s.cfg.Plans.Quota(plan, plans.Templates)
	if err != nil {
		return nil, "", err
	}
	now := s.now()
	tpl := state.Template{ID: ids.New(ids.Template), WorkspaceID: in.Workspace.ID, UserID: in.Workspace.OwnerID,
		CreatedByUserID: in.By.ID, Name: name, Description: desc, SourceSiteID: site.ID, Status: state.TemplateBuilding,
		WordPressVersion: site.WordPressVersion, PHPVersion: site.PHPVersion, NodeID: site.NodeID, Launch: DefaultLaunch,
		CreatedAt: now, UpdatedAt: now}
	job, err := jobs.New(jobspec.SnapshotTemplate, in.Workspace.ID, site.ID, jobspec.TemplatePayload{TemplateID: tpl.ID}, now)
	if err != nil {
		return nil, "", err
	}
	taken, err := s.slugsIn(in.Workspace.ID)
	if err != nil {
		return nil, "", err
	}
	// A slug is unique in its workspace: the name's, or with a suffix. A
	// create racing for the same slug is refused by the store; one retry
	// with a random suffix settles it.
	for try := 0; ; try++ {
		tpl.Slug = naming.Slug(name, "template", taken, try > 0)
		_, err = commit.Apply(ctx, s.cfg.Raft, in.Answer, fsm.CreateTemplateWithJob{Template: tpl, Job: job, Quota: quota},
			sitespec.Made{Site: *site, JobID: job.ID, Template: &tpl})
		if !errors.Is(err, state.ErrConflict) || try > 0 {
			break
		}
	}
	if err != nil {
		return nil, "", err
	}
	return &tpl, job.ID, nil
}

func (s *Service) slugsIn(workspaceID string) (map[string]bool, error) {
	ts, err := s.cfg.Store.TemplatesOf(workspaceID)
	if err != nil {
		return nil, err
	}
	taken := make(map[string]bool, len(ts))
	for _, t := range ts {
		taken[t.Slug] = true
	}
	return taken, nil
}

// Delete removes a template. Sites made from it keep working: its tree
// stays on its node until no site is made from it.
func (s *Service) Delete(ctx context.Context, t *state.Template) error {
	_, err := s.cfg.Raft.Apply(ctx, fsm.DeleteTemplate{ID: t.ID})
	return err
}

// planOf is the plan of the template's workspace owner.
func (s *Service) planOf(t *state.Template) (string, error) {
	w, err := s.cfg.Store.Workspace(t.WorkspaceID)
	if err != nil {
		return "", err
	}
	if w == nil {
		return "", templatespec.NotFound()
	}
	return s.cfg.Store.PlanOf(w)
}

// paidOnly is the 402 for a setting the free plan does not have.
func paidOnly(field string) error {
	return apierr.New(http.StatusPaymentRequired, apierr.CodeTemplateSharingRequiresPaidPlan,
		"%s needs a paid plan", field).With("field", field).With("plan", state.PlanFree)
}
