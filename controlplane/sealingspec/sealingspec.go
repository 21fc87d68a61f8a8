// Package sealingspec is what the API says of sealing keys: a server's
// keyring and a rotation's report. It holds no Raft command.
package sealingspec

import (
	"fmt"
	"strings"
)

// Rotation is what a rotation did (or, dry, would do).
type Rotation struct {
	// KeyID is the key every value is now sealed with.
	KeyID string `json:"keyId"`
	// Resealed counts the values sealed again with it.
	Resealed int `json:"resealed"`
	// AlreadyCurrent counts the values it found sealed with it already.
	AlreadyCurrent int `json:"alreadyCurrent"`
	// Unreadable are values no key of the leader's opens, left as they
	// are, by kind and the key they name.
	Unreadable []Unreadable `json:"unreadable"`
	DryRun     bool         `json:"dryRun"`
}

// Unreadable counts values of one kind, sealed with one key, that the
// leader cannot open.
type Unreadable struct {
	Kind string `json:"kind"`
	// KeyID is the key they were sealed with; "" for values sealed
	// before values named their key.
	KeyID string `json:"keyId"`
	Count int    `json:"count"`
}

// Status is what one server says of its keyring: the ids of its keys and
// whether they open the cluster CA's key, which every server needs.
type Status struct {
	Server string `json:"server"`
	// KeyIDs are the ids of its keys, the sealing one first.
	KeyIDs []string `json:"keyIds"`
	// ClusterCA is ok, unreadable (this server lacks the key the
	// cluster's values are sealed with) or absent (not in the state yet).
	ClusterCA string `json:"clusterCa"`
	// ClusterCAKeyID is the key the CA key is sealed with; "" when it was
	// sealed before values named their key.
	ClusterCAKeyID string `json:"clusterCaKeyId"`
	// Error, when set, says why the server could not be asked.
	Error string `json:"error,omitempty"`
}

// ClusterCA states a Status reports.
const (
	CAOK         = "ok"
	CAUnreadable = "unreadable"
	CAAbsent     = "absent"
)

// Mismatch explains an unreadable CA key for logs and operators: which
// keys the server has and which one the cluster needs.
func (st Status) Mismatch() string {
	return fmt.Sprintf("this server's sealing keys (%s) cannot open the cluster CA's key, sealed with %s: the cluster's secrets "+
		"were sealed with a key this server lacks. Give it the cluster's sealing keys (--sealing-key-file or SANDBOXD_SEALING_KEY) "+
		"and restart it", strings.Join(st.KeyIDs, ", "), OrUnversioned(st.ClusterCAKeyID))
}

// OrUnversioned names a key by its id, or says it predates key ids.
func OrUnversioned(id string) string {
	if id == "" {
		return "a key from before key ids"
	}
	return "key " + id
}
