package api

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/memberspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/pki"
)

// Members is what the operator routes need of the fleet's credentials.
type Members interface {
	IsOperator(token string) bool
	CAFingerprint() (string, error)
	CreateJoinToken(ctx context.Context, o memberspec.JoinTokenOptions) (string, *state.JoinToken, error)
	RevokeJoinToken(ctx context.Context, id string) error
	CreateOperatorToken(ctx context.Context, ans *writes.Answer[state.OperatorToken], name, secret string) (string, *state.OperatorToken, error)
	RevokeOperatorToken(ctx context.Context, id string) error
	RevokeMember(ctx context.Context, id string) error
}

// CreateJoinTokenRequest asks for a single-use join token.
type CreateJoinTokenRequest struct {
	Role        string `json:"role" enum:"@memberRole"`
	Name        string `json:"name,omitempty" doc:"When set, the only member name the token joins (an agent's node id, an edge's or server's id)."`
	TTLMinutes  int    `json:"ttlMinutes,omitempty" doc:"1..43200; default 1440 (a day)."`
	Description string `json:"description,omitempty"`
}

// JoinTokenView is a join token without its secret.
type JoinTokenView struct {
	ID          string     `json:"id"`
	Role        string     `json:"role"`
	Name        *string    `json:"name"`
	Description *string    `json:"description"`
	CreatedAt   time.Time  `json:"createdAt"`
	ExpiresAt   time.Time  `json:"expiresAt"`
	UsedAt      *time.Time `json:"usedAt"`
	UsedBy      *string    `json:"usedBy"`
	RevokedAt   *time.Time `json:"revokedAt"`
}

func joinTokenView(j *state.JoinToken) JoinTokenView {
	return JoinTokenView{ID: j.ID, Role: j.Role, Name: optional(j.Name), Description: optional(j.Description), CreatedAt: j.CreatedAt,
		ExpiresAt: j.ExpiresAt, UsedAt: j.UsedAt, UsedBy: optional(j.UsedBy), RevokedAt: j.RevokedAt}
}

type joinTokenCreated struct {
	JoinToken JoinTokenView `json:"joinToken"`
	// Token is the secret, shown once: give it to the new member.
	Token string `json:"token"`
}

type joinTokensResponse struct {
	JoinTokens []JoinTokenView `json:"joinTokens"`
}

// CreateOperatorTokenRequest names a new operator token.
type CreateOperatorTokenRequest struct {
	Name string `json:"name"`
}

// OperatorTokenView is an operator token without its secret.
type OperatorTokenView struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
}

type operatorTokenCreated struct {
	OperatorToken OperatorTokenView `json:"operatorToken"`
	Token         string            `json:"token"`
}

type operatorTokensResponse struct {
	OperatorTokens []OperatorTokenView `json:"operatorTokens"`
}

type clusterMembersResponse struct {
	Members []state.ClusterMember `json:"members"`
}

// memberRoutes are the fleet's credentials, nodes, drains and snapshots.
type memberRoutes struct {
	*base
	members Members
	fleet   Fleet
}

func (a memberRoutes) register(r *rest.Router) {
	a.operator(r, rest.Route{Method: "POST", Path: "/api/admin/join-tokens", Status: http.StatusCreated, Idempotent: true,
		Summary: "Make a single-use token a new agent, edge or server joins the cluster with; the secret is returned once.",
		Request: CreateJoinTokenRequest{}, Response: joinTokenCreated{}, Errors: []string{apierr.CodeInvalidRequest},
		Handler: a.createJoinToken})
	a.operator(r, rest.Route{Method: "GET", Path: "/api/admin/join-tokens", Summary: "List join tokens (never their secrets).",
		Response: joinTokensResponse{}, Handler: a.listJoinTokens})
	a.operator(r, rest.Route{Method: "DELETE", Path: "/api/admin/join-tokens/{id}", Params: map[string]string{"id": "join token"},
		Summary: "Revoke a join token: it can no longer be used.", Response: deletedResponse{}, Errors: []string{apierr.CodeNotFound},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			if err := a.members.RevokeJoinToken(req.Context(), req.PathValue("id")); err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
		}})
	a.operator(r, rest.Route{Method: "POST", Path: "/api/admin/operator-tokens", Status: http.StatusCreated, Idempotent: true,
		Summary: "Make an operator token; the secret is returned once.", Request: CreateOperatorTokenRequest{},
		Response: operatorTokenCreated{}, Errors: []string{apierr.CodeInvalidRequest}, Handler: a.createOperatorToken})
	a.operator(r, rest.Route{Method: "GET", Path: "/api/admin/operator-tokens", Summary: "List operator tokens (never their secrets).",
		Response: operatorTokensResponse{}, Handler: a.listOperatorTokens})
	a.operator(r, rest.Route{Method: "DELETE", Path: "/api/admin/operator-tokens/{id}", Params: map[string]string{"id": "operator token"},
		Summary: "Revoke an operator token.", Response: deletedResponse{}, Errors: []string{apierr.CodeNotFound},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			if err := a.members.RevokeOperatorToken(req.Context(), req.PathValue("id")); err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
		}})
	a.operator(r, rest.Route{Method: "GET", Path: "/api/admin/members", Summary: "The cluster's servers, agents and edges and their certificates.",
		Response: clusterMembersResponse{}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			ms, err := a.store.ClusterMembers()
			if err != nil {
				return err
			}
			out := make([]state.ClusterMember, 0, len(ms))
			for _, m := range ms {
				out = append(out, *m)
			}
			return rest.JSON(w, http.StatusOK, clusterMembersResponse{Members: out})
		}})
	a.operator(r, rest.Route{Method: "DELETE", Path: "/api/admin/members/{role}/{name}", Params: map[string]string{"role": "member role", "name": "member"},
		Summary:  "Revoke a member: its certificates are refused at once; it can come back only with a new join token.",
		Response: deletedResponse{}, Errors: []string{apierr.CodeNotFound, apierr.CodeInvalidRequest},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			if err := a.members.RevokeMember(req.Context(), req.PathValue("role")+"/"+req.PathValue("name")); err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
		}})
}

func (a memberRoutes) createJoinToken(w http.ResponseWriter, req *http.Request) error {
	var body CreateJoinTokenRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	if body.TTLMinutes < 0 || body.TTLMinutes > 43200 {
		return apierr.Invalid("ttlMinutes", "ttlMinutes must be 1..43200")
	}
	// The secret is made here so that the answer kept for a replay shows
	// it.
	sec := memberspec.NewJoinSecret()
	fp, err := a.members.CAFingerprint()
	if err != nil {
		return err
	}
	ans := answer(a.base, req, http.StatusCreated, func(t state.JoinToken) any {
		return joinTokenCreated{JoinToken: joinTokenView(&t), Token: memberspec.FormatJoinToken(fp, t.ID, sec)}
	})
	_, _, err = a.members.CreateJoinToken(req.Context(), memberspec.JoinTokenOptions{Role: pki.Role(body.Role), Name: body.Name,
		TTL: time.Duration(body.TTLMinutes) * time.Minute, Description: body.Description, Secret: sec, Answer: ans})
	return respond(a.base, w, req, ans, err)
}

func (a memberRoutes) listJoinTokens(w http.ResponseWriter, req *http.Request) error {
	ts, err := a.store.JoinTokens()
	if err != nil {
		return err
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].CreatedAt.Before(ts[j].CreatedAt) })
	out := make([]JoinTokenView, 0, len(ts))
	for _, t := range ts {
		out = append(out, joinTokenView(t))
	}
	return rest.JSON(w, http.StatusOK, joinTokensResponse{JoinTokens: out})
}

func (a memberRoutes) createOperatorToken(w http.ResponseWriter, req *http.Request) error {
	var body CreateOperatorTokenRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	tok := memberspec.NewOperatorSecret()
	ans := answer(a.base, req, http.StatusCreated, func(rec state.OperatorToken) any {
		return operatorTokenCreated{OperatorToken: OperatorTokenView{ID: rec.ID, Name: rec.Name, CreatedAt: rec.CreatedAt}, Token: tok}
	})
	_, _, err := a.members.CreateOperatorToken(req.Context(), ans, body.Name, tok)
	return respond(a.base, w, req, ans, err)
}

func (a memberRoutes) listOperatorTokens(w http.ResponseWriter, req *http.Request) error {
	ts, err := a.store.OperatorTokens()
	if err != nil {
		return err
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].CreatedAt.Before(ts[j].CreatedAt) })
	out := make([]OperatorTokenView, 0, len(ts))
	for _, t := range ts {
		out = append(out, OperatorTokenView{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt})
	}
	return rest.JSON(w, http.StatusOK, operatorTokensResponse{OperatorTokens: out})
}

// NodeView is a node agent as operators see it.
type NodeView struct {
	ID          string            `json:"id"`
	Status      string            `json:"status" enum:"@nodeStatus"`
	Address     string            `json:"address"`
	IngressAddr string            `json:"ingressAddr"`
	Version     string            `json:"version"`
	PHPVersions []string          `json:"phpVersions"`
	Labels      map[string]string `json:"labels"`
	Sites       int               `json:"sites"`
	MaxSites    int               `json:"maxSites"`
	// Draining nodes take no new sites; their sites are being moved.
	Draining bool `json:"draining"`
	// Sleep is the node's running sites by how they sleep, as it last
	// reported.
	Sleep        NodeSleepView `json:"sleep"`
	RegisteredAt time.Time     `json:"registeredAt"`
	UpdatedAt    time.Time     `json:"updatedAt"`
}

// NodeSleepView counts a node's running sites by depth, with the host
// memory the awake and dozing ones hold.
type NodeSleepView struct {
	Awake             int   `json:"awake"`
	Dozing            int   `json:"dozing"`
	Asleep            int   `json:"asleep"`
	AwakeMemoryBytes  int64 `json:"awakeMemoryBytes"`
	DozingMemoryBytes int64 `json:"dozingMemoryBytes"`
}

// nodeView is a node as operators see it: labels and PHP versions are
// an object and a list, as documented, also when the node has none (a
// nil map or slice would be sent as null).
func nodeView(n *state.Node, sites int) NodeView {
	labels := n.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	php := n.PHPVersions
	if php == nil {
		php = []string{}
	}
	return NodeView{ID: n.ID, Status: n.Status, Address: n.Address, IngressAddr: n.IngressAddr, Version: n.Version,
		PHPVersions: php, Labels: labels, Sites: sites, MaxSites: n.MaxSites, Draining: n.Drain != nil, Sleep: NodeSleepView(n.Sleep),
		RegisteredAt: n.RegisteredAt, UpdatedAt: n.UpdatedAt}
}

type nodesResponse struct {
	Nodes []NodeView `json:"nodes"`
}

func (a memberRoutes) registerNodes(r *rest.Router) {
	a.operator(r, rest.Route{Method: "GET", Path: "/api/admin/nodes", Summary: "Node agents, their status and how many sites each holds.",
		Response: nodesResponse{}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			ns, err := a.store.Nodes()
			if err != nil {
				return err
			}
			out := make([]NodeView, 0, len(ns))
			for _, n := range ns {
				sites, err := a.store.SitesOnNode(n.ID)
				if err != nil {
					return err
				}
				out = append(out, nodeView(n, len(sites)))
			}
			sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
			return rest.JSON(w, http.StatusOK, nodesResponse{Nodes: out})
		}})
}

// SnapshotView is a site's snapshot as operators see it.
type SnapshotView struct {
	ID            string    `json:"id"`
	SiteID        string    `json:"siteId"`
	NodeID        string    `json:"nodeId"`
	FilesBytes    int64     `json:"filesBytes"`
	DatabaseBytes int64     `json:"databaseBytes"`
	Reason        string    `json:"reason"`
	TakenAt       time.Time `json:"takenAt"`
}

type snapshotsResponse struct {
	Snapshots []SnapshotView `json:"snapshots"`
}

type jobOnlyResponse struct {
	JobID string `json:"jobId"`
}

// DrainView is a node's drain and how each of its moves went.
type DrainView struct {
	NodeID    string             `json:"nodeId"`
	StartedAt time.Time          `json:"startedAt"`
	Remaining int                `json:"remaining" doc:"Sites still on the node."`
	Moves     []state.MoveReport `json:"moves"`
}

type drainResponse struct {
	Drain DrainView `json:"drain"`
}

func (a memberRoutes) registerFleet(r *rest.Router) {
	// Not in the contract: an operator's tool, never a tenant's.
	a.operator(r, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/snapshot", Status: http.StatusAccepted, Params: map[string]string{"id": "site"}, Idempotent: true,
		Summary: "Take a snapshot of a running site now (its files and database to the blob store).", Response: jobOnlyResponse{},
		Errors: []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}, Handler: a.snapshotSite})
	a.operator(r, rest.Route{Method: "GET", Path: "/api/admin/sites/{id}/snapshots", Params: map[string]string{"id": "site"},
		Summary: "A site's snapshots, newest first.", Response: snapshotsResponse{}, Errors: []string{apierr.CodeSiteNotFound},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			s, err := a.store.Site(req.PathValue("id"))
			if err != nil {
				return err
			}
			if s == nil {
				return apierr.NotFound(apierr.CodeSiteNotFound, "site")
			}
			list, err := a.store.Snapshots(s.ID)
			if err != nil {
				return err
			}
			out := make([]SnapshotView, 0, len(list))
			for _, sn := range list {
				out = append(out, SnapshotView{ID: sn.ID, SiteID: sn.SiteID, NodeID: sn.NodeID, FilesBytes: sn.FilesBytes,
					DatabaseBytes: sn.DatabaseBytes, Reason: sn.Reason, TakenAt: sn.TakenAt})
			}
			return rest.JSON(w, http.StatusOK, snapshotsResponse{Snapshots: out})
		}})
	a.operator(r, rest.Route{Method: "POST", Path: "/api/admin/nodes/{id}/drain", Params: map[string]string{"id": "node"},
		Summary:  "Drain a node: it takes no new sites, and each of its sites is moved to another node with its id, URL and data.",
		Response: drainResponse{}, Errors: []string{apierr.CodeNotFound}, Handler: a.drain(true)})
	a.operator(r, rest.Route{Method: "GET", Path: "/api/admin/nodes/{id}/drain", Params: map[string]string{"id": "node"},
		Summary: "How a node's drain is going: each move, its downtime.", Response: drainResponse{}, Errors: []string{apierr.CodeNotFound},
		Handler: a.drainStatus})
	a.operator(r, rest.Route{Method: "DELETE", Path: "/api/admin/nodes/{id}/drain", Params: map[string]string{"id": "node"},
		Summary: "Stop draining a node: it takes sites again (moves under way finish).", Response: deletedResponse{},
		Errors: []string{apierr.CodeNotFound}, Handler: a.drain(false)})
}

func (a memberRoutes) snapshotSite(w http.ResponseWriter, req *http.Request) error {
	ans := answer(a.base, req, http.StatusAccepted, func(m sitespec.Made) any { return jobOnlyResponse{JobID: m.JobID} })
	_, err := a.fleet.Snapshot(req.Context(), ans, req.PathValue("id"))
	return respond(a.base, w, req, ans, err)
}

func (a memberRoutes) drain(on bool) rest.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) error {
		if err := a.fleet.Drain(req.Context(), req.PathValue("id"), on); err != nil {
			return writeError("", err)
		}
		if !on {
			return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
		}
		return a.drainStatus(w, req)
	}
}

func (a memberRoutes) drainStatus(w http.ResponseWriter, req *http.Request) error {
	n, err := a.store.Node(req.PathValue("id"))
	if err != nil {
		return err
	}
	if n == nil {
		return apierr.NotFound(apierr.CodeNotFound, "node")
	}
	if n.Drain == nil {
		return apierr.NotFound(apierr.CodeNotFound, "drain")
	}
	sites, err := a.store.SitesOnNode(n.ID)
	if err != nil {
		return err
	}
	remaining := 0
	for _, s := range sites {
		if s.Pool == "" {
			remaining++
		}
	}
	return rest.JSON(w, http.StatusOK, drainResponse{Drain: DrainView{NodeID: n.ID, StartedAt: n.Drain.StartedAt, Remaining: remaining,
		Moves: append([]state.MoveReport{}, n.Drain.Moves...)}})
}
