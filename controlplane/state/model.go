package state

import (
	"encoding/json"
	"fmt"
	"time"
)

// Plans an account can be on.
const (
	PlanFree = "free"
	PlanPaid = "paid"
)

// Workspace member roles. A member's effective capabilities come from its
// custom role, or from the default member set when it has none.
const (
	RoleOwner  = "owner"
	RoleMember = "member"
)

// Account is a person who can hold tokens and join workspaces.
type Account struct {
	ID                  string    `json:"id"`
	Email               string    `json:"email"`
	Plan                string    `json:"plan"`
	PersonalWorkspaceID string    `json:"personalWorkspaceId"`
	CreatedAt           time.Time `json:"createdAt"`
	UpdatedAt           time.Time `json:"updatedAt"`
}

// Workspace scopes every customer resource.
type Workspace struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	OwnerID   string    `json:"ownerUserId"`
	Personal  bool      `json:"personal"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Member ties an account to a workspace.
type Member struct {
	WorkspaceID  string    `json:"workspaceId"`
	UserID       string    `json:"userId"`
	Role         string    `json:"role"`
	CustomRoleID string    `json:"customRoleId,omitempty"`
	JoinedAt     time.Time `json:"joinedAt"`
}

// Role is a workspace's custom role: a named set of capabilities.
type Role struct {
	ID           string    `json:"id"`
	WorkspaceID  string    `json:"workspaceId"`
	Name         string    `json:"name"`
	Capabilities []string  `json:"capabilities"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
}

// Token is a personal API token. Only the SHA-256 of its secret is kept.
type Token struct {
	ID        string     `json:"id"`
	UserID    string     `json:"userId"`
	Name      string     `json:"name"`
	Hash      string     `json:"hash"`
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Kind is TokenPersonal (empty in older entries) or TokenOAuth; an
	// OAuth token carries its client and the scopes it was granted, and
	// works only where those scopes do.
	Kind       string `json:"kind,omitempty"`
	Scope      string `json:"scope,omitempty"`
	ClientID   string `json:"clientId,omitempty"`
	ClientName string `json:"clientName,omitempty"`
	// WorkspaceID binds a scoped token to the one workspace chosen on
	// the consent page. Scoped tokens from before the binding have none:
	// they are bound to their account's personal workspace (Bound).
	WorkspaceID string `json:"workspaceId,omitempty"`
	// Resource is the audience an OAuth token was issued for (RFC 8707):
	// the one protected resource that accepts it (the MCP endpoint's URL
	// for scope mcp); empty for none in particular.
	Resource string `json:"resource,omitempty"`
}

// Scoped reports whether the token is limited to its scopes: an OAuth
// token granted ScopeAccount (a command-line login) is not.
func (t *Token) Scoped() bool { return t.Kind == TokenOAuth && t.Scope != ScopeAccount }

// Bound is the one workspace a scoped token reaches, given its
// account's personal workspace; empty for a token that is not scoped.
func (t *Token) Bound(personalWorkspaceID string) string {
	switch {
	case !t.Scoped():
		return ""
	case t.WorkspaceID != "":
		return t.WorkspaceID
	}
	return personalWorkspaceID
}

// Invitation statuses.
const (
	InvitationPending  = "pending"
	InvitationAccepted = "accepted"
	// InvitationExpired is never stored: a pending invitation past its
	// ExpiresAt reads as expired.
	InvitationExpired = "expired"
)

// Invitation asks an email address to join a workspace.
type Invitation struct {
	ID              string     `json:"id"`
	WorkspaceID     string     `json:"workspaceId"`
	Email           string     `json:"email"`
	CustomRoleID    string     `json:"customRoleId,omitempty"`
	InvitedByUserID string     `json:"invitedByUserId"`
	Status          string     `json:"status"`
	CreatedAt       time.Time  `json:"createdAt"`
	ExpiresAt       time.Time  `json:"expiresAt"`
	AcceptedAt      *time.Time `json:"acceptedAt,omitempty"`
}

// Job statuses.
const (
	JobQueued    = "queued"
	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobFailed    = "failed"
)

// JobError says why a job failed.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Details are the error's details when its code has some, as the
	// API's error envelope gives them: plan_limit_reached carries plan,
	// limit and resource (siteDiskMb when the site's disk, its files and
	// its database, is full).
	Details map[string]any `json:"details,omitempty" doc:"For plan_limit_reached: plan, limit and resource (siteDiskMb: the site's disk, which holds its files and its database, is full)."`
}

// Job is a slow operation the leader dispatches to a worker.
type Job struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	WorkspaceID string          `json:"workspaceId"`
	SiteID      string          `json:"siteId,omitempty"`
	Status      string          `json:"status"`
	Progress    int             `json:"progress"`
	Error       *JobError       `json:"error,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Attempts    int             `json:"attempts"`
	CreatedAt   time.Time       `json:"createdAt"`
	UpdatedAt   time.Time       `json:"updatedAt"`
	StartedAt   *time.Time      `json:"startedAt,omitempty"`
	FinishedAt  *time.Time      `json:"finishedAt,omitempty"`
}

// Terminal reports whether the job has finished.
func (j *Job) Terminal() bool { return j.Status == JobSucceeded || j.Status == JobFailed }

// Server is a control-plane node: where its Raft and its API listen.
type Server struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raftAddr"`
	APIAddr  string `json:"apiAddr"`
	// ClusterAddr is the URL of its mutual-TLS port: where agents, edges
	// and the other servers reach it.
	ClusterAddr string `json:"clusterAddr,omitempty"`
}

// Mail is a message kept in the outbox when no SMTP server is configured.
type Mail struct {
	ID        string    `json:"id"`
	To        string    `json:"to"`
	Subject   string    `json:"subject"`
	Text      string    `json:"text"`
	CreatedAt time.Time `json:"createdAt"`
}

// Quota caps how many of a resource may exist after a write. Handlers fill
// it from the caller's plan and the write checks it inside the apply, so
// a limit holds even when many requests race for the last slot.
type Quota struct {
	Plan     string `json:"plan,omitempty"`
	Resource string `json:"resource,omitempty"`
	// Limit of zero means unlimited.
	Limit int `json:"limit,omitempty"`
}

// Exceeded reports whether one more would go over the quota when `used`
// already exist.
func (q Quota) Exceeded(used int) bool { return q.Limit > 0 && used >= q.Limit }

// QuotaError is the error of a write refused by its quota.
type QuotaError struct{ Quota Quota }

func (e *QuotaError) Error() string {
	return fmt.Sprintf("quota: the %s plan allows at most %d %s", e.Quota.Plan, e.Quota.Limit, e.Quota.Resource)
}

func (q Quota) check(used int) error {
	if q.Exceeded(used) {
		return &QuotaError{Quota: q}
	}
	return nil
}

// Site statuses.
const (
	SiteCreating = "creating"
	SiteReady    = "ready"
	SiteFailed   = "failed"
	SiteDeleting = "deleting"
	// SiteUnavailable is a ready site whose node is down: set and cleared
	// with the node's status, in the same Raft entry.
	SiteUnavailable = "unavailable"
)

// Site is a WordPress sandbox.
type Site struct {
	ID               string `json:"id"`
	WorkspaceID      string `json:"orgId"`
	UserID           string `json:"userId"` // the workspace owner, whose plan counts it
	CreatedByUserID  string `json:"createdByUserId"`
	Name             string `json:"name"`
	Slug             string `json:"slug"`
	Status           string `json:"status"`
	URL              string `json:"url"`
	PHPVersion       string `json:"phpVersion"`
	WordPressVersion string `json:"wordpressVersion"`
	TemplateID       string `json:"templateId"`
	// TemplateBuild is the build of the template the site was cloned from
	// when it is not the template's id (the template was rebaked first).
	TemplateBuild string `json:"templateBuild,omitempty"`
	NodeID        string `json:"nodeId"`
	Port          int    `json:"port"`
	// Address is the site's own IP on its node (its network namespace);
	// the edge dials Address:Port. Empty for sites of older agents, served
	// at the node's backend host.
	Address       string     `json:"address,omitempty"`
	ExpiresAt     *time.Time `json:"expiresAt"`
	FailureReason string     `json:"failureReason"`
	// PHPConfig holds the php.ini overrides applied to the site.
	PHPConfig map[string]string `json:"phpConfig,omitempty"`
	// Pool names the warm pool a site waits in, unclaimed (its workspace
	// and owner are PoolWorkspace); empty for every claimed site.
	Pool string `json:"pool,omitempty"`
	// Entry is where a one-time login lands and as whom: set by a
	// Blueprint's login and landingPage (empty: the admin, wp-admin).
	Entry SiteEntry `json:"entry,omitzero"`
	// Move is set while the site is being moved to another node (a drain,
	// or a restore from its snapshot after its node was lost).
	Move *SiteMove `json:"move,omitempty"`
	// RestoredFrom is when the snapshot the site was last restored from
	// (its node lost) was taken: how old its data is; nil when the site
	// never lost data.
	RestoredFrom *time.Time `json:"restoredFrom,omitempty"`
	// Sleeping says the site's node has put it to sleep (dozing or
	// asleep) for want of requests; its next request wakes it.
	// LastRequestAt is the minute of its latest inbound request its node
	// reported (nil: none since the node's agent started).
	Sleeping      bool       `json:"sleeping,omitempty"`
	LastRequestAt *time.Time `json:"lastRequestAt,omitempty"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
}

// SitePresence is what a node reports of one of its sites' sleep.
type SitePresence struct {
	SiteID   string `json:"siteId"`
	Sleeping bool   `json:"sleeping"`
	// LastRequestAt is nil when the node has seen no request.
	LastRequestAt *time.Time `json:"lastRequestAt,omitempty"`
}

// TemplateBuildID is the template build the site's files came from ("":
// made fresh): what its node must keep while the site lives.
func (s *Site) TemplateBuildID() string {
	if s.TemplateBuild != "" {
		return s.TemplateBuild
	}
	return s.TemplateID
}

// SiteMove is a move of a site to another node in progress.
type SiteMove struct {
	JobID  string `json:"jobId"`
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"` // drain or reschedule
	// Switching is set while the site is unavailable for the switch.
	Switching bool      `json:"switching,omitempty"`
	StartedAt time.Time `json:"startedAt"`
}

// Move reasons.
const (
	MoveDrain      = "drain"
	MoveReschedule = "reschedule"
)

// PoolWorkspace is the workspace and owner of unclaimed pooled sites: no
// workspace has this id, so no listing, lookup or quota sees them.
const PoolWorkspace = "pool"

// Node statuses.
const (
	NodeReady = "ready"
	NodeDown  = "down"
)

// Node is a registered node agent.
type Node struct {
	ID          string            `json:"id"`
	Address     string            `json:"address"`
	BackendHost string            `json:"backendHost"`
	Status      string            `json:"status"`
	PHPVersions []string          `json:"phpVersions"`
	Labels      map[string]string `json:"labels"`
	MemoryMB    int64             `json:"memoryMb"`
	CPUMilli    int64             `json:"cpuMilli"`
	MaxSites    int               `json:"maxSites"`
	Version     string            `json:"version"`
	// SSHAddr is host:port of the node's SSH gateway for customers, and
	// SSHHostKey its host key as an authorized_keys line; empty without
	// one.
	SSHAddr    string `json:"sshAddr,omitempty"`
	SSHHostKey string `json:"sshHostKey,omitempty"`
	// IngressAddr is host:port where edges reach the node's sites (mutual
	// TLS); empty for an agent that predates it.
	IngressAddr string `json:"ingressAddr,omitempty"`
	// Drain is set once an operator drains the node: it takes no new
	// sites and its sites are moved away.
	Drain *Drain `json:"drain,omitempty"`
	// Sleep is the node's sites by how they sleep, as it last reported.
	Sleep        SleepCounts `json:"sleep,omitzero"`
	RegisteredAt time.Time   `json:"registeredAt"`
	UpdatedAt    time.Time   `json:"updatedAt"`
}

// SleepCounts are a node's running sites by depth, with the host memory
// (RAM and swap) the awake and the dozing ones hold.
type SleepCounts struct {
	Awake             int   `json:"awake"`
	Dozing            int   `json:"dozing"`
	Asleep            int   `json:"asleep"`
	AwakeMemoryBytes  int64 `json:"awakeMemoryBytes"`
	DozingMemoryBytes int64 `json:"dozingMemoryBytes"`
}

// Differs says whether o is news next to c: another count, or memory
// off by more than a tenth (and 64 MiB), which moves placement.
func (c SleepCounts) Differs(o SleepCounts) bool {
	far := func(a, b int64) bool {
		d := max(a-b, b-a)
		return d > 64<<20 && d*10 > max(a, b)
	}
	return c.Awake != o.Awake || c.Dozing != o.Dozing || c.Asleep != o.Asleep ||
		far(c.AwakeMemoryBytes, o.AwakeMemoryBytes) || far(c.DozingMemoryBytes, o.DozingMemoryBytes)
}

// LibraryEntry is a plugin or theme ZIP a workspace keeps to install on
// its sites. The ZIP itself lives in the blob store under BlobSHA256.
type LibraryEntry struct {
	ID               string `json:"id"`
	WorkspaceID      string `json:"orgId"`
	Slug             string `json:"slug"`
	Name             string `json:"name"`
	Source           string `json:"source"` // upload or github_release
	Kind             string `json:"kind"`   // plugin or theme
	GithubRepository string `json:"githubRepository,omitempty"`
	Filename         string `json:"filename"`
	SizeBytes        int64  `json:"sizeBytes"`
	Version          string `json:"version,omitempty"`
	BlobSHA256       string `json:"blobSha256"`
	// LicenseSealed is the license key sealed with the cluster's key;
	// LicenseHint its masked form. The key itself is never stored.
	LicenseSealed     []byte     `json:"licenseSealed,omitempty"`
	LicenseHint       string     `json:"licenseHint,omitempty"`
	LicenseLastReadAt *time.Time `json:"licenseLastReadAt,omitempty"`
	CreatedAt         time.Time  `json:"createdAt"`
	UpdatedAt         time.Time  `json:"updatedAt"`
}

// SiteEntry is whom a site's one-time logins sign in as, and where they
// land.
type SiteEntry struct {
	User string `json:"user,omitempty"`
	Path string `json:"path,omitempty"`
}

// Drain is a node's drain: when it began and each move so far.
type Drain struct {
	StartedAt time.Time    `json:"startedAt"`
	Moves     []MoveReport `json:"moves"`
}

// MoveReport is how one site's move went.
type MoveReport struct {
	SiteID string `json:"siteId"`
	To     string `json:"to"`
	JobID  string `json:"jobId"`
	Status string `json:"status"` // moving, moved, failed
	Error  string `json:"error,omitempty"`
	// DowntimeMs is how long the site was unavailable for its switch.
	DowntimeMs int64      `json:"downtimeMs"`
	StartedAt  time.Time  `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
}

// SiteSnapshot is a copy of a site's files and database in the blob store,
// taken while it ran: what a site is restored from when its node is lost.
type SiteSnapshot struct {
	ID             string    `json:"id"`
	SiteID         string    `json:"siteId"`
	NodeID         string    `json:"nodeId"`
	FilesSHA256    string    `json:"filesSha256"`
	FilesBytes     int64     `json:"filesBytes"`
	DatabaseSHA256 string    `json:"databaseSha256"`
	DatabaseBytes  int64     `json:"databaseBytes"`
	Reason         string    `json:"reason"`
	TakenAt        time.Time `json:"takenAt"`
	CreatedAt      time.Time `json:"createdAt"`
}
