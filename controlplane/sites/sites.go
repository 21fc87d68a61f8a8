// Package sites is the service behind every site operation: it checks a
// request against the rules and the plan, places new sites on a node,
// queues the jobs that change them, and reaches a ready site's agent for
// its toolbox, turning the agent's failures into the contract's errors.
// It takes ids and state records, never an HTTP request.
package sites

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/library"
	"github.com/sandboxd/sandboxd/controlplane/libraryspec"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/templates"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
	"github.com/sandboxd/sandboxd/scheduler"
)

// Nodes is what the service needs from the node registry: where a site
// can go, and a client for the agent holding one.
type Nodes interface {
	Candidates() ([]scheduler.Node, error)
	AvailablePHP() []string
	Agent(nodeID string) (agentv1connect.AgentServiceClient, error)
	// HeldTemplates lists the templates a node reported holding.
	HeldTemplates(nodeID string) []string
}

// Zips stores a ZIP bound for a site where every server can read it
// (the Library's blob store).
type Zips interface {
	StoreZip(ctx context.Context, zip []byte) (string, error)
}

// Config wires the service.
type Config struct {
	Store    *state.Store
	Raft     fsm.Applier
	Plans    plans.Config
	Nodes    Nodes
	Strategy scheduler.Strategy
	// SiteURL gives a site's public URL from its slug.
	SiteURL func(slug string) string
	Zips    Zips
	// CheckURL is safefetch's address check for a deploy's zipUrl.
	CheckURL func(raw string) error
	// Pools hands out warm pooled sites; nil makes every site anew.
	Pools Pools
	// ShotURL is the short-lived URL of a screenshot kept on a node (nil:
	// no screenshots).
	ShotURL func(nodeID, shotID string, expires time.Time) string
	Now     func() time.Time
}

// Pools hands out ready pooled sites: Take reserves one of a pool (nil
// when none is ready), Release ends the reservation, Count records a hit
// or a miss, Discard removes a pooled site that cannot be handed out.
type Pools interface {
	Take(key string) *state.Site
	Release(siteID string)
	Count(hit bool)
	Discard(ctx context.Context, s *state.Site)
}

// Service changes sites and reaches their agents.
type Service struct {
	cfg Config
	// sized holds when each site's checkpoints were last measured.
	sized sync.Map
}

// New returns the sites service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// siteMemoryMB is what placement reserves for a site.
const siteMemoryMB = 256

// maxZipURL bounds a zipUrl, which travels in the replicated job (signed
// download URLs run to a few KiB).
const maxZipURL = 8 << 10

var (
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

// NotReady refuses an operation that needs a ready site.
func NotReady(s *state.Site) error { return sitespec.NotReady(s) }

// Create validates the request, places the site on a node and queues its
// create job, all in one Raft entry with the plan's site quota.
func (s *Service) Create(ctx context.Context, in sitespec.Create) (*state.Site, string, error) {
	name := strings.TrimSpace(in.Name)
	if len(name) > 100 || strings.ContainsAny(name, "\x00\r\n") {
		return nil, "", apierr.Invalid("name", "name must be at most 100 characters on one line")
	}
	php := in.PHPVersion
	if php == "" {
		php = sitespec.DefaultPHPVersion
	}
	if !sitespec.ValidPHP(php) {
		return nil, "", invalidPHP()
	}
	if in.WordPressVersion != "" && !wpRE.MatchString(in.WordPressVersion) {
		return nil, "", apierr.Invalid("wordpressVersion", "wordpressVersion must look like 6.1 or 6.1.1")
	}
	var tpl *state.Template
	if in.TemplateID != "" {
		t, err := templates.Ready(s.cfg.Store, in.Workspace.ID, in.TemplateID, "templateId")
		if err != nil {
			return nil, "", err
		}
		if in.PHPVersion != "" && in.PHPVersion != t.PHPVersion {
			return nil, "", apierr.Invalid("phpVersion", "a site made from this template runs PHP %s, the template's; "+
				"leave phpVersion out, or switch it once the site is ready", t.PHPVersion).With("templatePhpVersion", t.PHPVersion)
		}
		if in.WordPressVersion != "" && !strings.HasPrefix(t.WordPressVersion, in.WordPressVersion) {
			return nil, "", apierr.Invalid("wordpressVersion", "a site made from this template has its WordPress %s", t.WordPressVersion).
				With("templateWordpressVersion", t.WordPressVersion)
		}
		php, tpl = t.PHPVersion, t
	}
	now := s.now()
	var err error
	var expires *time.Time
	if m := in.ExpiresInMinutes; m != nil {
		if *m < 1 || *m > 43200 {
			return nil, "", apierr.Invalid("expiresInMinutes", "expiresInMinutes must be between 1 and 43200")
		}
		t := now.Add(time.Duration(*m) * time.Minute)
		expires = &t
	}
	plan, err := s.cfg.Store.PlanOf(in.Workspace)
	if err != nil {
		return nil, "", err
	}
	if m := s.cfg.Plans.For(plan).SiteLifetimeMinutes; expires == nil && m > 0 {
		t := now.Add(time.Duration(m) * time.Minute)
		expires = &t
	}
	quota, err := s.cfg.Plans.Quota(plan, plans.Sites)
	if err != nil {
		return nil, "", err
	}
	if name == "" && tpl != nil {
		name = tpl.Name
	}
	slug := slugFor(name)
	if name == "" {
		name = "WordPress sandbox"
	}
	site := state.Site{ID: ids.New(ids.Site), WorkspaceID: in.Workspace.ID, UserID: in.Workspace.OwnerID, CreatedByUserID: in.By.ID,
		Name: name, Slug: slug, Status: state.SiteCreating, URL: s.cfg.SiteURL(slug), PHPVersion: php,
		ExpiresAt: expires, CreatedAt: now, UpdatedAt: now}
	payload := jobspec.CreatePayload{AdminUser: "admin", AdminEmail: in.By.Email, WordPressVersion: in.WordPressVersion,
		DiskMB: s.cfg.Plans.For(plan).SiteDiskMB, SleepAfterSeconds: SleepAfterSeconds(s.cfg.Plans.For(plan))}
	if tpl != nil {
		site.TemplateID, site.TemplateBuild, site.Entry = tpl.ID, tpl.Build, tpl.Entry
		payload.TemplateID = tpl.BuildID() // what the node clones
	}
	if !strings.Contains(payload.AdminEmail, ".") { // owner@localhost is no address WordPress accepts
		payload.AdminEmail = "admin@example.com"
	}
	if in.Run == nil && in.Import == nil {
		if claimed, jobID, ok, err := s.claim(ctx, in.Answer, site, payload, quota, in.WordPressVersion, in.Launch); ok || err != nil {
			return claimed, jobID, err
		}
	}
	if tpl != nil {
		site.NodeID, err = s.placeFrom(php, tpl)
	} else {
		site.NodeID, err = s.place(php)
	}
	if err != nil {
		return nil, "", err
	}
	jobType := jobspec.CreateSite
	if in.Run != nil {
		payload.RunID = in.Run.ID
		if in.Bake != nil {
			jobType = jobspec.BakeBlueprint
		}
	}
	if in.Import != nil {
		jobType, payload.ImportID = jobspec.ImportRestore, in.Import.ID
	}
	job, err := jobs.New(jobType, in.Workspace.ID, site.ID, payload, now)
	if err != nil {
		return nil, "", err
	}
	var cmd fsm.Command = fsm.CreateSiteWithJob{Site: site, Job: job, Quota: quota, Launch: launchOf(in.Launch, &site, job.ID)}
	made := sitespec.Made{Site: site, JobID: job.ID}
	if in.Import != nil {
		imp := *in.Import
		imp.SiteID, imp.JobID = site.ID, job.ID
		cmd, made.Import = fsm.StartImport{Import: imp, IfStatus: in.ImportIfStatus, Job: job, Site: &site, SiteQuota: quota}, &imp
	}
	if in.Run != nil {
		in.Run.SiteID, in.Run.JobID = site.ID, job.ID
		run := *in.Run
		made.Run = &run
		if in.Bake != nil {
			in.Bake.SourceSiteID = site.ID
			bake := *in.Bake
			cmd, made.Template = fsm.StartBake{Site: site, Template: bake, Run: run, Job: job, SiteQuota: quota, TemplateQuota: in.BakeQuota}, &bake
		} else {
			cmd = fsm.CreateSiteWithJob{Site: site, Job: job, Quota: quota, Run: &run}
		}
	}
	if _, err := commit.Apply(ctx, s.cfg.Raft, in.Answer, cmd, made); err != nil {
		return nil, "", err
	}
	return &site, job.ID, nil
}

// launchOf is a launch's demo and lead bound to the site made for it.
func launchOf(l *state.DemoLaunch, site *state.Site, jobID string) *state.DemoLaunch {
	if l == nil {
		return nil
	}
	out := *l
	out.Demo.SiteID, out.Demo.SiteURL, out.Demo.JobID, out.Demo.ExpiresAt = site.ID, site.URL, jobID, site.ExpiresAt
	if l.Lead != nil {
		lead := *l.Lead
		lead.SiteID = site.ID
		out.Lead = &lead
	}
	return &out
}

func invalidPHP() error {
	return apierr.Invalid("phpVersion", "phpVersion must be one of %s", strings.Join(sitespec.PHPVersions, ", ")).
		With("allowed", sitespec.PHPVersions)
}

// place picks the node for a new site of this PHP version.
func (s *Service) place(php string) (string, error) {
	candidates, err := s.cfg.Nodes.Candidates()
	if err != nil {
		return "", err
	}
	placement, err := scheduler.Place(candidates, scheduler.Request{PHPVersion: php, Needs: scheduler.Resources{MemoryMB: siteMemoryMB}}, s.cfg.Strategy)
	if err == nil {
		return placement.NodeID, nil
	}
	var nofit *scheduler.NoFitError
	if !errors.As(err, &nofit) {
		return "", err
	}
	if nofit.Nodes == 0 {
		return "", apierr.Unavailable("no node agent is registered")
	}
	if avail := s.cfg.Nodes.AvailablePHP(); !slices.Contains(avail, php) {
		return "", apierr.New(http.StatusBadRequest, apierr.CodePHPVersionUnavailable,
			"no runtime image for PHP %s is installed on any node (available: %s)", php, strings.Join(avail, ", ")).
			With("field", "phpVersion").With("phpVersion", php).With("available", avail)
	}
	return "", apierr.Unavailable("no node can take a PHP %s site right now (%s)", php, nofit.Error())
}

// holds reports whether a node holds a template (it froze it, or has a
// copy).
func (s *Service) holds(nodeID string, t *state.Template) bool {
	return nodeID == t.NodeID || slices.Contains(s.cfg.Nodes.HeldTemplates(nodeID), t.BuildID())
}

// placeFrom places a site made from template t: on a node that holds it
// when one can take the site (no copy to make), else, when the template
// has an artifact to copy, wherever a site of its PHP version fits.
func (s *Service) placeFrom(php string, t *state.Template) (string, error) {
	candidates, err := s.cfg.Nodes.Candidates()
	if err != nil {
		return "", err
	}
	var holders []scheduler.Node
	for _, c := range candidates {
		if s.holds(c.ID, t) {
			holders = append(holders, c)
		}
	}
	req := scheduler.Request{PHPVersion: php, Needs: scheduler.Resources{MemoryMB: siteMemoryMB}}
	p, err := scheduler.Place(holders, req, s.cfg.Strategy)
	if err == nil {
		return p.NodeID, nil
	}
	if t.ArtifactSHA256 == "" {
		return "", apierr.Unavailable("the node that holds the template cannot take a site right now (%s)", err.Error())
	}
	return s.place(php)
}

// siteJob moves a site to status and queues a job of type jobType for
// it; it returns the site as it now is.
func (s *Service) siteJob(ctx context.Context, ans *writes.Answer[sitespec.Made], site *state.Site, status, jobType string) (*state.Site, string, error) {
	now := s.now()
	job, err := jobs.New(jobType, site.WorkspaceID, site.ID, nil, now)
	if err != nil {
		return nil, "", err
	}
	next := *site
	next.Status, next.UpdatedAt = status, now
	cmd := fsm.UpdateSiteWithJob{Update: state.SiteUpdate{ID: site.ID, Status: status, At: now}, Job: job}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, cmd, sitespec.Made{Site: next, JobID: job.ID}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, "", apierr.NotFound(apierr.CodeSiteNotFound, "site")
		}
		return nil, "", err
	}
	return &next, job.ID, nil
}

// Delete queues the removal of a site: its container, database and files.
func (s *Service) Delete(ctx context.Context, site *state.Site) (*state.Site, string, error) {
	return s.siteJob(ctx, nil, site, state.SiteDeleting, jobspec.DeleteSite)
}

// Reset queues a fresh install of a ready site, keeping its id and URL,
// under a REST request's answer (nil: none).
func (s *Service) Reset(ctx context.Context, ans *writes.Answer[sitespec.Made], site *state.Site) (*state.Site, string, error) {
	if site.Status != state.SiteReady || site.Move != nil {
		return nil, "", NotReady(site)
	}
	return s.siteJob(ctx, ans, site, state.SiteCreating, jobspec.ResetSite)
}

// Restore queues the replacement of a ready site's content (files and
// database) with a ready template's, keeping its id and URL; the site is
// made from the template afterwards, and its reset goes back there.
func (s *Service) Restore(ctx context.Context, ans *writes.Answer[sitespec.Made], site *state.Site, templateID string) (*state.Site, string, error) {
	if templateID == "" {
		return nil, "", apierr.Invalid("templateId", "templateId is required")
	}
	t, err := templates.Ready(s.cfg.Store, site.WorkspaceID, templateID, "templateId")
	if err != nil {
		return nil, "", err
	}
	if site.Status != state.SiteReady || site.Move != nil {
		return nil, "", NotReady(site)
	}
	if !s.holds(site.NodeID, t) && t.ArtifactSHA256 == "" {
		return nil, "", apierr.Invalid("templateId", "the template is kept on another node than the site and has no artifact "+
			"to copy there; make a new site from it instead")
	}
	now := s.now()
	job, err := jobs.New(jobspec.RestoreSite, site.WorkspaceID, site.ID, jobspec.TemplatePayload{TemplateID: t.BuildID()}, now)
	if err != nil {
		return nil, "", err
	}
	u := state.SiteUpdate{ID: site.ID, Status: state.SiteCreating, TemplateID: t.ID, TemplateBuild: t.Build, At: now}
	next := *site
	next.Status, next.TemplateID, next.TemplateBuild, next.UpdatedAt = u.Status, u.TemplateID, u.TemplateBuild, now
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.UpdateSiteWithJob{Update: u, Job: job}, sitespec.Made{Site: next, JobID: job.ID}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, "", apierr.NotFound(apierr.CodeSiteNotFound, "site")
		}
		return nil, "", err
	}
	return &next, job.ID, nil
}

// job queues one job for a ready site, under a REST request's answer
// (nil: none).
func (s *Service) job(ctx context.Context, ans *writes.Answer[sitespec.Made], site *state.Site, jobType string, payload any) (string, error) {
	if site.Status != state.SiteReady || site.Move != nil {
		return "", NotReady(site)
	}
	job, err := jobs.New(jobType, site.WorkspaceID, site.ID, payload, s.now())
	if err != nil {
		return "", err
	}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.CreateJob{Job: job}, sitespec.Made{Site: *site, JobID: job.ID}); err != nil {
		return "", err
	}
	return job.ID, nil
}

// SwitchPHP queues a switch of a ready site's PHP version; the site's
// version changes only once WordPress answers on the new runtime.
func (s *Service) SwitchPHP(ctx context.Context, site *state.Site, version string) (string, error) {
	if !sitespec.ValidPHP(version) {
		return "", invalidPHP()
	}
	return s.job(ctx, nil, site, jobspec.SwitchPHPVersion, jobspec.SwitchPayload{PHPVersion: version})
}

// SetPHPConfig checks changes to a ready site's php.ini settings and
// queues the job that applies them; it returns the settings in effect
// once it has.
func (s *Service) SetPHPConfig(ctx context.Context, site *state.Site, settings map[string]any) (map[string]string, string, error) {
	changes, err := sitespec.ParsePHPSettings(settings)
	if err != nil {
		return nil, "", err
	}
	next := map[string]string{}
	for k, v := range site.PHPConfig {
		next[k] = v
	}
	for k, v := range changes {
		next[k] = v
	}
	id, err := s.job(ctx, nil, site, jobspec.UpdatePHPConfig, jobspec.PHPConfigPayload{Settings: next})
	if err != nil {
		return nil, "", err
	}
	return sitespec.EffectivePHP(next), id, nil
}

// Deploy queues the install of a plugin or theme from one source. An
// upload is checked and stored now; a URL only has its address checked,
// the job downloads it.
func (s *Service) Deploy(ctx context.Context, ans *writes.Answer[sitespec.Made], site *state.Site, d sitespec.Deploy) (string, error) {
	p := jobspec.DeployPayload{Activate: d.Activate}
	switch {
	case d.Upload != nil:
		p.Source = "upload"
	case (d.LibraryPlugin == nil) == (d.ZipURL == nil):
		return "", apierr.Invalid("", "give exactly one of libraryPlugin and zipUrl (or a multipart file)")
	case d.LibraryPlugin != nil:
		e, err := s.cfg.Store.LibraryEntry(site.WorkspaceID, *d.LibraryPlugin)
		if err != nil {
			return "", err
		}
		if e == nil {
			return "", apierr.NotFound(libraryspec.CodeEntryNotFound, "library entry")
		}
		p.BlobSHA256, p.Source = e.BlobSHA256, "library:"+e.Slug
	default:
		if len(*d.ZipURL) > maxZipURL {
			return "", apierr.Invalid("zipUrl", "the URL is longer than %d bytes", maxZipURL)
		}
		if err := s.cfg.CheckURL(*d.ZipURL); err != nil {
			return "", apierr.Invalid("zipUrl", "%v", err)
		}
		p.ZipURL, p.Source = *d.ZipURL, "url"
	}
	if site.Status != state.SiteReady || site.Move != nil {
		return "", NotReady(site)
	}
	if d.Upload != nil {
		if _, err := library.Inspect("file", d.Upload); err != nil {
			return "", err
		}
		sha, err := s.cfg.Zips.StoreZip(ctx, d.Upload)
		if err != nil {
			return "", err
		}
		p.BlobSHA256 = sha
	}
	return s.job(ctx, ans, site, jobspec.DeployPlugin, p)
}

// SleepAfterSeconds is what a node is told of a plan's idle time: -1 for
// never (the plan's 0), else seconds.
func SleepAfterSeconds(l plans.Limits) int64 {
	if l.SleepAfterMinutes == 0 {
		return -1
	}
	return int64(l.SleepAfterMinutes) * 60
}
