// Package seal encrypts small secrets (license keys, the cluster CA's
// key, webhook and deploy secrets) for storage in the replicated state:
// AES-256-GCM under a key derived from the cluster's sealing key, so the
// Raft log and snapshots only ever hold ciphertext.
//
// A Sealer holds a keyring: the first key seals, the others only open,
// so the sealing key can be rotated without losing what the old one
// sealed. A sealed value names its key:
//
//	0x01 | key id (8 bytes) | nonce (12 bytes) | ciphertext and tag
//
// where the key id is the first 8 bytes of SHA-256("sandboxd sealing key
// id v1\x00" + key). Values sealed before key ids existed (nonce |
// ciphertext, no prefix) still open: every key of the ring is tried.
package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// version1 opens every value that names its key (see the package doc).
const version1 = 0x01

// KeyIDSize is the size of a key id in a sealed value (hex in text).
const KeyIDSize = 8

// prefixSize is the version byte and the key id.
const prefixSize = 1 + KeyIDSize

// ErrUnknownKey is returned by Open for a value sealed with a key the ring
// lacks; the error names that key's id.
var ErrUnknownKey = errors.New("seal: sealed with a key this keyring lacks")

// Sealer seals with the first key of its ring and opens with any of them.
type Sealer struct{ keys []ringKey }

// ringKey is one key of a ring, derived for the Sealer's purpose.
type ringKey struct {
	id   [KeyIDSize]byte
	aead cipher.AEAD
}

// New derives a sealing key for purpose from one cluster secret: a ring
// of one key.
func New(clusterSecret, purpose string) (*Sealer, error) {
	return NewRing([]string{clusterSecret}, purpose)
}

// NewRing derives purpose's keys from a keyring: keys[0] seals, the
// others only open (what they sealed before a rotation).
func NewRing(keys []string, purpose string) (*Sealer, error) {
	if len(keys) == 0 {
		return nil, errors.New("seal: no sealing key")
	}
	s := &Sealer{}
	for i, k := range keys {
		if k == "" {
			return nil, fmt.Errorf("seal: key %d of %d is empty", i+1, len(keys))
		}
		key, err := hkdf.Key(sha256.New, []byte(k), nil, "sandboxd seal v1 "+purpose, 32)
		if err != nil {
			return nil, fmt.Errorf("seal: derive the %s key: %w", purpose, err)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("seal: %w", err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("seal: %w", err)
		}
		s.keys = append(s.keys, ringKey{id: keyID(k), aead: aead})
	}
	return s, nil
}

func keyID(key string) [KeyIDSize]byte {
	sum := sha256.Sum256([]byte("sandboxd sealing key id v1\x00" + key))
	var id [KeyIDSize]byte
	copy(id[:], sum[:])
	return id
}

// KeyID is the id a sealed value records for key (16 hex digits): what
// operators and logs see of a key, never the key itself.
func KeyID(key string) string {
	id := keyID(key)
	return hex.EncodeToString(id[:])
}

// SealedWith is the id of the key a sealed value names, or "" for a value
// sealed before values named their key.
func SealedWith(sealed []byte) string {
	if len(sealed) < prefixSize || sealed[0] != version1 {
		return ""
	}
	return hex.EncodeToString(sealed[1:prefixSize])
}

// KeyIDs are the ids of the ring's keys, the sealing one first.
func (s *Sealer) KeyIDs() []string {
	out := make([]string, len(s.keys))
	for i, k := range s.keys {
		out[i] = hex.EncodeToString(k.id[:])
	}
	return out
}

// Seal encrypts plaintext with the ring's first key; aad binds it to its
// record (an entry id), so a sealed value copied onto another record
// does not open.
func (s *Sealer) Seal(plaintext, aad string) []byte {
	k := s.keys[0]
	n := k.aead.NonceSize()
	out := make([]byte, prefixSize+n, prefixSize+n+len(plaintext)+k.aead.Overhead())
	out[0] = version1
	copy(out[1:prefixSize], k.id[:])
	if _, err := rand.Read(out[prefixSize:]); err != nil {
		panic("seal: crypto/rand failed: " + err.Error())
	}
	return k.aead.Seal(out, out[prefixSize:], []byte(plaintext), []byte(aad))
}

// Open decrypts what Seal produced for the same aad, with the key the
// value names or, for a value that names none, whichever key opens it.
func (s *Sealer) Open(sealed []byte, aad string) (string, error) {
	if len(sealed) >= prefixSize && sealed[0] == version1 {
		for _, k := range s.keys {
			if bytes.Equal(sealed[1:prefixSize], k.id[:]) {
				out, err := open(k.aead, sealed[prefixSize:], aad)
				if err != nil {
					return "", fmt.Errorf("seal: cannot open with key %x: %w", k.id, err)
				}
				return out, nil
			}
		}
		// One value in 256 sealed before key ids starts with the version
		// byte by chance: it is still tried as such below.
	}
	for _, k := range s.keys {
		if out, err := open(k.aead, sealed, aad); err == nil {
			return out, nil
		}
	}
	if id := SealedWith(sealed); id != "" {
		return "", fmt.Errorf("%w: it needs key %s, the ring has %s", ErrUnknownKey, id, strings.Join(s.KeyIDs(), ", "))
	}
	return "", fmt.Errorf("seal: cannot open (sealed before values named their key) with any of the keys %s", strings.Join(s.KeyIDs(), ", "))
}

func open(aead cipher.AEAD, sealed []byte, aad string) (string, error) {
	n := aead.NonceSize()
	if len(sealed) < n {
		return "", errors.New("value too short")
	}
	out, err := aead.Open(nil, sealed[:n], sealed[n:], []byte(aad))
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// Current reports whether sealed names the ring's sealing key: a
// rotation leaves such a value as it is.
func (s *Sealer) Current(sealed []byte) bool {
	return len(sealed) >= prefixSize && sealed[0] == version1 && bytes.Equal(sealed[1:prefixSize], s.keys[0].id[:])
}

// Reseal opens sealed with whichever key of the ring sealed it and seals
// the plaintext again with the sealing key, for the same aad.
func (s *Sealer) Reseal(sealed []byte, aad string) ([]byte, error) {
	plain, err := s.Open(sealed, aad)
	if err != nil {
		return nil, err
	}
	return s.Seal(plain, aad), nil
}

// ParseKeys splits a sealing key setting into its keys: one per line (a
// key file) or comma-separated (an environment variable), the sealing
// key first. Surrounding blanks are dropped; an empty key or the same key
// twice is an error.
func ParseKeys(setting string) ([]string, error) {
	setting = strings.TrimSpace(setting)
	if setting == "" {
		return nil, errors.New("no sealing key")
	}
	parts := strings.FieldsFunc(setting, func(r rune) bool { return r == '\n' || r == ',' })
	// FieldsFunc drops empty fields; count separators to catch them.
	if n := strings.Count(setting, "\n") + strings.Count(setting, ",") + 1; n != len(parts) {
		return nil, errors.New("the sealing key setting has an empty key (a blank line or two commas in a row)")
	}
	seen := make(map[string]int, len(parts))
	keys := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("sealing key %d of %d is empty", i+1, len(parts))
		}
		if j, dup := seen[p]; dup {
			return nil, fmt.Errorf("sealing keys %d and %d are the same key", j+1, i+1)
		}
		seen[p] = i
		keys = append(keys, p)
	}
	return keys, nil
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
