package sshgate

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// loadHostKey returns the ed25519 host key kept at path, making it on
// first use. The file must be a regular file that only its owner can
// read; a new one is written in full under another name and linked into
// place, so a crash leaves no partial key and two agents starting at once
// end up with the same key.
func loadHostKey(path string) (ssh.Signer, error) {
	s, err := readHostKey(path)
	if !errors.Is(err, os.ErrNotExist) {
		return s, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sshgate: host key directory: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sshgate: generate host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "sandboxd host key")
	if err != nil {
		return nil, fmt.Errorf("sshgate: encode host key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".host-key-*") // made 0600
	if err != nil {
		return nil, fmt.Errorf("sshgate: write host key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(pem.EncodeToMemory(block))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("sshgate: write host key: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return readHostKey(path)
}

func readHostKey(path string) (ssh.Signer, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("sshgate: host key: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("sshgate: host key %s must be a regular file of mode 0600 (it is %v)", path, st.Mode())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sshgate: host key: %w", err)
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("sshgate: host key %s: %w", path, err)
	}
	if t := s.PublicKey().Type(); t != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("sshgate: host key %s is %s, want ed25519", path, t)
	}
	return s, nil
}

// HostKey is the gateway's public host key, to publish so clients can
// check they reach this node.
func (g *Gateway) HostKey() ssh.PublicKey { return g.signer.PublicKey() }

// Fingerprint is the host key's SHA256 fingerprint as OpenSSH prints it
// ("SHA256:…"), for the first-connection prompt and the docs.
func (g *Gateway) Fingerprint() string { return ssh.FingerprintSHA256(g.HostKey()) }

// AuthorizedKey is the host key in authorized_keys form ("ssh-ed25519
// AAAA…"), without a newline, for the API.
func (g *Gateway) AuthorizedKey() string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(g.HostKey())))
}

// KnownHostsLine is the line a client puts in known_hosts to trust this
// gateway at hostport (the name users connect to, e.g. "node1:2222"), so
// they never have to accept an unknown key.
func (g *Gateway) KnownHostsLine(hostport string) string {
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		hostport = net.JoinHostPort(hostport, "22")
	}
	return knownhosts.Line([]string{knownhosts.Normalize(hostport)}, g.HostKey())
}
