// Package accountspec is what the API and the accounts and workspaces
// services say to each other: what a change made. It holds no Raft
// command, so the API that renders it never builds one.
package accountspec

import (
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// TokenMade is a new token and its secret, shown once.
type TokenMade struct {
	Token  state.Token
	Secret string
}

// NewToken makes a token row and its secret; only the row enters Raft.
func NewToken(userID, name string, now time.Time, expiresInDays *int) TokenMade {
	plain := secret.New(secret.TokenPrefix)
	t := state.Token{ID: ids.New(ids.Token), UserID: userID, Name: name, Hash: secret.Hash(plain),
		Prefix: secret.Display(plain), CreatedAt: now}
	if expiresInDays != nil {
		exp := now.Add(time.Duration(*expiresInDays) * 24 * time.Hour)
		t.ExpiresAt = &exp
	}
	return TokenMade{Token: t, Secret: plain}
}

// WorkspaceMade is a new workspace and its owner's membership.
type WorkspaceMade struct {
	Workspace state.Workspace
	Member    state.Member
}
