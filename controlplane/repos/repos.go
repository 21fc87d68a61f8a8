// Package repos is the Git deploy service: repositories connected to
// sites (where their tree goes, how they authenticate), the deploy
// keys and webhook secrets made for them (sealed), the deploys they queue
// by hand or on a verified push, and the rules each of those follows.
package repos

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"path"
	"regexp"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/gitpush"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/jobspec"
	"github.com/sandboxd/sandboxd/controlplane/repospec"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/gitsource"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/safefetch"
	"github.com/sandboxd/sandboxd/internal/seal"
)

// Config wires the service.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	// Sealer seals tokens, deploy keys and webhook secrets.
	Sealer *seal.Sealer
	// PublicURL is the API base URL the webhook URLs are made from.
	PublicURL string
	// Allow are the private ranges the operator lets repository hosts be
	// in (--fetch-allow); every other private address is refused.
	Allow []netip.Prefix
	Now   func() time.Time
}

// Service keeps connected repositories.
type Service struct{ cfg Config }

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// folderRE is the agent's rule for a folder under plugins/ or themes/.
var folderRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$`)

// tokenRE is what a code host's access token looks like.
var tokenRE = regexp.MustCompile(`^[\x21-\x7e]+$`)

// List returns a site's repositories.
func (s *Service) List(site *state.Site) ([]*state.Repository, error) {
	return s.cfg.Store.SiteRepositories(site.ID)
}

// Get returns a repository of the site, or 404.
func (s *Service) Get(site *state.Site, id string) (*state.Repository, error) {
	r, err := s.cfg.Store.Repository(id)
	if err != nil {
		return nil, err
	}
	if r == nil || r.SiteID != site.ID {
		return nil, notFound()
	}
	return r, nil
}

func notFound() error { return apierr.NotFound(repospec.CodeNotFound, "repository") }

// checkRemote parses a repository URL and refuses one the agent may not
// reach: http (use https), or a host written as a private address.
func (s *Service) checkRemote(raw, authKind string) (*gitsource.Remote, error) {
	r, err := gitsource.Parse(raw, nil)
	if err != nil {
		return nil, apierr.Invalid("repoUrl", "%s", strings.TrimPrefix(err.Error(), gitsource.ErrInvalid.Error()+": "))
	}
	switch {
	case authKind == repospec.AuthHTTPS && r.SSH:
		return nil, apierr.Invalid("repoUrl", "authKind https needs an https:// URL; for ssh://… or git@host:… use authKind ssh")
	case authKind == repospec.AuthSSH && !r.SSH:
		return nil, apierr.Invalid("repoUrl", "authKind ssh needs an ssh URL (ssh://git@host/owner/repo.git or git@host:owner/repo.git)")
	case !r.SSH && !strings.HasPrefix(raw, "https://"):
		return nil, apierr.Invalid("repoUrl", "repositories are fetched over https (or ssh), not plain http")
	}
	if a, err := netip.ParseAddr(r.Host); err == nil && !safefetch.Allowed(a.Unmap(), s.cfg.Allow) {
		return nil, apierr.Invalid("repoUrl", "%s is a private, loopback, link-local or reserved address", a)
	}
	return r, nil
}

// defaultFolder is the repository's name, as git clone names its
// directory.
func defaultFolder(raw string) string {
	p := raw
	if i := strings.LastIndexAny(p, ":/"); i >= 0 {
		p = p[i+1:]
	}
	return strings.TrimSuffix(path.Base(p), ".git")
}

// Connect connects a repository to a site. For ssh a deploy key is made
// (its public half to add to the repository); the webhook URL, which
// holds the webhook secret, is returned this once.
func (s *Service) Connect(ctx context.Context, site *state.Site, by *state.Account, in repospec.Connect) (*state.Repository, string, string, error) {
	if in.AuthKind == "" {
		in.AuthKind = repospec.AuthHTTPS
	}
	if in.AuthKind != repospec.AuthHTTPS && in.AuthKind != repospec.AuthSSH {
		return nil, "", "", apierr.Invalid("authKind", "authKind is https or ssh")
	}
	switch in.Destination {
	case repospec.DestPlugin, repospec.DestTheme, repospec.DestWPContent:
	case "":
		return nil, "", "", apierr.Invalid("destination", "destination is required: plugin, theme or wp-content")
	default:
		return nil, "", "", apierr.Invalid("destination", "destination is plugin, theme or wp-content")
	}
	if _, err := s.checkRemote(in.RepoURL, in.AuthKind); err != nil {
		return nil, "", "", err
	}
	if in.Branch == "" {
		in.Branch = "main"
	}
	if err := gitsource.CheckBranch(in.Branch); err != nil {
		return nil, "", "", apierr.Invalid("branch", "%q is not a branch name git accepts", in.Branch)
	}
	if in.Destination == repospec.DestWPContent {
		if in.FolderName != "" {
			return nil, "", "", apierr.Invalid("folderName", "a wp-content repository has no folder: its top-level entries go over wp-content's")
		}
	} else {
		if in.FolderName == "" {
			in.FolderName = defaultFolder(in.RepoURL)
		}
		if !folderRE.MatchString(in.FolderName) {
			return nil, "", "", apierr.Invalid("folderName", "folderName is 1 to 100 of A-Z a-z 0-9 . _ - and does not start with . or -")
		}
	}
	if in.Token != "" && (in.AuthKind != repospec.AuthHTTPS || len(in.Token) > 1024 || !tokenRE.MatchString(in.Token)) {
		return nil, "", "", apierr.Invalid("token", "a token is for https repositories: up to 1024 printable characters")
	}
	now := s.now()
	r := state.Repository{ID: ids.New(ids.Repository), SiteID: site.ID, WorkspaceID: site.WorkspaceID, RepoURL: in.RepoURL,
		Branch: in.Branch, Destination: in.Destination, FolderName: in.FolderName, AuthKind: in.AuthKind, AutoDeploy: true,
		CreatedByUserID: by.ID, CreatedAt: now, UpdatedAt: now}
	if in.AutoDeploy != nil {
		r.AutoDeploy = *in.AutoDeploy
	}
	if in.Token != "" {
		r.TokenSealed = s.cfg.Sealer.Seal(in.Token, r.ID+"/token")
	}
	if in.AuthKind == repospec.AuthSSH {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, "", "", err
		}
		sp, err := ssh.NewPublicKey(pub)
		if err != nil {
			return nil, "", "", err
		}
		block, err := ssh.MarshalPrivateKey(priv, "sandboxd "+r.ID)
		if err != nil {
			return nil, "", "", err
		}
		r.DeployKeyPublic = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " sandboxd-" + r.ID
		r.DeployKeySealed = s.cfg.Sealer.Seal(string(pem.EncodeToMemory(block)), r.ID+"/deploy-key")
	}
	secret := in.WebhookSecret
	if secret == "" {
		secret = repospec.NewWebhookSecret()
	}
	r.WebhookSecretSealed = s.cfg.Sealer.Seal(secret, r.ID+"/webhook")
	if _, err := commit.Apply(ctx, s.cfg.Raft, in.Answer, fsm.CreateRepository{Repository: r}, r); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, "", "", apierr.NotFound(apierr.CodeSiteNotFound, "site")
		}
		return nil, "", "", err
	}
	return &r, s.WebhookURL(r.ID, secret), secret, nil
}

// WebhookURL is where a repository's push webhook posts: its id and its
// secret (also the key the providers sign with).
func (s *Service) WebhookURL(id, secret string) string {
	return strings.TrimRight(s.cfg.PublicURL, "/") + "/hooks/git/" + id + "/" + secret
}

// Update changes a repository's branch, folder or auto-deploy.
func (s *Service) Update(ctx context.Context, site *state.Site, id string, p repospec.Patch) (*state.Repository, error) {
	r, err := s.Get(site, id)
	if err != nil {
		return nil, err
	}
	next := *r
	if p.Branch != nil {
		if err := gitsource.CheckBranch(*p.Branch); err != nil {
			return nil, apierr.Invalid("branch", "%q is not a branch name git accepts", *p.Branch)
		}
		next.Branch = *p.Branch
	}
	if p.FolderName != nil {
		if r.Destination == repospec.DestWPContent {
			return nil, apierr.Invalid("folderName", "a wp-content repository has no folder")
		}
		if !folderRE.MatchString(*p.FolderName) {
			return nil, apierr.Invalid("folderName", "folderName is 1 to 100 of A-Z a-z 0-9 . _ - and does not start with . or -")
		}
		next.FolderName = *p.FolderName
	}
	if p.AutoDeploy != nil {
		next.AutoDeploy = *p.AutoDeploy
	}
	next.UpdatedAt = s.now()
	if _, err := s.cfg.Raft.Apply(ctx, fsm.PutRepository{Repository: next, IfUpdatedAt: r.UpdatedAt}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return &next, nil
}

// Disconnect removes a repository; what it deployed stays in the site.
func (s *Service) Disconnect(ctx context.Context, site *state.Site, id string) error {
	if _, err := s.Get(site, id); err != nil {
		return err
	}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.DeleteRepository{ID: id}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return notFound()
		}
		return err
	}
	return nil
}

// Deploy queues a deploy of the repository's branch as it is now.
func (s *Service) Deploy(ctx context.Context, ans *writes.Answer[sitespec.Made], site *state.Site, id string) (string, error) {
	if _, err := s.Get(site, id); err != nil {
		return "", err
	}
	if site.Status != state.SiteReady || site.Move != nil {
		return "", sitespec.NotReady(site)
	}
	job, err := jobs.New(jobspec.GitDeploy, site.WorkspaceID, site.ID, jobspec.GitDeployPayload{RepositoryID: id, Trigger: "manual"}, s.now())
	if err != nil {
		return "", err
	}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.CreateJob{Job: job}, sitespec.Made{Site: *site, JobID: job.ID}); err != nil {
		return "", err
	}
	return job.ID, nil
}

// Secrets opens a repository's token and deploy key for the deploy job.
func (s *Service) Secrets(r *state.Repository) (token string, key []byte, err error) {
	if len(r.TokenSealed) > 0 {
		if token, err = s.cfg.Sealer.Open(r.TokenSealed, r.ID+"/token"); err != nil {
			return "", nil, fmt.Errorf("open the token of %s: %w", r.ID, err)
		}
	}
	if len(r.DeployKeySealed) > 0 {
		k, err := s.cfg.Sealer.Open(r.DeployKeySealed, r.ID+"/deploy-key")
		if err != nil {
			return "", nil, fmt.Errorf("open the deploy key of %s: %w", r.ID, err)
		}
		key = []byte(k)
	}
	return token, key, nil
}

// PushResult is the answer to a push webhook.
type PushResult struct {
	// JobID is the deploy the push queued; "" when it queued none.
	JobID string `json:"jobId,omitempty"`
	// Ignored says why nothing was deployed.
	Ignored string `json:"ignored,omitempty"`
}

// Push takes a push webhook delivery for repository id, whose URL held
// secret. It deploys when the delivery is proven (the URL's secret and
// the provider's signature or token, compared in constant time), is a
// push to the repository's branch, auto-deploy is on, the commit is not
// deployed already, and the delivery was not taken before (a replay).
func (s *Service) Push(ctx context.Context, id, secret string, h http.Header, body []byte) (*PushResult, error) {
	r, err := s.cfg.Store.Repository(id)
	if err != nil {
		return nil, err
	}
	// An unknown repository and a wrong secret answer alike.
	refuse := apierr.NotFound("not_found", "webhook")
	if r == nil {
		return nil, refuse
	}
	want, err := s.cfg.Sealer.Open(r.WebhookSecretSealed, r.ID+"/webhook")
	if err != nil {
		return nil, err
	}
	if subtle.ConstantTimeCompare([]byte(secret), []byte(want)) != 1 {
		return nil, refuse
	}
	ev, err := gitpush.Parse(h, body, []byte(want))
	switch {
	case errors.Is(err, gitpush.ErrSignature):
		return nil, apierr.New(http.StatusUnauthorized, "invalid_signature", "the delivery's signature (X-Hub-Signature-256, X-Gitea-Signature) or token (X-Gitlab-Token) does not match this webhook's secret")
	case err != nil:
		return nil, apierr.Invalid("", "%v", err)
	}
	switch {
	case ev.Kind == gitpush.KindPing:
		return &PushResult{Ignored: "ping: the webhook is set up"}, nil
	case ev.Kind != gitpush.KindPush:
		return &PushResult{Ignored: "a " + ev.Kind + " event deploys nothing"}, nil
	case ev.Branch == "":
		return &PushResult{Ignored: "a push of " + ev.Ref + ", not of a branch"}, nil
	case ev.Branch != r.Branch:
		return &PushResult{Ignored: "a push to " + ev.Branch + "; this repository deploys " + r.Branch}, nil
	case ev.Deleted:
		return &PushResult{Ignored: "the branch was deleted"}, nil
	case !r.AutoDeploy:
		return &PushResult{Ignored: "autoDeploy is off"}, nil
	case ev.After != "" && ev.After == r.LastDeployedSHA:
		return &PushResult{Ignored: "commit " + ev.After + " is deployed already"}, nil
	}
	site, err := s.cfg.Store.Site(r.SiteID)
	if err != nil {
		return nil, err
	}
	if site == nil || site.Status != state.SiteReady || site.Move != nil {
		return &PushResult{Ignored: "the site is not ready"}, nil
	}
	delivery := ev.DeliveryID
	if delivery == "" {
		delivery = "sha:" + ev.After
	}
	job, err := jobs.New(jobspec.GitDeploy, site.WorkspaceID, site.ID,
		jobspec.GitDeployPayload{RepositoryID: r.ID, Trigger: "push", SHA: ev.After, DeliveryID: ev.DeliveryID}, s.now())
	if err != nil {
		return nil, err
	}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.TakePush{ID: r.ID, Delivery: ev.Provider + ":" + delivery, Job: job}); err != nil {
		if errors.Is(err, state.ErrConflict) {
			return &PushResult{Ignored: "delivery " + delivery + " was taken already (a replay)"}, nil
		}
		return nil, err
	}
	return &PushResult{JobID: job.ID}, nil
}

// Host is the host a repository URL names, for the address guard.
func Host(raw string) (string, error) {
	r, err := gitsource.Parse(raw, nil)
	if err != nil {
		return "", err
	}
	return r.Host, nil
}
