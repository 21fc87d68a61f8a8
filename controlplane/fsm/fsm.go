package fsm

import (
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

// Apply runs one committed command. Its return value is what the leader's
// raft.ApplyFuture.Response gives back: an error when the command was
// rejected by the store's invariants (nothing was written), otherwise nil
// or the row the command produced.
func (f *FSM) Apply(l *raft.Log) any {
	c, err := decode(l.Data)
	if err != nil {
		// A command this binary does not know: never guess. Every node
		// rejects it the same way, so state stays identical.
		f.log.Error("skipping undecodable command", "index", l.Index, "err", err)
		return fmt.Errorf("apply index %d: %w", l.Index, err)
	}
	return f.apply(c)
}

func (f *FSM) apply(c Command) any {
	s := f.store
	switch c := c.(type) {
	case *CreateAccount:
		return s.CreateAccount(c.Account, c.Workspace)
	case *SetPlan:
		return s.SetPlan(c.UserID, c.Plan, c.At)
	case *CreateToken:
		return s.CreateToken(c.Token)
	case *RevokeToken:
		return s.RevokeToken(c.UserID, c.TokenID)
	case *CreateWorkspace:
		return s.CreateWorkspace(c.Workspace)
	case *CreateInvitation:
		return s.CreateInvitation(c.Invitation)
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
