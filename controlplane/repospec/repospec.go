// Package repospec is what the API and the repositories service say to
// each other: a connect, a patch, the value sets and a webhook secret. It
// holds no Raft command.
package repospec

import (
	"crypto/rand"
	"encoding/base64"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
)

// Destinations and auth kinds (the addendum's value sets).
const (
	DestPlugin    = "plugin"
	DestTheme     = "theme"
	DestWPContent = "wp-content"
	AuthHTTPS     = "https"
	AuthSSH       = "ssh"
)

// Destinations and AuthKinds are those value sets, for the API document.
var (
	Destinations = []string{DestPlugin, DestTheme, DestWPContent}
	AuthKinds    = []string{AuthHTTPS, AuthSSH}
)

// Connect is what a customer connects.
type Connect struct {
	RepoURL     string
	Branch      string
	Destination string
	FolderName  string
	AuthKind    string
	// Token authenticates an https repository (optional: public ones need none).
	Token      string
	AutoDeploy *bool
	// WebhookSecret is the push webhook's secret (NewWebhookSecret), or
	// empty for a new one: the API makes it first so that the answer it
	// keeps for an Idempotency-Key replay shows it.
	WebhookSecret string
	// Answer, for a REST request, is rendered from the connected
	// repository and goes in its Raft entry (nil: none).
	Answer *writes.Answer[state.Repository]
}

// Patch is what may change after connecting.
type Patch struct {
	Branch     *string
	FolderName *string
	AutoDeploy *bool
}

// CodeNotFound is the error code of an unknown repository.
const CodeNotFound = "repository_not_found"

// NewWebhookSecret is a fresh push webhook secret.
func NewWebhookSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("repospec: crypto/rand failed: " + err.Error())
	}
	return "whsec_" + base64.RawURLEncoding.EncodeToString(b)
}
