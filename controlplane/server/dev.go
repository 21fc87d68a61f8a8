package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/accounts"
	"github.com/sandboxd/sandboxd/controlplane/accountspec"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// DevOwnerEmail is the account `sandboxd dev` creates on first start.
const DevOwnerEmail = "owner@localhost"

// DevEnvFile is where `sandboxd dev` writes SANDBOX_URL and SANDBOX_TOKEN
// once a site can be created, and removes them when it stops: a client
// that finds the file can use it at once.
const DevEnvFile = "dev.env"

// devTokenFile keeps the dev owner's token across restarts (mode 0600);
// only its hash is in the store.
const devTokenFile = "dev-token"

// WaitLeader blocks until this node leads, has caught up and the
// cluster's credentials are in the state.
func (s *Server) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !s.node.IsLeader() || !s.Bootstrapped() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for leadership: %w", ctx.Err())
		case <-t.C:
		}
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("waiting for the operator token to be committed: %w", ctx.Err())
	case <-s.operatorReady:
	}
	return nil
}

// EnsureDevOwner makes sure the dev owner account exists on the paid plan
// with a working token, and returns that token. The token is kept in
// <data-dir>/dev-token (mode 0600) so a restart prints the same one; the
// store itself only ever holds its hash.
func (s *Server) EnsureDevOwner(ctx context.Context) (string, error) {
	tokenPath := filepath.Join(s.cfg.DataDir, devTokenFile)
	store := s.node.Store()
	acct, err := store.AccountByEmail(DevOwnerEmail)
	if err != nil {
		return "", err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if acct == nil {
		cmd := accounts.NewAccount(DevOwnerEmail, state.PlanPaid, now)
		if _, err := s.node.Apply(ctx, cmd); err != nil {
			return "", fmt.Errorf("create dev owner: %w", err)
		}
		acct = &cmd.Account
	} else if acct.Plan != state.PlanPaid {
		if _, err := s.node.Apply(ctx, fsm.SetPlan{UserID: acct.ID, Plan: state.PlanPaid, At: now}); err != nil {
			return "", fmt.Errorf("set dev owner plan: %w", err)
		}
	}
	if tok := readEnv(tokenPath)["SANDBOX_TOKEN"]; tok != "" {
		if t, err := store.TokenByHash(secret.Hash(tok)); err == nil && t != nil && t.UserID == acct.ID {
			return tok, nil
		}
	}
	t := accountspec.NewToken(acct.ID, "sandboxd dev", now, nil)
	if _, err := s.node.Apply(ctx, fsm.CreateToken{Token: t.Token}); err != nil {
		return "", fmt.Errorf("create dev token: %w", err)
	}
	return t.Secret, writeFileAtomic(tokenPath, []byte("SANDBOX_TOKEN="+t.Secret+"\n"), 0o600)
}

// WriteDevEnv writes DevEnvFile; call it once a site can be created.
func (s *Server) WriteDevEnv(token string) error {
	content := fmt.Sprintf("SANDBOX_URL=%s\nSANDBOX_TOKEN=%s\n", s.url, token)
	return writeFileAtomic(filepath.Join(s.cfg.DataDir, DevEnvFile), []byte(content), 0o600)
}

// RemoveDevEnv removes DevEnvFile: the system is not (or no longer)
// ready. A data dir from before dev-token existed keeps its token.
func RemoveDevEnv(dataDir string) error {
	env, tok := filepath.Join(dataDir, DevEnvFile), filepath.Join(dataDir, devTokenFile)
	if _, err := os.Stat(tok); errors.Is(err, os.ErrNotExist) {
		if err := os.Rename(env, tok); err == nil || !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(env); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", DevEnvFile, err)
	}
	return nil
}

func readEnv(path string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			out[k] = v
		}
	}
	return out
}
