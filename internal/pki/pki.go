// Package pki is the cluster's certificate authority: the CA made at
// bootstrap, the certificates it issues to servers, agents and edges
// (each naming its role and id in a URI SAN, SPIFFE style), and the
// check that a peer's certificate chains to the CA and holds the role a
// caller expects. Names and addresses are not checked: a cluster
// certificate proves a role and an id, which is what every caller asks.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"
)

// Role is what a cluster member is allowed to do.
type Role string

// The roles of the fleet.
const (
	RoleServer Role = "server"
	RoleAgent  Role = "agent"
	RoleEdge   Role = "edge"
)

// Valid reports whether r is one of the fleet's roles.
func (r Role) Valid() bool { return r == RoleServer || r == RoleAgent || r == RoleEdge }

// Identity is who a certificate speaks for.
type Identity struct {
	Role Role
	ID   string
}

func (i Identity) String() string { return string(i.Role) + "/" + i.ID }

// uriHost is the trust domain in the identity URIs.
const uriHost = "sandboxd.cluster"

// URI is the identity's SAN: spiffe://sandboxd.cluster/<role>/<id>.
func (i Identity) URI() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: uriHost, Path: "/" + string(i.Role) + "/" + i.ID}
}

// ValidID reports whether id can name a cluster member: 1–64 of
// [a-z0-9._-], starting with a letter or digit.
func ValidID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '.' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

// IdentityOf reads the identity URI of a certificate.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" || u.Host != uriHost {
			continue
		}
		role, id, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		if !ok || !Role(role).Valid() || !ValidID(id) {
			return Identity{}, fmt.Errorf("pki: malformed identity %q", u.String())
		}
		return Identity{Role: Role(role), ID: id}, nil
	}
	return Identity{}, errors.New("pki: the certificate names no cluster identity")
}

// CA is the cluster's signing authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert encoded, as members keep and compare it.
	CertPEM []byte
}

// NewCA makes a self-signed ECDSA P-256 CA valid for ten years.
func NewCA(name string, now time.Time) (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"sandboxd"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := EncodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, keyPEM, nil
}

// LoadCA parses a CA from its PEM certificate and key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("pki: not a CA certificate")
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("pki: the CA key does not match its certificate")
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// Fingerprint is the SHA-256 of the CA certificate (hex), which join
// tokens carry so a joining member trusts the right CA on first contact.
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert) }

// Fingerprint is a certificate's SHA-256 in hex.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// Pool is a cert pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Backdate is how far before its issue a certificate is valid (clocks
// of members drift a little); IssuedAt undoes it.
const Backdate = time.Minute

// IssuedAt is when a certificate this CA made was issued.
func IssuedAt(c *x509.Certificate) time.Time { return c.NotBefore.Add(Backdate) }

// Issue signs a certificate for id over pub, valid for ttl, usable as a
// TLS client and server certificate.
func (ca *CA) Issue(id Identity, pub crypto.PublicKey, ttl time.Duration, now time.Time) ([]byte, *x509.Certificate, error) {
	if !id.Role.Valid() || !ValidID(id.ID) {
		return nil, nil, fmt.Errorf("pki: cannot issue for %q", id.String())
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.ID, OrganizationalUnit: []string{string(id.Role)}, Organization: []string{"sandboxd"}},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id.URI()},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: issue %s: %w", id, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert, nil
}

// NewKey makes a member's private key.
func NewKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: key: %w", err)
	}
	return k, nil
}

// EncodeKey is a private key in PKCS#8 PEM.
func EncodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKey reads a PKCS#8 PEM private key.
func ParseKey(p []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, errors.New("pki: no PRIVATE KEY block")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: parse key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("pki: key cannot sign")
	}
	return s, nil
}

// ParseCert reads the first certificate of a PEM bundle.
func ParseCert(p []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("pki: no CERTIFICATE block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: parse certificate: %w", err)
	}
	return c, nil
}

// EncodePublicKey is a public key in PKIX PEM, the form a joining member
// sends.
func EncodePublicKey(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("pki: encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePublicKey reads a PKIX PEM public key; only ECDSA P-256 and
// Ed25519 keys are taken.
func ParsePublicKey(p []byte) (crypto.PublicKey, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "PUBLIC KEY" {
		return nil, errors.New("pki: no PUBLIC KEY block")
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: parse public key: %w", err)
	}
	switch k := k.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, errors.New("pki: only P-256 ECDSA keys are taken")
		}
	case ed25519.PublicKey:
	default:
		return nil, errors.New("pki: only ECDSA P-256 and Ed25519 keys are taken")
	}
	return k, nil
}

// Verify checks that chain[0] was issued by the CA in roots, is valid now
// for TLS and names a cluster identity with one of roles (any role when
// none are given), and returns that identity.
func Verify(chain []*x509.Certificate, roots *x509.CertPool, now time.Time, roles ...Role) (Identity, error) {
	if len(chain) == 0 {
		return Identity{}, errors.New("pki: no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return Identity{}, fmt.Errorf("pki: %w", err)
	}
	id, err := IdentityOf(chain[0])
	if err != nil {
		return Identity{}, err
	}
	if len(roles) > 0 && !hasRole(roles, id.Role) {
		return Identity{}, fmt.Errorf("pki: %s may not do this (wanted %v)", id, roles)
	}
	return id, nil
}

func hasRole(roles []Role, r Role) bool {
	for _, x := range roles {
		if x == r {
			return true
		}
	}
	return false
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("pki: crypto/rand failed: " + err.Error())
	}
	return n
}

func publicEqual(a, b crypto.PublicKey) bool {
	ea, err1 := x509.MarshalPKIXPublicKey(a)
	eb, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && bytes.Equal(ea, eb)
}
