package sshkey

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func line(t *testing.T, pub any, comment string) string {
	t.Helper()
	p, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(p))) + comment
}

func TestParse(t *testing.T) {
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	ec, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsa3072, _ := rsa.GenerateKey(rand.Reader, 3072)
	rsa2048, _ := rsa.GenerateKey(rand.Reader, 2048)
	ok := []struct {
		in   string
		typ  string
		bits int
	}{
		{line(t, edPub, " alice@laptop"), "ssh-ed25519", 256},
		{"  " + line(t, edPub, "") + "  \n", "ssh-ed25519", 256},
		{line(t, &ec.PublicKey, " ci"), "ecdsa-sha2-nistp384", 384},
		{line(t, &rsa3072.PublicKey, ""), "ssh-rsa", 3072},
	}
	for _, c := range ok {
		k, err := Parse(c.in)
		if err != nil {
			t.Errorf("%.40s: %v", c.in, err)
			continue
		}
		if k.Type != c.typ || k.Bits != c.bits || !strings.HasPrefix(k.Fingerprint, "SHA256:") || strings.Contains(k.Authorized, " alice") {
			t.Errorf("%.40s: %+v", c.in, k)
		}
	}
	bad := []string{
		"", "ssh-ed25519", "ssh-ed25519 !!!notbase64", line(t, &rsa2048.PublicKey, ""),
		`command="rm -rf /" ` + line(t, edPub, ""), line(t, edPub, "") + "\n" + line(t, edPub, ""),
		"-----BEGIN OPENSSH PRIVATE KEY-----", strings.Repeat("a", MaxLine+1), "ssh-ed25519 AAAA\x00",
	}
	for _, in := range bad {
		if k, err := Parse(in); err == nil {
			t.Errorf("%.60q accepted: %+v", in, k)
		}
	}
	if _, err := Parse(line(t, &rsa2048.PublicKey, "")); err == nil || !strings.Contains(err.Error(), "3072") {
		t.Errorf("short RSA: %v", err)
	}
}

// TestFingerprintMatchesOpenSSH: the fingerprint is the one ssh-keygen
// prints for the same key.
func TestFingerprintMatchesOpenSSH(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "id")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	out, err := exec.Command("ssh-keygen", "-l", "-f", key+".pub").Output()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := exec.Command("cat", key+".pub").Output()
	if err != nil {
		t.Fatal(err)
	}
	k, err := Parse(string(pub))
	if err != nil {
		t.Fatal(err)
	}
	if fields := strings.Fields(string(out)); len(fields) < 2 || fields[1] != k.Fingerprint {
		t.Fatalf("ssh-keygen says %q, we say %s", out, k.Fingerprint)
	}
}
