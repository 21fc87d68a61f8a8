// Package accounts makes accounts and changes what belongs to one: its
// plan, personal API tokens and SSH keys. Every change is one Raft entry,
// under a REST request's answer when one asks (package writes).
package accounts

import (
	"context"
	"errors"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/accountspec"
	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/naming"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/sshkey"
)

// Config wires the service.
type Config struct {
	Store *state.Store
	Raft  fsm.Applier
	Plans plans.Config
	Now   func() time.Time
}

// Service changes accounts.
type Service struct{ cfg Config }

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Millisecond) }

// NewAccount is the command that makes an account with its personal
// workspace (the operator's create and dev's start-up both use it).
func NewAccount(email, plan string, now time.Time) fsm.CreateAccount {
	uid := ids.New(ids.User)
	return fsm.CreateAccount{
		Account:   state.Account{ID: uid, Email: email, Plan: plan, CreatedAt: now, UpdatedAt: now},
		Workspace: state.Workspace{ID: ids.New(ids.Workspace), Name: "Personal", OwnerID: uid, Personal: true, CreatedAt: now, UpdatedAt: now},
	}
}

func validPlan(p string) error {
	if p != state.PlanFree && p != state.PlanPaid {
		return apierr.Invalid("plan", "plan must be free or paid")
	}
	return nil
}

// Create makes an account on a plan, with its personal workspace.
func (s *Service) Create(ctx context.Context, ans *writes.Answer[state.Account], email, plan string) (*state.Account, error) {
	email, err := naming.Email(email)
	if err != nil {
		return nil, err
	}
	if err := validPlan(plan); err != nil {
		return nil, err
	}
	cmd := NewAccount(email, plan, s.now())
	acct := cmd.Account
	acct.PersonalWorkspaceID = cmd.Workspace.ID
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, cmd, acct); err != nil {
		return nil, err
	}
	return &acct, nil
}

// ByEmail is the account of an address, or account_not_found.
func (s *Service) ByEmail(email string) (*state.Account, error) {
	acct, err := s.cfg.Store.AccountByEmail(email)
	if err != nil {
		return nil, err
	}
	if acct == nil {
		return nil, notFound()
	}
	return acct, nil
}

func notFound() error { return apierr.NotFound(apierr.CodeAccountNotFound, "account") }

// SetPlan moves an account to a plan.
func (s *Service) SetPlan(ctx context.Context, email, plan string) (*state.Account, error) {
	if err := validPlan(plan); err != nil {
		return nil, err
	}
	acct, err := s.ByEmail(email)
	if err != nil {
		return nil, err
	}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.SetPlan{UserID: acct.ID, Plan: plan, At: s.now()}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return s.cfg.Store.Account(acct.ID)
}

// CreateToken makes a personal API token of acct, within its plan's
// token quota; it expires after expiresInDays (nil: never).
func (s *Service) CreateToken(ctx context.Context, ans *writes.Answer[accountspec.TokenMade], acct *state.Account, name string, expiresInDays *int) (*accountspec.TokenMade, error) {
	name, err := naming.Field("name", name, 100)
	if err != nil {
		return nil, err
	}
	if d := expiresInDays; d != nil && (*d < 1 || *d > 3650) {
		return nil, apierr.Invalid("expiresInDays", "expiresInDays must be between 1 and 3650")
	}
	quota, err := s.cfg.Plans.Quota(acct.Plan, plans.APITokens)
	if err != nil {
		return nil, err
	}
	made := accountspec.NewToken(acct.ID, name, s.now(), expiresInDays)
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.CreateToken{Token: made.Token, Quota: quota}, made); err != nil {
		return nil, err
	}
	return &made, nil
}

// OperatorToken makes a token for the account of an address, as an
// operator does (no quota: the operator decides).
func (s *Service) OperatorToken(ctx context.Context, ans *writes.Answer[accountspec.TokenMade], email, name string) (*accountspec.TokenMade, error) {
	email, err := naming.Email(email)
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = "created by operator"
	}
	if name, err = naming.Field("name", name, 100); err != nil {
		return nil, err
	}
	acct, err := s.ByEmail(email)
	if err != nil {
		return nil, err
	}
	made := accountspec.NewToken(acct.ID, name, s.now(), nil)
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.CreateToken{Token: made.Token}, made); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, notFound()
		}
		return nil, err
	}
	return &made, nil
}

// RevokeToken revokes one of acct's tokens.
func (s *Service) RevokeToken(ctx context.Context, acct *state.Account, tokenID string) error {
	_, err := s.cfg.Raft.Apply(ctx, fsm.RevokeToken{UserID: acct.ID, TokenID: tokenID})
	if errors.Is(err, state.ErrNotFound) {
		return apierr.NotFound(apierr.CodeTokenNotFound, "token")
	}
	return err
}

// AddSSHKey adds an SSH public key to acct, within its plan's key quota;
// a key can be on one account only.
func (s *Service) AddSSHKey(ctx context.Context, ans *writes.Answer[state.SSHKey], acct *state.Account, name, publicKey string) (*state.SSHKey, error) {
	name, err := naming.Field("name", name, 100)
	if err != nil {
		return nil, err
	}
	k, err := sshkey.Parse(publicKey)
	if err != nil {
		return nil, apierr.Invalid("publicKey", "%v", err)
	}
	quota, err := s.cfg.Plans.Quota(acct.Plan, plans.SSHKeys)
	if err != nil {
		return nil, err
	}
	row := state.SSHKey{ID: ids.New(ids.Key), UserID: acct.ID, Name: name, Type: k.Type, Bits: k.Bits,
		Fingerprint: k.Fingerprint, PublicKey: k.Authorized, CreatedAt: s.now()}
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.AddSSHKey{Key: row, Quota: quota}, row); err != nil {
		return nil, err
	}
	return &row, nil
}

// DeleteSSHKey removes one of acct's SSH keys.
func (s *Service) DeleteSSHKey(ctx context.Context, acct *state.Account, id string) error {
	_, err := s.cfg.Raft.Apply(ctx, fsm.DeleteSSHKey{UserID: acct.ID, ID: id})
	if errors.Is(err, state.ErrNotFound) {
		return apierr.NotFound(apierr.CodeSSHKeyNotFound, "ssh key")
	}
	return err
}
