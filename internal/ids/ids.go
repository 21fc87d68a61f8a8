// Package ids makes the opaque, prefixed identifiers the API hands out
// (`site_…`, `ws_…`, `tok_…`). They are random, so they reveal neither
// order nor count, and they are made by handlers, never inside the FSM.
package ids

import (
	"crypto/rand"
	"encoding/base32"
)

// Prefixes fixed by the contract addendum.
const (
	Site       = "site"
	Template   = "tpl"
	Blueprint  = "bp"
	Run        = "bpr"
	Import     = "imp"
	Repository = "repo"
	Job        = "job"
	Workspace  = "ws"
	User       = "usr"
	Token      = "tok"
	Role       = "role"
	Lead       = "lead"
	Library    = "lib"
	Key        = "key"
	Event      = "evt"
	Delivery   = "dlv"
	Demo       = "demo"
	Invitation = "inv"
	Mail       = "mail"
	Checkpoint = "cp"
)

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// New returns prefix_ followed by 80 random bits in lowercase base32.
func New(prefix string) string {
	return prefix + "_" + Random(10)
}

// Random returns n random bytes encoded in lowercase base32.
func Random(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("ids: crypto/rand failed: " + err.Error())
	}
	return enc.EncodeToString(b)
}
