package fsm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/hashicorp/raft"

	"github.com/sandboxd/sandboxd/controlplane/state"
)

// FSM applies committed log entries to a state store.
type FSM struct {
	store *state.Store
	log   *slog.Logger
}

var _ raft.FSM = (*FSM)(nil)

// New returns an FSM writing to store.
func New(store *state.Store, log *slog.Logger) *FSM {
	return &FSM{store: store, log: log.With("component", "fsm")}
}

var _ raft.BatchingFSM = (*FSM)(nil)

// Apply runs one committed command. Its return value is what the leader's
// raft.ApplyFuture.Response gives back: an error when the command was
// rejected (nothing was written), otherwise nil or the row it produced.
func (f *FSM) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// errRejected aborts a batch transaction when one command is refused.
var errRejected = errors.New("a command in the batch was rejected")

// ApplyBatch applies committed commands in one store transaction, which
// is what lets concurrent writers share the cost of a commit. If any
// command is refused, the batch is undone and replayed one command per
// transaction, so each refusal is isolated exactly as if applied alone;
// every node takes the same path, so state stays identical.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	results := make([]any, len(logs))
	err := f.store.Update(func(tx *state.Tx) error {
		for i, l := range logs {
			results[i] = f.applyLog(tx, l)
			if _, failed := results[i].(error); failed {
				return errRejected
			}
		}
		return nil
	})
	if err == nil {
		return results
	}
	for i, l := range logs {
		_ = f.store.Update(func(tx *state.Tx) error {
			results[i] = f.applyLog(tx, l)
			err, _ := results[i].(error)
			return err
		})
	}
	return results
}

func (f *FSM) applyLog(tx *state.Tx, l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil // configuration changes are raft's own business
	}
	c, err := decode(l.Data)
	if err != nil {
		// A command this binary does not know: never guess. Every node
		// rejects it the same way, so state stays identical.
		f.log.Error("skipping undecodable command", "index", l.Index, "err", err)
		return fmt.Errorf("apply index %d: %w", l.Index, err)
	}
	return apply(tx, c)
}

func apply(s *state.Tx, c Command) any {
	switch c := c.(type) {
	case *CreateAccount:
		return s.CreateAccount(c.Account, c.Workspace)
	case *SetPlan:
		return s.SetPlan(c.UserID, c.Plan, c.At)
	case *CreateToken:
		return s.CreateToken(c.Token, c.Quota)
	case *RevokeToken:
		return s.RevokeToken(c.UserID, c.TokenID)
	case *CreateWorkspace:
		return s.CreateWorkspace(c.Workspace, c.Quota)
	case *CreateInvitation:
		return s.CreateInvitation(c.Invitation, c.Quota)
	case *AcceptInvitation:
		return result(s.AcceptInvitation(c.InvitationID, c.UserID, c.At))
	case *SetMemberRole:
		return result(s.SetMemberRole(c.WorkspaceID, c.UserID, c.RoleID))
	case *RemoveMember:
		return s.RemoveMember(c.WorkspaceID, c.UserID)
	case *PutRole:
		return s.PutRole(c.Role, c.Update)
	case *DeleteRole:
		return s.DeleteRole(c.WorkspaceID, c.RoleID, c.At)
	case *CreateJob:
		return s.CreateJob(c.Job)
	case *UpdateJob:
		return result(s.UpdateJob(c.Update))
	case *UpsertServer:
		return s.UpsertServer(c.Server)
	case *RemoveServer:
		return s.RemoveServer(c.ID)
	case *AppendMail:
		return s.AppendMail(c.Mail)
	case *RevokeInvitation:
		return s.RevokeInvitation(c.WorkspaceID, c.InvitationID)
	case *CreateSite:
		if err := s.CreateSite(c.Site, c.Quota); err != nil {
			return err
		}
		return s.CreateJob(c.Job)
	case *UpdateSite:
		return result(s.UpdateSite(c.Update))
	case *RemoveSite:
		return s.DeleteSite(c.ID)
	case *UpsertNode:
		return s.UpsertNode(c.Node)
	case *SetNodeStatus:
		return s.SetNodeStatus(c.ID, c.Status, c.At)
	case *SiteJob:
		if _, err := s.UpdateSite(c.Update); err != nil {
			return err
		}
		return s.CreateJob(c.Job)
	case *PutLibraryEntry:
		return s.PutLibraryEntry(c.Entry, c.Replace, c.Quota)
	case *DeleteLibrary:
		return s.DeleteLibraryEntry(c.ID)
	case *SetLicense:
		return result(s.SetLibraryLicense(c.ID, c.Sealed, c.Hint, c.At))
	case *LicenseRead:
		return result(s.MarkLicenseRead(c.ID, c.At))
	}
	return fmt.Errorf("no apply for command %T", c)
}

func result[T any](v *T, err error) any {
	if err != nil {
		return err
	}
	return v
}

// Snapshot captures the store for raft; it is cheap because memdb reads
// are immutable views.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &snapshot{s: f.store.Snapshot()}, nil
}

// Restore replaces the store with a snapshot.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return f.store.Restore(rc)
}

type snapshot struct{ s *state.Snapshot }

func (sn *snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sn.s.WriteTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (sn *snapshot) Release() {}
