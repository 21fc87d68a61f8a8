// Package secret makes and checks bearer secrets: API tokens, operator
// tokens and join tokens. Secrets are 256 random bits; only their SHA-256 is
// stored, which is enough for secrets of that strength.
package secret

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// TokenPrefix starts every personal API token so leaked tokens are easy
// to recognise and scan for.
const TokenPrefix = "sbx_"

// New returns prefix followed by 256 random bits in base64url.
func New(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("secret: crypto/rand failed: " + err.Error())
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// Hash is the stored form of a secret.
func Hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// Equal compares two secrets in constant time.
func Equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// Display is the recognisable, non-secret start of a token shown in lists.
func Display(s string) string {
	if len(s) <= len(TokenPrefix)+4 {
		return TokenPrefix
	}
	return s[:len(TokenPrefix)+4]
}

// LooksLikeToken reports whether s has the shape of a personal API token.
func LooksLikeToken(s string) bool {
	return strings.HasPrefix(s, TokenPrefix) && len(s) == len(TokenPrefix)+43
}
