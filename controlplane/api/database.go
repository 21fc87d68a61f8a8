package api

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/secret"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// DatabaseAccess is a site's own database: credentials that reach only it
// and a one-time link to a database UI signed in to it.
type DatabaseAccess struct {
	Host       string    `json:"host" doc:"As the site's node sees it; reach it through adminerUrl."`
	Port       int       `json:"port"`
	Name       string    `json:"name"`
	User       string    `json:"user"`
	Password   string    `json:"password"`
	AdminerURL string    `json:"adminerUrl" doc:"Opens Adminer signed in to this database; works once."`
	ExpiresAt  time.Time `json:"adminerUrlExpiresAt"`
}

type databaseResponse struct {
	Database DatabaseAccess `json:"database"`
}

// AdminerTTL is how long a database UI link stays valid if unused.
const AdminerTTL = 15 * time.Minute

func (a *API) registerDatabase(r *rest.Router) {
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/database", Tag: "sites", Params: siteParam,
		Summary:  "The site's database credentials and a one-time Adminer link signed in to that database only.",
		Response: databaseResponse{}, Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest},
		Handler: a.getDatabase})
}

func (a *API) getDatabase(w http.ResponseWriter, req *http.Request) error {
	s, agent, err := a.readyAgent(req)
	if err != nil {
		return err
	}
	db, err := agent.GetDatabase(req.Context(), connect.NewRequest(&agentv1.SiteRef{SiteId: s.ID}))
	if err != nil {
		return agentError(err)
	}
	token, hash := oneTimeToken()
	expires := a.now().Add(AdminerTTL)
	if _, err := agent.CreateAdminerLogin(req.Context(), connect.NewRequest(&agentv1.CreateLoginTokenRequest{
		SiteId: s.ID, TokenHash: hash, ExpiresUnix: expires.Unix()})); err != nil {
		return agentError(err)
	}
	d := db.Msg
	return rest.JSON(w, http.StatusOK, databaseResponse{Database: DatabaseAccess{Host: d.Host, Port: int(d.Port), Name: d.Name,
		User: d.User, Password: d.Password, AdminerURL: s.URL + "/__sandbox/adminer/?sandbox_token=" + token, ExpiresAt: expires}})
}

// oneTimeToken makes a link token and the SHA-256 (hex) the agent keeps:
// the agent never sees the token itself.
func oneTimeToken() (token, hash string) {
	token = secret.New("")
	sum := sha256.Sum256([]byte(token))
	return token, hex.EncodeToString(sum[:])
}
