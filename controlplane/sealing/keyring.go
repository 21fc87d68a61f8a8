// Package sealing keeps a server's sealing keys and rotates them: the
// keyring every sealed value of the replicated state is sealed with (one
// Sealer per purpose), and the leader's walk that seals every value
// again with the current key.
package sealing

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"

	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/seal"
)

// Purposes each sealed value's key is derived for (seal.New's purpose):
// a key of one purpose opens nothing of another.
const (
	PurposeClusterCA = "cluster-ca"
	PurposeLibrary   = "library-license"
	PurposeReplay    = "idempotent-replay"
	PurposeWebhooks  = "webhook-signing"
	PurposeGit       = "git-deploy"
	PurposeCerts     = "edge-certificates"
)

// ClusterCAAAD binds the sealed CA key to its one row.
const ClusterCAAAD = "cluster-ca"

// kind is how a kind of sealed value (state.Sealed*) was sealed: its
// purpose and the aad that binds it to its row.
type kind struct {
	purpose string
	aad     func(id string) string
}

// kinds must match what each service seals with: a mismatch shows as
// unreadable values in a rotation (and fails the server's rotation test).
var kinds = map[string]kind{
	state.SealedClusterCA:      {PurposeClusterCA, func(string) string { return ClusterCAAAD }},
	state.SealedLibraryLicense: {PurposeLibrary, func(id string) string { return id }},
	state.SealedReplay:         {PurposeReplay, func(id string) string { return id }},
	state.SealedWebhookSecret:  {PurposeWebhooks, func(id string) string { return id }},
	state.SealedGitToken:       {PurposeGit, func(id string) string { return id + "/token" }},
	state.SealedGitDeployKey:   {PurposeGit, func(id string) string { return id + "/deploy-key" }},
	state.SealedGitWebhook:     {PurposeGit, func(id string) string { return id + "/webhook" }},
	state.SealedCertData:       {PurposeCerts, func(id string) string { return id }},
}

// MinKeyLength refuses keys too short to be one `sandboxd admin
// sealing-key new` made (43 characters).
const MinKeyLength = 32

// Keyring is a server's sealing keys: the first seals, the others (the
// keys before a rotation) only open.
type Keyring struct {
	current string
	ids     []string
	sealers map[string]*seal.Sealer
}

// Parse reads a sealing key setting (one key per line, or
// comma-separated) into a keyring; it refuses an empty, short or
// repeated key, naming it by position only.
func Parse(setting string) (*Keyring, error) {
	keys, err := seal.ParseKeys(setting)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	for i, k := range keys {
		if len(k) < MinKeyLength {
			return nil, fmt.Errorf("config: sealing key %d of %d is too short (make one with `sandboxd admin sealing-key new`)", i+1, len(keys))
		}
	}
	r := &Keyring{current: keys[0], sealers: map[string]*seal.Sealer{}}
	for _, p := range []string{PurposeClusterCA, PurposeLibrary, PurposeReplay, PurposeWebhooks, PurposeGit, PurposeCerts} {
		if r.sealers[p], err = seal.NewRing(keys, p); err != nil {
			return nil, err
		}
	}
	r.ids = r.sealers[PurposeClusterCA].KeyIDs()
	return r, nil
}

// Sealer is the keyring's Sealer for purpose (one of the Purpose
// constants; another is a programming error and panics).
func (r *Keyring) Sealer(purpose string) *seal.Sealer {
	s, ok := r.sealers[purpose]
	if !ok {
		panic("sealing: no purpose " + purpose)
	}
	return s
}

// IDs are the ids of the keyring's keys, the sealing key's first.
func (r *Keyring) IDs() []string { return append([]string(nil), r.ids...) }

// CurrentID is the id of the key that seals.
func (r *Keyring) CurrentID() string { return r.ids[0] }

// Derive makes a 32-byte key for label (session MACs, address hashes)
// from the current sealing key, so a rotation replaces those too.
func (r *Keyring) Derive(label string) ([]byte, error) {
	k, err := hkdf.Key(sha256.New, []byte(r.current), nil, label, 32)
	if err != nil {
		return nil, fmt.Errorf("derive the %s key: %w", label, err)
	}
	return k, nil
}
