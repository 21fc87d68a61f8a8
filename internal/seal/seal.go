// Package seal encrypts small secrets (license keys) for storage in the
// replicated state: AES-256-GCM under a key derived from the cluster's
// secret, so the Raft log and snapshots only ever hold ciphertext.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Sealer seals and opens secrets with one key.
type Sealer struct{ aead cipher.AEAD }

// New derives a sealing key for purpose from the cluster secret.
func New(clusterSecret, purpose string) (*Sealer, error) {
	if clusterSecret == "" {
		return nil, errors.New("seal: empty cluster secret")
	}
	key, err := hkdf.Key(sha256.New, []byte(clusterSecret), nil, "sandboxd seal v1 "+purpose, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

// Seal encrypts plaintext; aad binds it to its record (an entry id), so
// a sealed value copied onto another record does not open.
func (s *Sealer) Seal(plaintext, aad string) []byte {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic("seal: crypto/rand failed: " + err.Error())
	}
	return s.aead.Seal(nonce, nonce, []byte(plaintext), []byte(aad))
}

// Open decrypts what Seal produced for the same aad.
func (s *Sealer) Open(sealed []byte, aad string) (string, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return "", errors.New("seal: value too short")
	}
	out, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(aad))
	if err != nil {
		return "", fmt.Errorf("seal: cannot open: %w", err)
	}
	return string(out), nil
}

// Hint masks a key as the contract says: bullets, then the last four
// characters; bullets only for keys under 12 characters.
func Hint(key string) string {
	n := utf8.RuneCountInString(key)
	if n < 12 {
		return strings.Repeat("•", n)
	}
	r := []rune(key)
	return strings.Repeat("•", n-4) + string(r[n-4:])
}
