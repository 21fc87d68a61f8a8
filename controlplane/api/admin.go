package api

import (
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/accountspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sealingspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// CreateAccountRequest is the operator's body to create an account.
type CreateAccountRequest struct {
	Email string `json:"email"`
	Plan  string `json:"plan" enum:"@plan"`
}

// SetPlanRequest changes an account's plan.
type SetPlanRequest struct {
	Plan string `json:"plan" enum:"@plan"`
}

// AdminTokenRequest asks for a token for the account with Email.
type AdminTokenRequest struct {
	Email string `json:"email"`
	Name  string `json:"name,omitempty"`
}

type usersResponse struct {
	Users []User `json:"users"`
}

type outboxResponse struct {
	Mails []state.Mail `json:"mails"`
}

type clusterResponse struct {
	Cluster ClusterStatus `json:"cluster"`
}

// ClusterStatus is the Raft cluster as the answering server sees it,
// with each server's own view (asked over the cluster port).
type ClusterStatus struct {
	NodeID       string `json:"nodeId" doc:"The server that answered."`
	State        string `json:"state" doc:"Its Raft state: Leader, Follower or Candidate."`
	LeaderID     string `json:"leaderId" doc:"The leader's id; empty during an election."`
	LeaderAPI    string `json:"leaderApi" doc:"The leader's API URL."`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"appliedIndex"`
	// Servers is the Raft configuration, each with what it says of itself.
	Servers []ClusterServer    `json:"servers"`
	Sealing sealingspec.Status `json:"sealing" doc:"The answering server's sealing key ids."`
}

// ClusterServer is one server of the Raft configuration.
type ClusterServer struct {
	ID          string `json:"id"`
	RaftAddr    string `json:"raftAddr"`
	APIAddr     string `json:"apiAddr,omitempty"`
	ClusterAddr string `json:"clusterAddr,omitempty"`
	Voter       bool   `json:"voter"`
	Leader      bool   `json:"leader"`
	// Status is what the server says of itself; nil when it did not answer.
	Status *RaftStatus `json:"status,omitempty"`
	Error  string      `json:"error,omitempty" doc:"Why the server could not be asked."`
}

// RaftStatus is one server's own view of Raft, what an operator compares
// across servers to find one that lags or lost its leader.
type RaftStatus struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"appliedIndex"`
	LeaderID     string `json:"leaderId,omitempty"`
	// LastContactSeconds is how long ago it last heard from the leader,
	// by its own clock; absent on the leader and before any contact.
	LastContactSeconds *float64 `json:"lastContactSeconds,omitempty"`
}

// RaftStatusPath is where a server asks another for its RaftStatus.
const RaftStatusPath = "/internal/raft/status"

// adminRoutes are the operator's accounts, outbox and Raft cluster.
type adminRoutes struct {
	*base
	accounts Accounts
	fleet    Fleet
	cluster  ClusterView
}

func (a adminRoutes) register(r *rest.Router) {
	a.operator(r, rest.Route{Method: "POST", Path: "/api/admin/accounts", Status: http.StatusCreated,
		Summary: "Create an account with its personal workspace.", Request: CreateAccountRequest{}, Response: userResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodeConflict}, Handler: a.adminCreateAccount})
	a.operator(r, rest.Route{Method: "GET", Path: "/api/admin/accounts", Summary: "List accounts.",
		Response: usersResponse{}, Handler: a.adminListAccounts})
	a.operator(r, rest.Route{Method: "PUT", Path: "/api/admin/accounts/{email}/plan", Summary: "Set an account's plan.",
		Params: map[string]string{"email": "account email"}, Request: SetPlanRequest{}, Response: userResponse{},
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodeAccountNotFound}, Handler: a.adminSetPlan})
	a.operator(r, rest.Route{Method: "POST", Path: "/api/admin/tokens", Status: http.StatusCreated,
		Summary: "Create a personal API token for an account; the secret is returned once.",
		Request: AdminTokenRequest{}, Response: CreateTokenResponse{}, Idempotent: true,
		Errors: []string{apierr.CodeInvalidRequest, apierr.CodeAccountNotFound}, Handler: a.adminCreateToken})
	a.operator(r, rest.Route{Method: "GET", Path: "/api/admin/outbox", Summary: "Mail kept when no SMTP server is configured.",
		Response: outboxResponse{}, Handler: a.adminOutbox})
	a.operator(r, rest.Route{Method: "GET", Path: "/api/admin/cluster", Summary: "Raft servers, leader and state.",
		Response: clusterResponse{}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			return rest.JSON(w, http.StatusOK, clusterResponse{Cluster: a.cluster.Cluster(req.Context())})
		}})
	a.internal(r, rest.Route{Method: "GET", Path: RaftStatusPath, Summary: "This server's own view of Raft.",
		Response: RaftStatus{}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			return rest.JSON(w, http.StatusOK, a.cluster.Local())
		}})
	a.operator(r, rest.Route{Method: "DELETE", Path: "/api/admin/cluster/servers/{id}",
		Summary: "Remove a server (for example a dead one) from the Raft cluster.", Params: map[string]string{"id": "server"},
		Response: deletedResponse{}, Errors: []string{apierr.CodeNotFound}, Handler: a.leave})
}

func (a adminRoutes) adminCreateAccount(w http.ResponseWriter, req *http.Request) error {
	var body CreateAccountRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusCreated, func(acct state.Account) any { return userResponse{User: userView(&acct)} })
	_, err := a.accounts.Create(req.Context(), ans, body.Email, body.Plan)
	return respond(a.base, w, req, ans, err)
}

func (a adminRoutes) adminListAccounts(w http.ResponseWriter, req *http.Request) error {
	accts, err := a.store.Accounts()
	if err != nil {
		return err
	}
	out := make([]User, 0, len(accts))
	for _, ac := range accts {
		out = append(out, userView(ac))
	}
	return rest.JSON(w, http.StatusOK, usersResponse{Users: out})
}

func (a adminRoutes) adminSetPlan(w http.ResponseWriter, req *http.Request) error {
	var body SetPlanRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	acct, err := a.accounts.SetPlan(req.Context(), req.PathValue("email"), body.Plan)
	if err != nil {
		return writeError("", err)
	}
	return rest.JSON(w, http.StatusOK, userResponse{User: userView(acct)})
}

func (a adminRoutes) adminCreateToken(w http.ResponseWriter, req *http.Request) error {
	var body AdminTokenRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusCreated, func(m accountspec.TokenMade) any {
		return CreateTokenResponse{Token: tokenView(&m.Token, "", ""), Secret: m.Secret}
	})
	_, err := a.accounts.OperatorToken(req.Context(), ans, body.Email, body.Name)
	return respond(a.base, w, req, ans, err)
}

func (a adminRoutes) adminOutbox(w http.ResponseWriter, req *http.Request) error {
	ms, err := a.store.Outbox()
	if err != nil {
		return err
	}
	out := make([]state.Mail, 0, len(ms))
	for _, m := range ms {
		out = append(out, *m)
	}
	return rest.JSON(w, http.StatusOK, outboxResponse{Mails: out})
}

func (a adminRoutes) leave(w http.ResponseWriter, req *http.Request) error {
	if err := a.fleet.RemoveServer(req.Context(), req.PathValue("id")); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
}
