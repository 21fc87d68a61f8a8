// Package fsm is the Raft state machine: an append-only enum of commands,
// their encoding, and the deterministic Apply that writes them to the
// state store. Handlers stamp ids and times into a command before it is
// applied; Apply reads no clock, makes no ids and does no I/O.
package fsm

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// Type identifies a command in the Raft log. Values are append-only:
// never renumber or reuse one, because old logs and snapshots hold them.
type Type uint8

// Command types.
const (
	TypeCreateAccount    Type = 1
	TypeSetPlan          Type = 2
	TypeCreateToken      Type = 3
	TypeRevokeToken      Type = 4
	TypeCreateWorkspace  Type = 5
	TypeCreateInvitation Type = 6
	TypeAcceptInvitation Type = 7
	TypeSetMemberRole    Type = 8
	TypeRemoveMember     Type = 9
	TypePutRole          Type = 10
	TypeDeleteRole       Type = 11
	TypeCreateJob        Type = 12
	TypeUpdateJob        Type = 13
	TypeUpsertServer     Type = 14
	TypeRemoveServer     Type = 15
	TypeAppendMail       Type = 16
	TypeRevokeInvitation Type = 17
	TypeCreateSite       Type = 18
	TypeUpdateSite       Type = 19
	TypeRemoveSite       Type = 20
	TypeUpsertNode       Type = 21
	TypeSetNodeStatus    Type = 22
	TypeSiteJob          Type = 23
	TypePutLibraryEntry  Type = 24
	TypeDeleteLibrary    Type = 25
	TypeSetLicense       Type = 26
	TypeLicenseRead      Type = 27
	// Add new types here, with the next number.
)

// Command is any payload that can travel through the log.
type Command interface{ commandType() Type }

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

// CreateSite adds a site together with the job that provisions it, so
// neither exists without the other.
type CreateSite struct {
	Site  state.Site  `json:"site"`
	Job   state.Job   `json:"job"`
	Quota state.Quota `json:"quota"`
}

// UpdateSite records a site's progress (status, node, port, versions).
type UpdateSite struct {
	Update state.SiteUpdate `json:"update"`
}

// RemoveSite deletes a site's row once its node has cleaned up.
type RemoveSite struct {
	ID string `json:"id"`
}

// SiteJob moves a site to a new status and queues the job that carries
// the change out, atomically (delete, reset).
type SiteJob struct {
	Update state.SiteUpdate `json:"update"`
	Job    state.Job        `json:"job"`
}

// PutLibraryEntry adds a Library entry or replaces one (refresh).
type PutLibraryEntry struct {
	Entry   state.LibraryEntry `json:"entry"`
	Replace bool               `json:"replace,omitempty"`
	Quota   state.Quota        `json:"quota"`
}

// DeleteLibrary removes a Library entry.
type DeleteLibrary struct {
	ID string `json:"id"`
}

// SetLicense stores a sealed license key, or removes it when Sealed is nil.
type SetLicense struct {
	ID     string    `json:"id"`
	Sealed []byte    `json:"sealed,omitempty"`
	Hint   string    `json:"hint,omitempty"`
	At     time.Time `json:"at"`
}

// LicenseRead stamps a read of a license key by an agent.
type LicenseRead struct {
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

// AppendMail keeps a message in the outbox.
type AppendMail struct {
	Mail state.Mail `json:"mail"`
}

func (CreateAccount) commandType() Type    { return TypeCreateAccount }
func (SetPlan) commandType() Type          { return TypeSetPlan }
func (CreateToken) commandType() Type      { return TypeCreateToken }
func (RevokeToken) commandType() Type      { return TypeRevokeToken }
func (CreateWorkspace) commandType() Type  { return TypeCreateWorkspace }
func (CreateInvitation) commandType() Type { return TypeCreateInvitation }
func (AcceptInvitation) commandType() Type { return TypeAcceptInvitation }
func (SetMemberRole) commandType() Type    { return TypeSetMemberRole }
func (RemoveMember) commandType() Type     { return TypeRemoveMember }
func (PutRole) commandType() Type          { return TypePutRole }
func (DeleteRole) commandType() Type       { return TypeDeleteRole }
func (CreateJob) commandType() Type        { return TypeCreateJob }
func (UpdateJob) commandType() Type        { return TypeUpdateJob }
func (UpsertServer) commandType() Type     { return TypeUpsertServer }
func (RemoveServer) commandType() Type     { return TypeRemoveServer }
func (AppendMail) commandType() Type       { return TypeAppendMail }
func (RevokeInvitation) commandType() Type { return TypeRevokeInvitation }
func (CreateSite) commandType() Type       { return TypeCreateSite }
func (UpdateSite) commandType() Type       { return TypeUpdateSite }
func (RemoveSite) commandType() Type       { return TypeRemoveSite }
func (UpsertNode) commandType() Type       { return TypeUpsertNode }
func (SetNodeStatus) commandType() Type    { return TypeSetNodeStatus }
func (SiteJob) commandType() Type          { return TypeSiteJob }
func (PutLibraryEntry) commandType() Type  { return TypePutLibraryEntry }
func (DeleteLibrary) commandType() Type    { return TypeDeleteLibrary }
func (SetLicense) commandType() Type       { return TypeSetLicense }
func (LicenseRead) commandType() Type      { return TypeLicenseRead }

// Encode turns a command into a log entry: one type byte, then JSON.
func Encode(c Command) ([]byte, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode command %d: %w", c.commandType(), err)
	}
	return append([]byte{byte(c.commandType())}, body...), nil
}

// decode is Encode's inverse.
func decode(data []byte) (Command, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty log entry")
	}
	var c Command
	switch Type(data[0]) {
	case TypeCreateAccount:
		c = &CreateAccount{}
	case TypeSetPlan:
		c = &SetPlan{}
	case TypeCreateToken:
		c = &CreateToken{}
	case TypeRevokeToken:
		c = &RevokeToken{}
	case TypeCreateWorkspace:
		c = &CreateWorkspace{}
	case TypeCreateInvitation:
		c = &CreateInvitation{}
	case TypeAcceptInvitation:
		c = &AcceptInvitation{}
	case TypeSetMemberRole:
		c = &SetMemberRole{}
	case TypeRemoveMember:
		c = &RemoveMember{}
	case TypePutRole:
		c = &PutRole{}
	case TypeDeleteRole:
		c = &DeleteRole{}
	case TypeCreateJob:
		c = &CreateJob{}
	case TypeUpdateJob:
		c = &UpdateJob{}
	case TypeUpsertServer:
		c = &UpsertServer{}
	case TypeRemoveServer:
		c = &RemoveServer{}
	case TypeAppendMail:
		c = &AppendMail{}
	case TypeRevokeInvitation:
		c = &RevokeInvitation{}
	case TypeCreateSite:
		c = &CreateSite{}
	case TypeUpdateSite:
		c = &UpdateSite{}
	case TypeRemoveSite:
		c = &RemoveSite{}
	case TypeUpsertNode:
		c = &UpsertNode{}
	case TypeSetNodeStatus:
		c = &SetNodeStatus{}
	case TypeSiteJob:
		c = &SiteJob{}
	case TypePutLibraryEntry:
		c = &PutLibraryEntry{}
	case TypeDeleteLibrary:
		c = &DeleteLibrary{}
	case TypeSetLicense:
		c = &SetLicense{}
	case TypeLicenseRead:
		c = &LicenseRead{}
	default:
		return nil, fmt.Errorf("unknown command type %d", data[0])
	}
	if err := json.Unmarshal(data[1:], c); err != nil {
		return nil, fmt.Errorf("decode command %d: %w", data[0], err)
	}
	return c, nil
}
