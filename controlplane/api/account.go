package api

import (
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/accountspec"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

type userResponse struct {
	User User `json:"user"`
}

type usageResponse struct {
	Usage Usage `json:"usage"`
}

type tokensResponse struct {
	Tokens []APIToken `json:"tokens"`
}

// CreateTokenRequest is the body of POST /api/account/tokens.
type CreateTokenRequest struct {
	Name          string `json:"name"`
	ExpiresInDays *int   `json:"expiresInDays,omitempty" doc:"1..3650; omit for a token that does not expire."`
}

// CreateTokenResponse carries the secret, shown this one time only.
type CreateTokenResponse struct {
	Token  APIToken `json:"token"`
	Secret string   `json:"secret"`
}

type deletedResponse struct {
	Deleted bool `json:"deleted"`
}

type invitationsResponse struct {
	Invitations []InvitationView `json:"invitations"`
}

type memberResponse struct {
	Member MemberView `json:"member"`
}

// accountRoutes are the caller's own account: tokens, usage, invitations.
type accountRoutes struct {
	*base
	accounts   Accounts
	workspaces Workspaces
	plans      plans.Config
}

func (a accountRoutes) register(r *rest.Router) {
	acct := guard{scope: scopeAccount}
	a.bearer(r, guard{scope: scopeAccount, oauthScope: anyScope}, rest.Route{Method: "GET", Path: "/api/account/me", Tag: "account",
		Summary: "The calling account's identity (also with a connector's scoped token).", Response: userResponse{},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			return rest.JSON(w, http.StatusOK, userResponse{User: userView(CallerFrom(req.Context()).Account)})
		}})
	a.bearer(r, acct, rest.Route{Method: "GET", Path: "/api/account/usage", Tag: "account",
		Summary: "Counts of what the account holds next to its plan's limits.", Response: usageResponse{},
		Handler: a.usage})
	a.bearer(r, acct, rest.Route{Method: "GET", Path: "/api/account/tokens", Tag: "account",
		Summary: "List the account's tokens, personal and those given to OAuth connectors (never their secrets).", Response: tokensResponse{},
		Handler: a.listTokens})
	a.bearer(r, acct, rest.Route{Method: "POST", Path: "/api/account/tokens", Tag: "account",
		Summary: "Create a personal API token; the secret is returned once.", Status: http.StatusCreated,
		Request: CreateTokenRequest{}, Response: CreateTokenResponse{}, Idempotent: true,
		Errors:  []string{apierr.CodeInvalidRequest, apierr.CodePlanLimitReached, apierr.CodePayloadTooLarge},
		Handler: a.createToken})
	a.bearer(r, acct, rest.Route{Method: "DELETE", Path: "/api/account/tokens/{id}", Tag: "account",
		Summary: "Revoke a personal API token; effective on every node once committed.",
		Params:  map[string]string{"id": "token"}, Response: deletedResponse{},
		Errors: []string{apierr.CodeTokenNotFound}, Handler: a.revokeToken})
	a.bearer(r, acct, rest.Route{Method: "GET", Path: "/api/account/invitations", Tag: "account",
		Summary: "Invitations addressed to the account's email.", Response: invitationsResponse{},
		Handler: a.myInvitations})
	a.bearer(r, acct, rest.Route{Method: "POST", Path: "/api/account/invitations/{id}/accept", Tag: "account",
		Summary: "Accept an invitation and join its workspace.",
		Params:  map[string]string{"id": "invitation"}, Response: memberResponse{},
		Errors:  []string{apierr.CodeInvitationNotFound, apierr.CodeConflict},
		Handler: a.acceptInvitation})
}

func (a accountRoutes) usage(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	owned, err := a.store.OwnedWorkspaces(c.Account.ID)
	if err != nil {
		return err
	}
	toks, err := a.store.TokensOf(c.Account.ID)
	if err != nil {
		return err
	}
	live, err := a.store.LiveSites(c.Account.ID)
	if err != nil {
		return err
	}
	keys, err := a.store.SSHKeys(c.Account.ID)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, usageResponse{Usage: Usage{
		Plan:   c.Account.Plan,
		Limits: a.plans.For(c.Account.Plan),
		Counts: map[string]int{plans.Workspaces: owned, plans.APITokens: len(toks), plans.Sites: live, plans.SSHKeys: len(keys)},
	}})
}

func (a accountRoutes) listTokens(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	toks, err := a.store.TokensOf(c.Account.ID)
	if err != nil {
		return err
	}
	out := make([]APIToken, 0, len(toks))
	for _, t := range toks {
		out = append(out, tokenView(t, c.Token.ID, c.Account.PersonalWorkspaceID))
	}
	return rest.JSON(w, http.StatusOK, tokensResponse{Tokens: out})
}

func (a accountRoutes) createToken(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	var body CreateTokenRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusCreated, func(m accountspec.TokenMade) any {
		return CreateTokenResponse{Token: tokenView(&m.Token, c.Token.ID, c.Account.PersonalWorkspaceID), Secret: m.Secret}
	})
	_, err := a.accounts.CreateToken(req.Context(), ans, c.Account, body.Name, body.ExpiresInDays)
	return respond(a.base, w, req, ans, err)
}

func (a accountRoutes) revokeToken(w http.ResponseWriter, req *http.Request) error {
	c := CallerFrom(req.Context())
	if err := a.accounts.RevokeToken(req.Context(), c.Account, req.PathValue("id")); err != nil {
		return writeError("", err)
	}
	return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
}

func (a accountRoutes) myInvitations(w http.ResponseWriter, req *http.Request) error {
	invs, err := a.store.InvitationsFor(CallerFrom(req.Context()).Account.Email)
	return a.invitationList(w, invs, err)
}

func (a accountRoutes) acceptInvitation(w http.ResponseWriter, req *http.Request) error {
	m, err := a.workspaces.Accept(req.Context(), CallerFrom(req.Context()).Account, req.PathValue("id"))
	if err != nil {
		return writeError("", err)
	}
	view, err := a.memberView(m)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, memberResponse{Member: view})
}
