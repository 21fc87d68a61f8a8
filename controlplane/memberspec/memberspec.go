// Package memberspec is what the API and the members service say to each
// other: a join token's options, its text form and fresh secrets. It holds
// no Raft command.
package memberspec

import (
	"time"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// Token prefixes: recognisable in a leak scan.
const (
	JoinTokenPrefix     = "sbxj1."
	OperatorTokenPrefix = "sbxo_"
)

// JoinTokenOptions describe a join token to make.
type JoinTokenOptions struct {
	Role        pki.Role
	Name        string // optional: the only member name it joins
	TTL         time.Duration
	Description string
	// Secret is the token's secret part, or empty for a new one: the API
	// makes it first so that the answer it keeps for an Idempotency-Key
	// replay shows it.
	Secret string
	// Answer, for a REST request, is rendered from the token and goes in
	// its Raft entry (nil: none).
	Answer *writes.Answer[state.JoinToken]
}

// FormatJoinToken is the join token a member is given: the CA's
// fingerprint, so it trusts this cluster on first contact, the token's id
// and its secret.
func FormatJoinToken(caFingerprint, id, sec string) string {
	return JoinTokenPrefix + caFingerprint + "." + id + "." + sec
}

// NewJoinSecret is a fresh secret part for a join token.
func NewJoinSecret() string { return secret.New("") }

// NewOperatorSecret is a fresh operator token secret.
func NewOperatorSecret() string { return secret.New(OperatorTokenPrefix) }
