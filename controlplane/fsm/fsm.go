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

func apply(tx *state.Tx, c Command) any { return c.apply(tx) }

func (c CreateAccount) apply(tx *state.Tx) any    { return tx.CreateAccount(c.Account, c.Workspace) }
func (c SetPlan) apply(tx *state.Tx) any          { return tx.SetPlan(c.UserID, c.Plan, c.At) }
func (c CreateToken) apply(tx *state.Tx) any      { return tx.CreateToken(c.Token, c.Quota) }
func (c RevokeToken) apply(tx *state.Tx) any      { return tx.RevokeToken(c.UserID, c.TokenID) }
func (c CreateWorkspace) apply(tx *state.Tx) any  { return tx.CreateWorkspace(c.Workspace, c.Quota) }
func (c CreateInvitation) apply(tx *state.Tx) any { return tx.CreateInvitation(c.Invitation, c.Quota) }
func (c AcceptInvitation) apply(tx *state.Tx) any {
	return result(tx.AcceptInvitation(c.InvitationID, c.UserID, c.At))
}
func (c SetMemberRole) apply(tx *state.Tx) any {
	return result(tx.SetMemberRole(c.WorkspaceID, c.UserID, c.RoleID))
}
func (c RemoveMember) apply(tx *state.Tx) any { return tx.RemoveMember(c.WorkspaceID, c.UserID) }
func (c PutRole) apply(tx *state.Tx) any      { return tx.PutRole(c.Role, c.Update) }
func (c DeleteRole) apply(tx *state.Tx) any   { return tx.DeleteRole(c.WorkspaceID, c.RoleID, c.At) }
func (c CreateJob) apply(tx *state.Tx) any    { return tx.CreateJob(c.Job) }
func (c UpdateJob) apply(tx *state.Tx) any    { return result(tx.UpdateJob(c.Update)) }
func (c UpsertServer) apply(tx *state.Tx) any { return tx.UpsertServer(c.Server) }
func (c RemoveServer) apply(tx *state.Tx) any { return tx.RemoveServer(c.ID) }
func (c AppendMail) apply(tx *state.Tx) any   { return tx.AppendMail(c.Mail) }
func (c RevokeInvitation) apply(tx *state.Tx) any {
	return tx.RevokeInvitation(c.WorkspaceID, c.InvitationID)
}
func (c CreateSiteWithJob) apply(tx *state.Tx) any {
	var err error
	if c.Claim {
		err = tx.ClaimPooledSite(c.Site, c.Job, c.Quota)
	} else {
		err = tx.CreateSiteWithJob(c.Site, c.Job, c.Quota)
	}
	if err == nil && c.Run != nil {
		if c.Run.SiteID != c.Site.ID || c.Run.WorkspaceID != c.Site.WorkspaceID || c.Run.JobID != c.Job.ID {
			return fmt.Errorf("%w: a run is its site's and its job's", state.ErrInvalid)
		}
		err = tx.CreateRun(*c.Run)
	}
	if err != nil || c.Launch == nil {
		return err
	}
	if c.Launch.Demo.SiteID != c.Site.ID || c.Launch.Demo.WorkspaceID != c.Site.WorkspaceID {
		return fmt.Errorf("%w: a launch's demo is its site's", state.ErrInvalid)
	}
	return tx.Launched(*c.Launch)
}
func (c PutWebhook) apply(tx *state.Tx) any    { return tx.PutWebhook(c.Webhook, c.Rotate) }
func (c DeleteWebhook) apply(tx *state.Tx) any { return tx.DeleteWebhook(c.WorkspaceID) }
func (c DemoReady) apply(tx *state.Tx) any     { return tx.DemoReady(c.DemoID, c.At, c.Delivery) }
func (c EndDemo) apply(tx *state.Tx) any       { return tx.EndDemo(c.DemoID, c.Delivery) }
func (c RecordAttempt) apply(tx *state.Tx) any { return tx.RecordAttempt(c.Attempt) }
func (c AddDelivery) apply(tx *state.Tx) any   { return tx.AddDelivery(c.Delivery) }
func (c UpdateSite) apply(tx *state.Tx) any    { return result(tx.UpdateSite(c.Update)) }
func (c DeleteSite) apply(tx *state.Tx) any    { return tx.DeleteSite(c.ID, c.At) }
func (c UpsertNode) apply(tx *state.Tx) any    { return tx.UpsertNode(c.Node) }
func (c SetNodeStatus) apply(tx *state.Tx) any { return tx.SetNodeStatus(c.ID, c.Status, c.At) }
func (c SetSitePresence) apply(tx *state.Tx) any {
	return tx.SetSitePresence(c.NodeID, c.Presence, c.Counts)
}
func (c UpdateSiteWithJob) apply(tx *state.Tx) any { return tx.UpdateSiteWithJob(c.Update, c.Job) }
func (c CreateTemplateWithJob) apply(tx *state.Tx) any {
	return tx.CreateTemplateWithJob(c.Template, c.Job, c.Quota)
}
func (c PutTemplate) apply(tx *state.Tx) any    { return tx.PutTemplate(c.Template, c.IfUpdatedAt) }
func (c DeleteTemplate) apply(tx *state.Tx) any { return tx.DeleteTemplate(c.ID) }
func (c AddLead) apply(tx *state.Tx) any        { return tx.AddLead(c.Lead) }
func (c PutLibraryEntry) apply(tx *state.Tx) any {
	return tx.PutLibraryEntry(c.Entry, c.Replace, c.Quota)
}
func (c DeleteLibraryEntry) apply(tx *state.Tx) any { return tx.DeleteLibraryEntry(c.ID) }
func (c SetLibraryLicense) apply(tx *state.Tx) any {
	return result(tx.SetLibraryLicense(c.ID, c.Sealed, c.Hint, c.At))
}
func (c MarkLicenseRead) apply(tx *state.Tx) any { return result(tx.MarkLicenseRead(c.ID, c.At)) }

func (c Idempotent) apply(tx *state.Tx) any {
	if c.Command == nil || isIdempotent(c.Command) {
		return fmt.Errorf("%w: an idempotent command wraps one plain command", state.ErrInvalid)
	}
	prior, err := tx.IdempotencyHit(c.Record)
	if err != nil {
		return err
	}
	if prior != nil {
		return prior
	}
	res := c.Command.apply(tx)
	if _, failed := res.(error); failed {
		return res
	}
	if err := tx.PutIdempotency(c.Record); err != nil {
		return err
	}
	return res
}

func (c PruneIdempotency) apply(tx *state.Tx) any {
	n, err := tx.PruneIdempotency(c.At)
	if err != nil {
		return err
	}
	return n
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

func (c CreateBlueprint) apply(tx *state.Tx) any { return tx.CreateBlueprint(c.Blueprint, c.Quota) }
func (c PutBlueprint) apply(tx *state.Tx) any    { return tx.PutBlueprint(c.Blueprint, c.IfUpdatedAt) }
func (c PutRun) apply(tx *state.Tx) any          { return tx.PutRun(c.Run) }
func (c ReplaceTemplate) apply(tx *state.Tx) any { return tx.ReplaceTemplate(c.OldID, c.NewID, c.At) }
func (c CreateRunWithJob) apply(tx *state.Tx) any {
	if c.Run.SiteID != c.Job.SiteID || c.Run.JobID != c.Job.ID || c.Run.WorkspaceID != c.Job.WorkspaceID {
		return fmt.Errorf("%w: a run is its job's", state.ErrInvalid)
	}
	if err := tx.CreateRun(c.Run); err != nil {
		return err
	}
	return tx.CreateJob(c.Job)
}
func (c StartBake) apply(tx *state.Tx) any {
	if c.Run.SiteID != c.Site.ID || c.Run.JobID != c.Job.ID || c.Run.TemplateID != c.Template.ID || c.Template.WorkspaceID != c.Site.WorkspaceID {
		return fmt.Errorf("%w: a bake's run, site, job and template belong together", state.ErrInvalid)
	}
	if err := tx.CreateSiteWithJob(c.Site, c.Job, c.SiteQuota); err != nil {
		return err
	}
	if err := tx.CreateTemplate(c.Template, c.TemplateQuota); err != nil {
		return err
	}
	return tx.CreateRun(c.Run)
}
func (c DeleteBlueprint) apply(tx *state.Tx) any { return tx.DeleteBlueprint(c.ID) }

func (c CreateImport) apply(tx *state.Tx) any { return tx.CreateImport(c.Import) }
func (c PutImport) apply(tx *state.Tx) any    { return tx.PutImport(c.Import, c.IfStatus) }
func (c DeleteImport) apply(tx *state.Tx) any { return tx.DeleteImport(c.ID) }
func (c StartImport) apply(tx *state.Tx) any {
	if c.Import.Status != state.ImportRestoring || c.Import.JobID != c.Job.ID || c.Import.SiteID != c.Job.SiteID ||
		c.Import.WorkspaceID != c.Job.WorkspaceID || (c.Site != nil && c.Site.ID != c.Import.SiteID) {
		return fmt.Errorf("%w: an import's restore is its job's and its site's", state.ErrInvalid)
	}
	if err := tx.PutImport(c.Import, c.IfStatus); err != nil {
		return err
	}
	if c.Site != nil {
		return tx.CreateSiteWithJob(*c.Site, c.Job, c.SiteQuota)
	}
	return tx.CreateJob(c.Job)
}
func (c RegisterOAuthClient) apply(tx *state.Tx) any {
	return tx.RegisterOAuthClient(c.Client, c.MaxClients)
}
func (c CreateOAuthCode) apply(tx *state.Tx) any { return tx.CreateOAuthCode(c.Code, c.At) }
func (c RedeemOAuthCode) apply(tx *state.Tx) any {
	return result(tx.RedeemOAuthCode(c.CodeHash, c.Token, c.At))
}

func (c ConnectDomain) apply(tx *state.Tx) any { return result(tx.ConnectDomain(c.Domain)) }
func (c PutDomain) apply(tx *state.Tx) any     { return result(tx.PutDomain(c.Domain, c.IfStatus, c.Job)) }
func (c DisconnectDomain) apply(tx *state.Tx) any {
	return result(tx.DisconnectDomain(c.SiteID, c.Hostname, c.Job))
}
func (c PutCertData) apply(tx *state.Tx) any      { return tx.PutCertData(c.Data) }
func (c DeleteCertData) apply(tx *state.Tx) any   { return tx.DeleteCertData(c.Key) }
func (c LockCert) apply(tx *state.Tx) any         { return tx.LockCert(c.Lock, c.At) }
func (c UnlockCert) apply(tx *state.Tx) any       { return tx.UnlockCert(c.Name, c.Owner) }
func (c AddSSHKey) apply(tx *state.Tx) any        { return tx.AddSSHKey(c.Key, c.Quota) }
func (c DeleteSSHKey) apply(tx *state.Tx) any     { return tx.DeleteSSHKey(c.UserID, c.ID) }
func (c TouchSSHKey) apply(tx *state.Tx) any      { return tx.TouchSSHKey(c.ID, c.At) }
func (c AddCheckpoint) apply(tx *state.Tx) any    { return tx.AddCheckpoint(c.Checkpoint, c.Quota) }
func (c DeleteCheckpoint) apply(tx *state.Tx) any { return tx.DeleteCheckpoint(c.SiteID, c.ID) }
func (c SetCheckpointSizes) apply(tx *state.Tx) any {
	return tx.SetCheckpointSizes(c.SiteID, c.Sizes)
}
func (c CreateRepository) apply(tx *state.Tx) any { return tx.CreateRepository(c.Repository) }
func (c PutRepository) apply(tx *state.Tx) any    { return tx.PutRepository(c.Repository, c.IfUpdatedAt) }
func (c DeleteRepository) apply(tx *state.Tx) any { return tx.DeleteRepository(c.ID) }
func (c RecordDeploy) apply(tx *state.Tx) any     { return tx.RecordDeploy(c.ID, c.SHA, c.At) }
func (c TakePush) apply(tx *state.Tx) any         { return tx.TakePush(c.ID, c.Delivery, c.Job) }
func (c PutClusterCA) apply(tx *state.Tx) any     { return tx.PutClusterCA(c.CA, c.First, c.Operator) }
func (c CreateJoinToken) apply(tx *state.Tx) any  { return tx.CreateJoinToken(c.Token) }
func (c RevokeJoinToken) apply(tx *state.Tx) any  { return tx.RevokeJoinToken(c.ID, c.At) }
func (c UseJoinToken) apply(tx *state.Tx) any {
	return tx.UseJoinToken(c.TokenID, c.Hash, c.KeyHash, c.Member)
}
func (c RenewMember) apply(tx *state.Tx) any {
	return tx.RenewMember(c.ID, c.Serial, c.IssuedAt, c.ExpiresAt)
}
func (c RevokeMember) apply(tx *state.Tx) any        { return tx.RevokeMember(c.ID, c.At) }
func (c CreateOperatorToken) apply(tx *state.Tx) any { return tx.CreateOperatorToken(c.Token) }
func (c DeleteOperatorToken) apply(tx *state.Tx) any { return tx.DeleteOperatorToken(c.ID) }
func (c AddSnapshot) apply(tx *state.Tx) any         { return tx.AddSnapshot(c.Snapshot, c.Keep) }
func (c SetNodeDrain) apply(tx *state.Tx) any        { return tx.SetNodeDrain(c.ID, c.Drain, c.At) }
func (c StartMove) apply(tx *state.Tx) any           { return tx.StartMove(c.SiteID, c.Move, c.Job) }
func (c SwitchMove) apply(tx *state.Tx) any          { return tx.SwitchMove(c.SiteID, c.JobID, c.At) }
func (c FinishMove) apply(tx *state.Tx) any {
	return tx.FinishMove(c.SiteID, c.JobID, c.Address, c.Port, c.RestoredFrom, c.Downtime, c.At)
}
func (c PruneTombstones) apply(tx *state.Tx) any {
	n, err := tx.PruneTombstones(c.Before)
	if err != nil {
		return err
	}
	return n
}
func (c PruneState) apply(tx *state.Tx) any {
	n, err := tx.PruneState(c.At, c.Retention)
	if err != nil {
		return err
	}
	return n
}
func (c OrderCert) apply(tx *state.Tx) any {
	block, err := tx.OrderCert(c.Order, c.Budget)
	switch {
	case err != nil:
		return err
	case block != nil:
		return block
	}
	return nil
}
func (c TakeOverDomain) apply(tx *state.Tx) any { return result(tx.TakeOverDomain(c.Domain, c.From)) }
func (c ExpireDomainClaims) apply(tx *state.Tx) any {
	ds, err := tx.ExpireDomainClaims(c.Before)
	if err != nil {
		return err
	}
	return ds
}
func (c AbortMove) apply(tx *state.Tx) any {
	aborted, err := tx.AbortMove(c.SiteID, c.JobID, c.Reason, c.At)
	if err != nil {
		return err
	}
	return aborted
}
func (c ResealValues) apply(tx *state.Tx) any {
	n, err := tx.ResealValues(c.Values)
	if err != nil {
		return err
	}
	return n
}

func (c PruneOAuthClients) apply(tx *state.Tx) any {
	n, err := tx.PruneOAuthClients(c.At, c.UnusedAfter, c.IdleAfter)
	if err != nil {
		return err
	}
	return n
}
