package api

import (
	"context"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/repospec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Repositories is what the Git deploy routes need from the repos service.
type Repositories interface {
	List(site *state.Site) ([]*state.Repository, error)
	Connect(ctx context.Context, site *state.Site, by *state.Account, in repospec.Connect) (*state.Repository, string, string, error)
	Update(ctx context.Context, site *state.Site, id string, p repospec.Patch) (*state.Repository, error)
	Disconnect(ctx context.Context, site *state.Site, id string) error
	Deploy(ctx context.Context, ans *writes.Answer[sitespec.Made], site *state.Site, id string) (string, error)
	WebhookURL(id, secret string) string
}

// RepositoryView is the contract's connected repository (owner-facing
// view: no secret).
type RepositoryView struct {
	ID          string `json:"id"`
	SiteID      string `json:"siteId"`
	RepoURL     string `json:"repoUrl" doc:"Fixed after connecting."`
	Branch      string `json:"branch"`
	Destination string `json:"destination" enum:"@repoDestination" doc:"Fixed after connecting. plugin and theme go to wp-content/plugins/<folderName> and wp-content/themes/<folderName>; wp-content puts each top-level entry of the repository over wp-content's (uploads/ is never replaced)."`
	FolderName  string `json:"folderName" doc:"Empty for wp-content."`
	AuthKind    string `json:"authKind" enum:"@repoAuthKind"`
	// DeployKeyPublic is the deploy key to add to the repository (read
	// access) for ssh; null for https.
	DeployKeyPublic *string    `json:"deployKeyPublic"`
	HasToken        bool       `json:"hasToken" doc:"Whether an https token is stored (sealed; never returned)."`
	AutoDeploy      bool       `json:"autoDeploy" doc:"Deploy on every verified push to branch."`
	LastDeployedSHA *string    `json:"lastDeployedSha"`
	LastDeployedAt  *time.Time `json:"lastDeployedAt"`
	CreatedAt       time.Time  `json:"createdAt"`
	UpdatedAt       time.Time  `json:"updatedAt"`
}

func repositoryView(r *state.Repository) RepositoryView {
	return RepositoryView{ID: r.ID, SiteID: r.SiteID, RepoURL: r.RepoURL, Branch: r.Branch, Destination: r.Destination,
		FolderName: r.FolderName, AuthKind: r.AuthKind, DeployKeyPublic: optional(r.DeployKeyPublic), HasToken: len(r.TokenSealed) > 0,
		AutoDeploy: r.AutoDeploy, LastDeployedSHA: optional(r.LastDeployedSHA), LastDeployedAt: r.LastDeployedAt,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

// ConnectRepositoryRequest is the body of POST /api/app/sites/{id}/repositories.
type ConnectRepositoryRequest struct {
	RepoURL     string `json:"repoUrl" doc:"https://host/owner/repo(.git), ssh://git@host[:port]/owner/repo.git or git@host:owner/repo.git. Its host must not be a private address."`
	Branch      string `json:"branch,omitempty" doc:"Default main."`
	Destination string `json:"destination" enum:"@repoDestination"`
	FolderName  string `json:"folderName,omitempty" doc:"For plugin and theme: the directory name; default the repository's name."`
	AuthKind    string `json:"authKind,omitempty" enum:"@repoAuthKind" doc:"Default https. ssh makes an ed25519 deploy key for this repository (its public half in deployKeyPublic)."`
	Token       string `json:"token,omitempty" doc:"For a private https repository: an access token with read access (sealed at rest, never returned)."`
	AutoDeploy  *bool  `json:"autoDeploy,omitempty" doc:"Default true."`
}

// PatchRepositoryRequest is the body of PATCH …/repositories/{repoId}:
// any other field is refused (disconnect and reconnect to change it).
type PatchRepositoryRequest struct {
	Branch     *string `json:"branch,omitempty"`
	FolderName *string `json:"folderName,omitempty"`
	AutoDeploy *bool   `json:"autoDeploy,omitempty"`
}

type repositoryResponse struct {
	Repository RepositoryView `json:"repository"`
}

type repositoriesResponse struct {
	Repositories []RepositoryView `json:"repositories"`
}

type connectRepositoryResponse struct {
	Repository RepositoryView `json:"repository"`
	WebhookURL string         `json:"webhookUrl" doc:"The push webhook's URL, which holds its secret: shown only here. Add it to the repository's webhooks (push events, JSON)."`
	// WebhookSecret is the same secret for the providers' own secret
	// field (GitHub and Gitea sign with it; GitLab sends it as its token).
	WebhookSecret string `json:"webhookSecret"`
}

type deployJobResponse struct {
	JobID string `json:"jobId"`
}

var repoParams = map[string]string{"id": "site", "repoId": "repository"}

// repositoryRoutes are a site's connected Git repositories.
type repositoryRoutes struct {
	*base
	repositories Repositories
}

func (a repositoryRoutes) register(r *rest.Router) {
	if a.repositories == nil {
		return
	}
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	const base = "/api/app/sites/{id}/repositories"
	notFound := []string{apierr.CodeSiteNotFound, repospec.CodeNotFound}
	a.bearer(r, g, rest.Route{Method: "GET", Path: base, Tag: "git", Params: siteParam, Response: repositoriesResponse{},
		Summary: "The site's connected Git repositories.", Errors: []string{apierr.CodeSiteNotFound},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			rs, err := a.repositories.List(s)
			if err != nil {
				return err
			}
			out := make([]RepositoryView, 0, len(rs))
			for _, r := range rs {
				out = append(out, repositoryView(r))
			}
			return rest.JSON(w, http.StatusOK, repositoriesResponse{Repositories: out})
		}})
	a.bearer(r, g, rest.Route{Method: "POST", Path: base, Tag: "git", Params: siteParam, Status: http.StatusCreated, Idempotent: true,
		Summary: "Connect a Git repository; deploy it by hand (…/deploy) or on every push (the webhook URL, shown once).",
		Request: ConnectRepositoryRequest{}, Response: connectRepositoryResponse{},
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}, Handler: a.connectRepository})
	a.bearer(r, g, rest.Route{Method: "PATCH", Path: base + "/{repoId}", Tag: "git", Params: repoParams,
		Summary: "Change branch, folderName or autoDeploy; any other field (repoUrl, destination, …) is 400 invalid_request naming it.",
		Request: PatchRepositoryRequest{}, Response: repositoryResponse{}, Errors: append([]string{apierr.CodeInvalidRequest, apierr.CodeConflict}, notFound...),
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			var body PatchRepositoryRequest
			if err := rest.DecodeJSON(req, &body); err != nil {
				return err
			}
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			rp, err := a.repositories.Update(req.Context(), s, req.PathValue("repoId"),
				repospec.Patch{Branch: body.Branch, FolderName: body.FolderName, AutoDeploy: body.AutoDeploy})
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, repositoryResponse{Repository: repositoryView(rp)})
		}})
	a.bearer(r, g, rest.Route{Method: "DELETE", Path: base + "/{repoId}", Tag: "git", Params: repoParams, Response: deletedResponse{},
		Summary: "Disconnect a repository: its webhook stops deploying; what it deployed stays in the site.", Errors: notFound,
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			if err := a.repositories.Disconnect(req.Context(), s, req.PathValue("repoId")); err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
		}})
	a.bearer(r, g, rest.Route{Method: "POST", Path: base + "/{repoId}/deploy", Tag: "git", Params: repoParams, Status: http.StatusAccepted, Idempotent: true,
		Summary: "Deploy the branch as it is now: a git_deploy job fetches it on the site's node (shallow, real git), checks the tree " +
			"(no links, submodules or paths out; at most 20,000 files and 256 MiB) and swaps it in; lastDeployedSha follows.",
		Response: deployJobResponse{}, Errors: append([]string{apierr.CodeInvalidRequest}, notFound...),
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.siteIn(req)
			if err != nil {
				return err
			}
			ans := answer(a.base, req, http.StatusAccepted, func(m sitespec.Made) any { return deployJobResponse{JobID: m.JobID} })
			_, err = a.repositories.Deploy(req.Context(), ans, s, req.PathValue("repoId"))
			return respond(a.base, w, req, ans, err)
		}})
}

func (a repositoryRoutes) connectRepository(w http.ResponseWriter, req *http.Request) error {
	var body ConnectRepositoryRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	c := CallerFrom(req.Context())
	// The secret is made here so that the answer kept for a replay shows
	// it.
	secret := repospec.NewWebhookSecret()
	ans := answer(a.base, req, http.StatusCreated, func(r state.Repository) any {
		return connectRepositoryResponse{Repository: repositoryView(&r), WebhookURL: a.repositories.WebhookURL(r.ID, secret), WebhookSecret: secret}
	})
	_, _, _, err = a.repositories.Connect(req.Context(), s, c.Account, repospec.Connect{RepoURL: body.RepoURL, Branch: body.Branch,
		Destination: body.Destination, FolderName: body.FolderName, AuthKind: body.AuthKind, Token: body.Token,
		AutoDeploy: body.AutoDeploy, WebhookSecret: secret, Answer: ans})
	return respond(a.base, w, req, ans, err)
}
