// Package sshkey reads the public keys customers give for SSH access:
// one OpenSSH authorized_keys line, of a type and size worth trusting
// (Ed25519, ECDSA, RSA of 3072 bits or more), with its fingerprint as
// OpenSSH prints it.
package sshkey

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"
)

// MinRSABits is the smallest RSA key accepted.
const MinRSABits = 3072

// MaxLine bounds the line a customer may send.
const MaxLine = 16 << 10

// Key is a parsed public key.
type Key struct {
	// Type is the key's algorithm name (ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa).
	Type string
	// Bits is the key's size (256 for Ed25519).
	Bits int
	// Fingerprint is SHA256:<base64>, as `ssh-keygen -l` prints it.
	Fingerprint string
	// Authorized is the key as one authorized_keys line without options
	// or comment: "type base64".
	Authorized string
	// Comment is what followed the key on the line, if anything.
	Comment string
	// Public is the key itself.
	Public ssh.PublicKey
}

// Parse reads one authorized_keys line. The error says in words what is
// wrong with it.
func Parse(line string) (*Key, error) {
	line = strings.TrimSpace(line)
	switch {
	case line == "":
		return nil, errors.New("publicKey is required: paste one line of your .pub file")
	case len(line) > MaxLine:
		return nil, fmt.Errorf("publicKey is longer than %d bytes", MaxLine)
	case !utf8.ValidString(line) || strings.ContainsAny(line, "\r\n\x00"):
		return nil, errors.New("publicKey must be one line of text")
	case strings.Contains(line, "PRIVATE KEY"):
		return nil, errors.New("that is a private key: never share it; paste the public key (the .pub file) instead")
	}
	pub, comment, options, rest, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, errors.New("publicKey is not an OpenSSH public key (expected a line such as \"ssh-ed25519 AAAA… you@host\")")
	}
	if len(options) > 0 {
		return nil, errors.New("publicKey must not carry authorized_keys options")
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, errors.New("publicKey must be a single key")
	}
	k := &Key{Type: pub.Type(), Fingerprint: ssh.FingerprintSHA256(pub), Comment: comment, Public: pub,
		Authorized: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))}
	switch pub.Type() {
	case ssh.KeyAlgoED25519:
		k.Bits = 256
	case ssh.KeyAlgoECDSA256:
		k.Bits = 256
	case ssh.KeyAlgoECDSA384:
		k.Bits = 384
	case ssh.KeyAlgoECDSA521:
		k.Bits = 521
	case ssh.KeyAlgoRSA:
		cpk, ok := pub.(ssh.CryptoPublicKey)
		if !ok {
			return nil, errors.New("publicKey is an RSA key that cannot be read")
		}
		rk, ok := cpk.CryptoPublicKey().(*rsa.PublicKey)
		if !ok {
			return nil, errors.New("publicKey is an RSA key that cannot be read")
		}
		k.Bits = rk.N.BitLen()
		if k.Bits < MinRSABits {
			return nil, fmt.Errorf("RSA keys must have at least %d bits (this one has %d): make one with ssh-keygen -t ed25519", MinRSABits, k.Bits)
		}
	case "ssh-dss":
		return nil, errors.New("DSA keys are not accepted: make one with ssh-keygen -t ed25519")
	default:
		if strings.Contains(pub.Type(), "-cert-") {
			return nil, errors.New("certificates are not accepted: paste the plain public key")
		}
		return nil, fmt.Errorf("%s keys are not accepted: use Ed25519, ECDSA or RSA (3072 bits or more)", pub.Type())
	}
	return k, nil
}
