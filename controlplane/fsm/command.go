// Package fsm is the Raft state machine: an append-only enum of commands,
// their encoding, and the deterministic Apply that writes them to the
// state store. Handlers stamp ids and times into a command before it is
// applied; Apply reads no clock, makes no ids and does no I/O.
package fsm

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// Type identifies a command in the Raft log. Values are append-only:
// never renumber or reuse one, because old logs and snapshots hold them.
type Type uint8

// Command is any payload that can travel through the log: a registered
// struct (see registry) whose apply writes it to the store.
type Command interface {
	// apply writes the command in tx; it returns an error when refused
	// (nothing written), otherwise nil or what it produced.
	apply(tx *state.Tx) any
}

// Applier commits a command through Raft and returns what its apply
// produced; every part of the control plane that writes takes one. A
// refused command comes back as the error.
type Applier interface {
	Apply(ctx context.Context, c Command) (any, error)
}

// registry is the one list of command types: the number each has in the
// log, and a constructor to decode it. Add new commands at the end with
// the next number.
var registry = map[Type]func() Command{
	1:  func() Command { return new(CreateAccount) },
	2:  func() Command { return new(SetPlan) },
	3:  func() Command { return new(CreateToken) },
	4:  func() Command { return new(RevokeToken) },
	5:  func() Command { return new(CreateWorkspace) },
	6:  func() Command { return new(CreateInvitation) },
	7:  func() Command { return new(AcceptInvitation) },
	8:  func() Command { return new(SetMemberRole) },
	9:  func() Command { return new(RemoveMember) },
	10: func() Command { return new(PutRole) },
	11: func() Command { return new(DeleteRole) },
	12: func() Command { return new(CreateJob) },
	13: func() Command { return new(UpdateJob) },
	14: func() Command { return new(UpsertServer) },
	15: func() Command { return new(RemoveServer) },
	16: func() Command { return new(AppendMail) },
	17: func() Command { return new(RevokeInvitation) },
	18: func() Command { return new(CreateSiteWithJob) },
	19: func() Command { return new(UpdateSite) },
	20: func() Command { return new(DeleteSite) },
	21: func() Command { return new(UpsertNode) },
	22: func() Command { return new(SetNodeStatus) },
	23: func() Command { return new(UpdateSiteWithJob) },
	24: func() Command { return new(PutLibraryEntry) },
	25: func() Command { return new(DeleteLibraryEntry) },
	26: func() Command { return new(SetLibraryLicense) },
	27: func() Command { return new(MarkLicenseRead) },
	28: func() Command { return new(Idempotent) },
	29: func() Command { return new(PruneIdempotency) },
	30: func() Command { return new(CreateTemplateWithJob) },
	31: func() Command { return new(PutTemplate) },
	32: func() Command { return new(DeleteTemplate) },
	33: func() Command { return new(AddLead) },
	34: func() Command { return new(PutWebhook) },
	35: func() Command { return new(DeleteWebhook) },
	36: func() Command { return new(DemoReady) },
	37: func() Command { return new(EndDemo) },
	38: func() Command { return new(RecordAttempt) },
	39: func() Command { return new(AddDelivery) },
	40: func() Command { return new(CreateBlueprint) },
	41: func() Command { return new(PutBlueprint) },
	42: func() Command { return new(DeleteBlueprint) },
	43: func() Command { return new(CreateRunWithJob) },
	44: func() Command { return new(PutRun) },
	45: func() Command { return new(StartBake) },
	46: func() Command { return new(ReplaceTemplate) },
	47: func() Command { return new(CreateImport) },
	48: func() Command { return new(PutImport) },
	49: func() Command { return new(DeleteImport) },
	50: func() Command { return new(StartImport) },
	51: func() Command { return new(RegisterOAuthClient) },
	52: func() Command { return new(CreateOAuthCode) },
	53: func() Command { return new(RedeemOAuthCode) },
	54: func() Command { return new(ConnectDomain) },
	55: func() Command { return new(PutDomain) },
	56: func() Command { return new(DisconnectDomain) },
	57: func() Command { return new(PutCertData) },
	58: func() Command { return new(DeleteCertData) },
	59: func() Command { return new(LockCert) },
	60: func() Command { return new(UnlockCert) },
	61: func() Command { return new(AddSSHKey) },
	62: func() Command { return new(DeleteSSHKey) },
	63: func() Command { return new(TouchSSHKey) },
	64: func() Command { return new(CreateRepository) },
	65: func() Command { return new(PutRepository) },
	66: func() Command { return new(DeleteRepository) },
	67: func() Command { return new(RecordDeploy) },
	68: func() Command { return new(TakePush) },
	69: func() Command { return new(PutClusterCA) },
	70: func() Command { return new(CreateJoinToken) },
	71: func() Command { return new(RevokeJoinToken) },
	72: func() Command { return new(UseJoinToken) },
	73: func() Command { return new(RenewMember) },
	74: func() Command { return new(RevokeMember) },
	75: func() Command { return new(CreateOperatorToken) },
	76: func() Command { return new(DeleteOperatorToken) },
	77: func() Command { return new(ResealValues) },
	// 78 is free.
	79: func() Command { return new(AddSnapshot) },
	80: func() Command { return new(SetNodeDrain) },
	81: func() Command { return new(StartMove) },
	82: func() Command { return new(SwitchMove) },
	83: func() Command { return new(FinishMove) },
	84: func() Command { return new(AbortMove) },
	85: func() Command { return new(PruneTombstones) },
	86: func() Command { return new(PruneState) },
	87: func() Command { return new(PruneOAuthClients) },
	88: func() Command { return new(OrderCert) },
	89: func() Command { return new(TakeOverDomain) },
	90: func() Command { return new(ExpireDomainClaims) },
	91: func() Command { return new(SetSitePresence) },
	92: func() Command { return new(AddCheckpoint) },
	93: func() Command { return new(DeleteCheckpoint) },
	94: func() Command { return new(SetCheckpointSizes) },
}

// typeOf maps each registered struct to its number, for Encode.
var typeOf = func() map[reflect.Type]Type {
	m := make(map[reflect.Type]Type, len(registry))
	for t, mk := range registry {
		m[reflect.TypeOf(mk()).Elem()] = t
	}
	return m
}()

// typeNumber is c's number in the log, whether c is a struct or a pointer to one.
func typeNumber(c Command) (Type, error) {
	rt := reflect.TypeOf(c)
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	t, ok := typeOf[rt]
	if !ok {
		return 0, fmt.Errorf("command %T is not registered", c)
	}
	return t, nil
}

// CreateAccount adds an account and its personal workspace.
type CreateAccount struct {
	Account   state.Account   `json:"account"`
	Workspace state.Workspace `json:"workspace"`
}

// SetPlan changes an account's plan.
type SetPlan struct {
	UserID string    `json:"userId"`
	Plan   string    `json:"plan"`
	At     time.Time `json:"at"`
}

// CreateToken stores a token; it carries the hash, never the secret.
type CreateToken struct {
	Token state.Token `json:"token"`
	Quota state.Quota `json:"quota"`
}

// RevokeToken deletes a token of UserID.
type RevokeToken struct {
	UserID  string `json:"userId"`
	TokenID string `json:"tokenId"`
}

// CreateWorkspace adds a workspace with its owner as first member.
type CreateWorkspace struct {
	Workspace state.Workspace `json:"workspace"`
	Quota     state.Quota     `json:"quota"`
}

// CreateInvitation invites an email to a workspace.
type CreateInvitation struct {
	Invitation state.Invitation `json:"invitation"`
	Quota      state.Quota      `json:"quota"`
}

// AcceptInvitation turns an invitation into a membership.
type AcceptInvitation struct {
	InvitationID string    `json:"invitationId"`
	UserID       string    `json:"userId"`
	At           time.Time `json:"at"`
}

// SetMemberRole assigns or clears (empty RoleID) a member's custom role.
type SetMemberRole struct {
	WorkspaceID string `json:"workspaceId"`
	UserID      string `json:"userId"`
	RoleID      string `json:"roleId"`
}

// RemoveMember takes a member out of a workspace.
type RemoveMember struct {
	WorkspaceID string `json:"workspaceId"`
	UserID      string `json:"userId"`
}

// PutRole creates a custom role, or replaces one when Update is set.
type PutRole struct {
	Role   state.Role `json:"role"`
	Update bool       `json:"update,omitempty"`
}

// DeleteRole removes an unused custom role.
type DeleteRole struct {
	WorkspaceID string    `json:"workspaceId"`
	RoleID      string    `json:"roleId"`
	At          time.Time `json:"at"`
}

// CreateJob queues a job; idempotent by job id.
type CreateJob struct {
	Job state.Job `json:"job"`
}

// UpdateJob records a job's progress or end.
type UpdateJob struct {
	Update state.JobUpdate `json:"update"`
}

// UpsertServer records a control-plane node's addresses.
type UpsertServer struct {
	Server state.Server `json:"server"`
}

// RemoveServer forgets a control-plane node.
type RemoveServer struct {
	ID string `json:"id"`
}

// RevokeInvitation withdraws a pending invitation of a workspace.
type RevokeInvitation struct {
	WorkspaceID  string `json:"workspaceId"`
	InvitationID string `json:"invitationId"`
}

// CreateSiteWithJob adds a site together with the job that provisions it, so
// neither exists without the other.
type CreateSiteWithJob struct {
	Site  state.Site  `json:"site"`
	Job   state.Job   `json:"job"`
	Quota state.Quota `json:"quota"`
	// Claim makes the site by claiming the ready pooled site of the same
	// id (state.Tx.ClaimPooledSite) instead of adding one: to its caller a
	// claim is a create.
	Claim bool `json:"claim,omitempty"`
	// Launch, for a site launched from a template's public link, adds
	// its demo, lead and launch count in the same entry.
	Launch *state.DemoLaunch `json:"launch,omitempty"`
	// Run, for a site made from a Blueprint, is the run its job carries
	// out once the site is ready.
	Run *state.BlueprintRun `json:"run,omitempty"`
}

// UpdateSite records a site's progress (status, node, port, versions).
type UpdateSite struct {
	Update state.SiteUpdate `json:"update"`
}

// DeleteSite deletes a site's row once its node has cleaned up.
type DeleteSite struct {
	ID string `json:"id"`
	// At stamps the imports the site's deletion moves on.
	At time.Time `json:"at,omitzero"`
}

// UpdateSiteWithJob moves a site to a new status and queues the job that carries
// the change out, atomically (delete, reset).
type UpdateSiteWithJob struct {
	Update state.SiteUpdate `json:"update"`
	Job    state.Job        `json:"job"`
}

// CreateTemplateWithJob adds a building template, within the owner's
// quota, with the job that freezes its source site.
type CreateTemplateWithJob struct {
	Template state.Template `json:"template"`
	Job      state.Job      `json:"job"`
	Quota    state.Quota    `json:"quota"`
}

// PutTemplate replaces a template (settings, or a freeze's outcome).
type PutTemplate struct {
	Template state.Template `json:"template"`
	// IfUpdatedAt, when set, applies the write only to the template as
	// its writer read it (state.ErrStale otherwise).
	IfUpdatedAt *time.Time `json:"ifUpdatedAt,omitempty"`
}

// AddLead records a lead a template's public launcher captured.
type AddLead struct {
	Lead state.Lead `json:"lead"`
}

// DeleteTemplate removes a template.
type DeleteTemplate struct {
	ID string `json:"id"`
}

// PutLibraryEntry adds a Library entry or replaces one (refresh).
type PutLibraryEntry struct {
	Entry   state.LibraryEntry `json:"entry"`
	Replace bool               `json:"replace,omitempty"`
	Quota   state.Quota        `json:"quota"`
}

// DeleteLibraryEntry removes a Library entry.
type DeleteLibraryEntry struct {
	ID string `json:"id"`
}

// SetLibraryLicense stores a sealed license key, or removes it when Sealed is nil.
type SetLibraryLicense struct {
	ID     string    `json:"id"`
	Sealed []byte    `json:"sealed,omitempty"`
	Hint   string    `json:"hint,omitempty"`
	At     time.Time `json:"at"`
}

// MarkLicenseRead stamps a read of a license key by an agent.
type MarkLicenseRead struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// UpsertNode records a node agent's registration.
type UpsertNode struct {
	Node state.Node `json:"node"`
}

// SetNodeStatus marks a node ready or down.
type SetNodeStatus struct {
	ID     string    `json:"id"`
	Status string    `json:"status"`
	At     time.Time `json:"at"`
}

// SetSitePresence records a node's report of its sites' sleep.
type SetSitePresence struct {
	NodeID   string               `json:"nodeId"`
	Presence []state.SitePresence `json:"presence"`
	// Counts, when set, replaces the node's sleep counts.
	Counts *state.SleepCounts `json:"counts,omitempty"`
}

// AppendMail keeps a message in the outbox.
type AppendMail struct {
	Mail state.Mail `json:"mail"`
}

// Idempotent applies Command only if the caller's Idempotency-Key is
// free, and records the key with the request's answer in the same
// transaction. A key already used by the same request makes it a no-op
// that returns the first answer (*state.Idempotency); by another request,
// state.ErrIdempotencyKeyReused.
type Idempotent struct {
	Record  state.Idempotency
	Command Command
}

type idempotentJSON struct {
	Record  state.Idempotency `json:"record"`
	Type    Type              `json:"type"`
	Command json.RawMessage   `json:"command"`
}

// MarshalJSON writes the inner command with its type number.
func (c Idempotent) MarshalJSON() ([]byte, error) {
	if isIdempotent(c.Command) {
		return nil, fmt.Errorf("an idempotent command cannot wrap another")
	}
	t, err := typeNumber(c.Command)
	if err != nil {
		return nil, err
	}
	inner, err := json.Marshal(c.Command)
	if err != nil {
		return nil, err
	}
	return json.Marshal(idempotentJSON{Record: c.Record, Type: t, Command: inner})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (c *Idempotent) UnmarshalJSON(data []byte) error {
	var raw idempotentJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	inner, err := decodeBody(raw.Type, raw.Command)
	if err != nil {
		return err
	}
	if _, nested := inner.(*Idempotent); nested {
		return fmt.Errorf("an idempotent command cannot wrap another")
	}
	c.Record, c.Command = raw.Record, inner
	return nil
}

func isIdempotent(c Command) bool {
	switch c.(type) {
	case Idempotent, *Idempotent:
		return true
	}
	return false
}

// PruneIdempotency forgets the Idempotency-Key records expired at At.
type PruneIdempotency struct {
	At time.Time `json:"at"`
}

// Encode turns a command into a log entry: one type byte, then JSON.
func Encode(c Command) ([]byte, error) {
	t, err := typeNumber(c)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode command %d: %w", t, err)
	}
	return append([]byte{byte(t)}, body...), nil
}

// decode is Encode's inverse.
func decode(data []byte) (Command, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty log entry")
	}
	return decodeBody(Type(data[0]), data[1:])
}

func decodeBody(t Type, body []byte) (Command, error) {
	mk, ok := registry[t]
	if !ok {
		return nil, fmt.Errorf("unknown command type %d", t)
	}
	c := mk()
	if err := json.Unmarshal(body, c); err != nil {
		return nil, fmt.Errorf("decode command %d: %w", t, err)
	}
	return c, nil
}

// PutWebhook sets a workspace's demo-launch webhook.
type PutWebhook struct {
	Webhook state.Webhook `json:"webhook"`
	// Rotate replaces only the secret.
	Rotate bool `json:"rotate,omitempty"`
}

// DeleteWebhook removes a workspace's webhook and its deliveries.
type DeleteWebhook struct {
	WorkspaceID string `json:"workspaceId"`
}

// DemoReady records a launched demo's site ready and queues demo.ready.
type DemoReady struct {
	DemoID   string          `json:"demoId"`
	At       time.Time       `json:"at"`
	Delivery *state.Delivery `json:"delivery,omitempty"`
}

// EndDemo removes an ended demo and queues demo.expired.
type EndDemo struct {
	DemoID   string          `json:"demoId"`
	Delivery *state.Delivery `json:"delivery,omitempty"`
}

// RecordAttempt records a delivery attempt's outcome.
type RecordAttempt struct {
	Attempt state.Attempt `json:"attempt"`
}

// AddDelivery records a delivery sent at once (a test event).
type AddDelivery struct {
	Delivery state.Delivery `json:"delivery"`
}

// CreateBlueprint saves a new Blueprint within the owner's quota.
type CreateBlueprint struct {
	Blueprint state.Blueprint `json:"blueprint"`
	Quota     state.Quota     `json:"quota"`
}

// PutBlueprint replaces a saved Blueprint read when it was updated at
// IfUpdatedAt.
type PutBlueprint struct {
	Blueprint   state.Blueprint `json:"blueprint"`
	IfUpdatedAt time.Time       `json:"ifUpdatedAt"`
}

// DeleteBlueprint removes a saved Blueprint.
type DeleteBlueprint struct {
	ID string `json:"id"`
}

// CreateRunWithJob starts a Blueprint run on a ready site: the run
// (pending) and the job that carries it out.
type CreateRunWithJob struct {
	Run state.BlueprintRun `json:"run"`
	Job state.Job          `json:"job"`
}

// PutRun records a run's progress.
type PutRun struct {
	Run state.BlueprintRun `json:"run"`
}

// StartBake starts baking a Blueprint into a Template: the scratch site,
// the template (building), the run and the job, all or nothing.
type StartBake struct {
	Site          state.Site         `json:"site"`
	Template      state.Template     `json:"template"`
	Run           state.BlueprintRun `json:"run"`
	Job           state.Job          `json:"job"`
	SiteQuota     state.Quota        `json:"siteQuota"`
	TemplateQuota state.Quota        `json:"templateQuota"`
}

// ReplaceTemplate retires a template in favour of its ready rebuild.
type ReplaceTemplate struct {
	OldID string    `json:"oldId"`
	NewID string    `json:"newId"`
	At    time.Time `json:"at"`
}

// CreateImport adds an import awaiting its upload.
type CreateImport struct {
	Import state.Import `json:"import"`
}

// PutImport records an import's progress; IfStatus, when set, applies it
// only to an import in one of those statuses.
type PutImport struct {
	Import   state.Import `json:"import"`
	IfStatus []string     `json:"ifStatus,omitempty"`
}

// DeleteImport removes an import's row.
type DeleteImport struct {
	ID string `json:"id"`
}

// StartImport seals an import's upload and queues its restore: the
// import (restoring) and the job, with the new site the job makes when
// Site is set, all or nothing.
type StartImport struct {
	Import    state.Import `json:"import"`
	IfStatus  []string     `json:"ifStatus"`
	Job       state.Job    `json:"job"`
	Site      *state.Site  `json:"site,omitempty"`
	SiteQuota state.Quota  `json:"siteQuota"`
}

// RegisterOAuthClient adds a public OAuth client, unless MaxClients
// (when above zero; entries from before the cap have none) are
// registered already.
type RegisterOAuthClient struct {
	Client     state.OAuthClient `json:"client"`
	MaxClients int               `json:"maxClients,omitempty"`
}

// CreateOAuthCode stores an approved authorization code (by its hash).
type CreateOAuthCode struct {
	Code state.OAuthCode `json:"code"`
	At   time.Time       `json:"at"`
}

// RedeemOAuthCode exchanges a code for a token once; a replay revokes
// that token instead.
type RedeemOAuthCode struct {
	CodeHash string      `json:"codeHash"`
	Token    state.Token `json:"token"`
	At       time.Time   `json:"at"`
}

// ConnectDomain adds a site's custom domain (pending_dns).
type ConnectDomain struct {
	Domain state.Domain `json:"domain"`
}

// PutDomain records a DNS check's or a job's outcome on a site's domain,
// with the job it starts when Job is set; IfStatus, when set, applies it
// only to a domain in one of those statuses.
type PutDomain struct {
	Domain   state.Domain `json:"domain"`
	IfStatus []string     `json:"ifStatus,omitempty"`
	Job      *state.Job   `json:"job,omitempty"`
}

// DisconnectDomain removes a site's custom domain, with the job that
// points WordPress back at the sandbox URL when Job is set.
type DisconnectDomain struct {
	SiteID   string     `json:"siteId"`
	Hostname string     `json:"hostname"`
	Job      *state.Job `json:"job,omitempty"`
}

// PutCertData stores an entry of the edges' shared certificate storage
// (sealed).
type PutCertData struct {
	Data state.CertData `json:"data"`
}

// DeleteCertData removes an entry of the certificate storage and every
// entry under it.
type DeleteCertData struct {
	Key string `json:"key"`
}

// LockCert takes or renews an edge's lease on a certificate operation.
type LockCert struct {
	Lock state.CertLock `json:"lock"`
	At   time.Time      `json:"at"`
}

// UnlockCert releases an edge's lease.
type UnlockCert struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
}

// AddSSHKey stores an account's SSH public key.
type AddSSHKey struct {
	Key   state.SSHKey `json:"key"`
	Quota state.Quota  `json:"quota"`
}

// DeleteSSHKey removes an account's SSH public key.
type DeleteSSHKey struct {
	UserID string `json:"userId"`
	ID     string `json:"id"`
}

// TouchSSHKey records a sign-in with a key.
type TouchSSHKey struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// AddCheckpoint records a site's checkpoint, made on its node, within
// the plan's count per site.
type AddCheckpoint struct {
	Checkpoint state.Checkpoint `json:"checkpoint"`
	Quota      state.Quota      `json:"quota"`
}

// DeleteCheckpoint forgets a site's checkpoint (its node removed it).
type DeleteCheckpoint struct {
	SiteID string `json:"siteId"`
	ID     string `json:"id"`
}

// SetCheckpointSizes records what a site's checkpoints held of their
// own when its node measured them.
type SetCheckpointSizes struct {
	SiteID string           `json:"siteId"`
	Sizes  map[string]int64 `json:"sizes"`
}

// CreateRepository connects a repository to a site.
type CreateRepository struct {
	Repository state.Repository `json:"repository"`
}

// PutRepository changes a repository's settings as read at IfUpdatedAt.
type PutRepository struct {
	Repository  state.Repository `json:"repository"`
	IfUpdatedAt time.Time        `json:"ifUpdatedAt"`
}

// DeleteRepository disconnects a repository.
type DeleteRepository struct {
	ID string `json:"id"`
}

// RecordDeploy stamps the commit a deploy placed.
type RecordDeploy struct {
	ID  string    `json:"id"`
	SHA string    `json:"sha"`
	At  time.Time `json:"at"`
}

// TakePush records a push delivery with the deploy it queues, once.
type TakePush struct {
	ID       string    `json:"id"`
	Delivery string    `json:"delivery"`
	Job      state.Job `json:"job"`
}

// PutClusterCA records the CA made at bootstrap with the server that
// made it and the first operator token.
type PutClusterCA struct {
	CA       state.ClusterCA     `json:"ca"`
	First    state.ClusterMember `json:"first"`
	Operator state.OperatorToken `json:"operator"`
}

// CreateJoinToken stores a join token's hash.
type CreateJoinToken struct {
	Token state.JoinToken `json:"token"`
}

// RevokeJoinToken stops a join token from being used.
type RevokeJoinToken struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// UseJoinToken spends a join token on a member.
type UseJoinToken struct {
	TokenID string              `json:"tokenId"`
	Hash    string              `json:"hash"`
	KeyHash string              `json:"keyHash"`
	Member  state.ClusterMember `json:"member"`
}

// RenewMember records a member's renewed certificate.
type RenewMember struct {
	ID        string    `json:"id"`
	Serial    string    `json:"serial"`
	IssuedAt  time.Time `json:"issuedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// RevokeMember makes every certificate of a member worthless.
type RevokeMember struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// CreateOperatorToken stores an operator token's hash.
type CreateOperatorToken struct {
	Token state.OperatorToken `json:"token"`
}

// DeleteOperatorToken revokes an operator token.
type DeleteOperatorToken struct {
	ID string `json:"id"`
}

// AddSnapshot records a site's snapshot, keeping Keep per site.
type AddSnapshot struct {
	Snapshot state.SiteSnapshot `json:"snapshot"`
	Keep     int                `json:"keep"`
}

// SetNodeDrain starts or ends a node's drain.
type SetNodeDrain struct {
	ID    string    `json:"id"`
	Drain bool      `json:"drain"`
	At    time.Time `json:"at"`
}

// StartMove begins moving a site to another node with its job.
type StartMove struct {
	SiteID string         `json:"siteId"`
	Move   state.SiteMove `json:"move"`
	Job    state.Job      `json:"job"`
}

// SwitchMove makes a moving site unavailable for its switch.
type SwitchMove struct {
	SiteID string    `json:"siteId"`
	JobID  string    `json:"jobId"`
	At     time.Time `json:"at"`
}

// FinishMove puts a moved site on its new node.
type FinishMove struct {
	SiteID       string        `json:"siteId"`
	JobID        string        `json:"jobId"`
	Address      string        `json:"address"`
	Port         int           `json:"port"`
	RestoredFrom *time.Time    `json:"restoredFrom,omitempty"`
	Downtime     time.Duration `json:"downtime"`
	At           time.Time     `json:"at"`
}

// AbortMove ends a failed move; the site stays where it was.
type AbortMove struct {
	SiteID string    `json:"siteId"`
	JobID  string    `json:"jobId"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// ResealValues puts sealed values the leader sealed again with the
// current sealing key in place of the old ciphertexts, each only if it
// is still the old one (a rotation's compare-and-swap); the FSM does no
// crypto. It produces how many it replaced.
type ResealValues struct {
	Values []state.Reseal `json:"values"`
}

// PruneTombstones forgets sites deleted before a time.
type PruneTombstones struct {
	Before time.Time `json:"before"`
}

// PruneState forgets, as of At, the rows Retention lets go (finished
// jobs, old mail, spent invitations and tokens, finished runs of gone
// Blueprints, ended imports, surplus leads, expired codes and
// certificate leases); the leader stamps both.
type PruneState struct {
	At        time.Time       `json:"at"`
	Retention state.Retention `json:"retention"`
}

// PruneOAuthClients collects registered clients nobody uses, at At (the
// leader's clock): never given a token UnusedAfter their registration,
// or without a live token IdleAfter (state.Tx.PruneOAuthClients). It
// produces how many it removed.
type PruneOAuthClients struct {
	At          time.Time     `json:"at"`
	UnusedAfter time.Duration `json:"unusedAfter"`
	IdleAfter   time.Duration `json:"idleAfter"`
}

// OrderCert asks, before an edge orders a certificate from the ACME CA,
// whether Order fits Budget (the operator's, stamped by the handler with
// the order's time and id). It produces the *state.CertBlock of a spent
// budget (nothing counted), or nil when the order is counted and may go.
type OrderCert struct {
	Order  state.CertOrder  `json:"order"`
	Budget state.CertBudget `json:"budget"`
}

// TakeOverDomain gives a hostname to the site that proved it controls
// it (its TXT record), releasing the pending claim of site From. It
// produces the claim removed.
type TakeOverDomain struct {
	Domain state.Domain `json:"domain"`
	From   string       `json:"from"`
}

// ExpireDomainClaims releases the domains pending_dns since before
// Before. It produces the claims removed.
type ExpireDomainClaims struct {
	Before time.Time `json:"before"`
}
