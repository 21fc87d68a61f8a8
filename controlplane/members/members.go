// Package members is the control plane's side of the fleet's
// credentials: the cluster CA (its key sealed in the replicated state),
// single-use join tokens an operator hands to each new agent, edge or
// server, the exchange of a join token for a member certificate, its
// renewal before expiry, revocation, and operator tokens for the admin
// API. Secrets are kept as hashes; the CA key only ever sealed.
package members

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/commit"
	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/memberspec"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/writes"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/revocation"
	"github.com/sandboxd/sandboxd/internal/seal"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// Defaults for certificate and join token lifetimes.
const (
	DefaultCertTTL      = 7 * 24 * time.Hour
	DefaultJoinTokenTTL = 24 * time.Hour
	MaxJoinTokenTTL     = 30 * 24 * time.Hour
)

// caAAD binds the sealed CA key to its purpose.
const caAAD = "cluster-ca"

// Config wires the service.
type Config struct {
	Store  *state.Store
	Raft   fsm.Applier
	Sealer *seal.Sealer
	// CertTTL is how long member certificates are valid; zero means
	// DefaultCertTTL. Members renew at two thirds of it.
	CertTTL time.Duration
	Now     func() time.Time
	Logger  *slog.Logger
}

// Service issues and checks the fleet's credentials.
type Service struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	ca *pki.CA // unsealed, cached by fingerprint
}

// New returns the service.
func New(cfg Config) *Service {
	if cfg.CertTTL == 0 {
		cfg.CertTTL = DefaultCertTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, log: cfg.Logger.With("component", "members")}
}

func (s *Service) now() time.Time { return s.cfg.Now().UTC().Truncate(time.Second) }

// SealCAKey seals a CA key for the state.
func (s *Service) SealCAKey(keyPEM []byte) []byte { return s.cfg.Sealer.Seal(string(keyPEM), caAAD) }

// CA returns the cluster's CA with its key, unsealed.
func (s *Service) CA() (*pki.CA, error) {
	rec, err := s.cfg.Store.ClusterCA()
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, apierr.Unavailable("the cluster has no CA yet; retry in a moment")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ca != nil && s.ca.Fingerprint() == rec.Fingerprint {
		return s.ca, nil
	}
	key, err := s.cfg.Sealer.Open(rec.KeySealed, caAAD)
	if err != nil {
		return nil, fmt.Errorf("open the cluster CA key (is this server's sealing key the cluster's?): %w", err)
	}
	ca, err := pki.LoadCA(rec.CertPEM, []byte(key))
	if err != nil {
		return nil, err
	}
	s.ca = ca
	return ca, nil
}

// Check is the rpcauth.Checker: a certificate the cluster CA issued is
// honoured until it expires or its member is revoked. (A member this
// server does not know yet is one whose join it has not applied yet —
// a server just restarted, catching up — for only the CA's holders, the
// servers, issue certificates, and always with the member's record.)
func (s *Service) Check(id pki.Identity, cert *x509.Certificate) error {
	m, err := s.cfg.Store.ClusterMember(id.String())
	if err != nil {
		return err
	}
	switch {
	case m == nil:
		return nil
	case m.RevokedAt != nil:
		return errors.New("revoked")
	case cert != nil && pki.IssuedAt(cert).Before(m.ValidFrom):
		return errors.New("this certificate is from before the member's last join")
	}
	return nil
}

// CreateJoinToken makes a single-use join token; the secret is returned
// once. The token carries the CA's fingerprint, so the member that uses
// it trusts this cluster and no other on first contact.
func (s *Service) CreateJoinToken(ctx context.Context, o memberspec.JoinTokenOptions) (string, *state.JoinToken, error) {
	if !o.Role.Valid() {
		return "", nil, apierr.Invalid("role", "role must be agent, edge or server")
	}
	if o.Name != "" && !pki.ValidID(o.Name) {
		return "", nil, apierr.Invalid("name", "name must be 1-64 of a-z 0-9 . _ - starting with a letter or digit")
	}
	if o.TTL == 0 {
		o.TTL = DefaultJoinTokenTTL
	}
	if o.TTL < time.Minute || o.TTL > MaxJoinTokenTTL {
		return "", nil, apierr.Invalid("ttlMinutes", "a join token lives from 1 minute to 30 days")
	}
	if len(o.Description) > 200 {
		return "", nil, apierr.Invalid("description", "description must be at most 200 characters")
	}
	ca, err := s.CA()
	if err != nil {
		return "", nil, err
	}
	now := s.now()
	id := strings.ToLower(ids.Random(8))
	sec := o.Secret
	if sec == "" {
		sec = secret.New("")
	}
	tok := state.JoinToken{ID: id, Hash: secret.Hash(sec), Role: string(o.Role), Name: o.Name, Description: o.Description,
		CreatedAt: now, ExpiresAt: now.Add(o.TTL)}
	if _, err := commit.Apply(ctx, s.cfg.Raft, o.Answer, fsm.CreateJoinToken{Token: tok}, tok); err != nil {
		return "", nil, err
	}
	return memberspec.FormatJoinToken(ca.Fingerprint(), id, sec), &tok, nil
}

// CAFingerprint is the fingerprint of the cluster CA that join tokens
// carry.
func (s *Service) CAFingerprint() (string, error) {
	ca, err := s.CA()
	if err != nil {
		return "", err
	}
	return ca.Fingerprint(), nil
}

// ParsedJoinToken is a join token's parts.
type ParsedJoinToken struct {
	CAFingerprint, ID, Secret string
}

// ParseJoinToken splits a join token; it says what is wrong with one
// that is not.
func ParseJoinToken(tok string) (ParsedJoinToken, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(tok), memberspec.JoinTokenPrefix)
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 || len(parts[0]) != 64 || parts[1] == "" || parts[2] == "" {
		return ParsedJoinToken{}, errors.New("not a join token: expected sbxj1.<CA fingerprint>.<id>.<secret> as `sandboxd admin join-token create` prints it")
	}
	if _, err := hex.DecodeString(parts[0]); err != nil {
		return ParsedJoinToken{}, errors.New("not a join token: the CA fingerprint is not hex")
	}
	return ParsedJoinToken{CAFingerprint: parts[0], ID: parts[1], Secret: parts[2]}, nil
}

// JoinRequest is what a joining member sends.
type JoinRequest struct {
	Token     string `json:"token"`
	Role      string `json:"role"`
	Name      string `json:"name"`
	PublicKey string `json:"publicKey"` // PKIX PEM
}

// Issued is a member's certificate with the CA that signed it.
type Issued struct {
	Certificate string    `json:"certificate"`
	CA          string    `json:"ca"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

// Join spends a join token on a member and issues its certificate.
func (s *Service) Join(ctx context.Context, req JoinRequest) (*Issued, error) {
	p, err := ParseJoinToken(req.Token)
	if err != nil {
		return nil, apierr.Invalid("token", "%v", err)
	}
	id := pki.Identity{Role: pki.Role(req.Role), ID: req.Name}
	if !id.Role.Valid() {
		return nil, apierr.Invalid("role", "role must be agent, edge or server")
	}
	if !pki.ValidID(id.ID) {
		return nil, apierr.Invalid("name", "name must be 1-64 of a-z 0-9 . _ - starting with a letter or digit")
	}
	pub, err := pki.ParsePublicKey([]byte(req.PublicKey))
	if err != nil {
		return nil, apierr.Invalid("publicKey", "%v", err)
	}
	ca, err := s.CA()
	if err != nil {
		return nil, err
	}
	if p.CAFingerprint != ca.Fingerprint() {
		return nil, apierr.Invalid("token", "the join token is for another cluster (CA %s…)", p.CAFingerprint[:12])
	}
	now := s.now()
	// Checked here first, so a guess costs nothing but this read: only a
	// real token's join enters the log (which checks it again).
	tok, err := s.cfg.Store.JoinToken(p.ID)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, apierr.Invalid("publicKey", "%v", err)
	}
	sum := sha256.Sum256(pubDER)
	probe := state.ClusterMember{ID: id.String(), Role: string(id.Role), Name: id.ID}
	if err := tok.Refuses(secret.Hash(p.Secret), probe, hex.EncodeToString(sum[:]), now); err != nil {
		return nil, joinRefused(err)
	}
	certPEM, cert, err := ca.Issue(id, pub, s.cfg.CertTTL, now)
	if err != nil {
		return nil, err
	}
	m := state.ClusterMember{ID: id.String(), Role: string(id.Role), Name: id.ID, Serial: cert.SerialNumber.Text(16),
		IssuedAt: now, ExpiresAt: cert.NotAfter}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.UseJoinToken{TokenID: p.ID, Hash: secret.Hash(p.Secret), KeyHash: keyHash(cert), Member: m}); err != nil {
		return nil, joinRefused(err)
	}
	s.log.Info("member joined", "member", id.String(), "join_token", p.ID, "expires", cert.NotAfter)
	return &Issued{Certificate: string(certPEM), CA: string(ca.CertPEM), ExpiresAt: cert.NotAfter}, nil
}

// Renew issues a fresh certificate to an authenticated member, for a new
// key it sends.
func (s *Service) Renew(ctx context.Context, id pki.Identity, publicKey string) (*Issued, error) {
	if err := s.Check(id, nil); err != nil {
		return nil, apierr.New(401, apierr.CodeAuthRequired, "%s: %v", id, err)
	}
	pub, err := pki.ParsePublicKey([]byte(publicKey))
	if err != nil {
		return nil, apierr.Invalid("publicKey", "%v", err)
	}
	ca, err := s.CA()
	if err != nil {
		return nil, err
	}
	now := s.now()
	certPEM, cert, err := ca.Issue(id, pub, s.cfg.CertTTL, now)
	if err != nil {
		return nil, err
	}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.RenewMember{ID: id.String(), Serial: cert.SerialNumber.Text(16), IssuedAt: now,
		ExpiresAt: cert.NotAfter}); err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return nil, apierr.New(401, apierr.CodeAuthRequired, "%s is not in the cluster", id)
		}
		return nil, err
	}
	return &Issued{Certificate: string(certPEM), CA: string(ca.CertPEM), ExpiresAt: cert.NotAfter}, nil
}

// IssueSelf signs a certificate for a server of this cluster without a
// join token: the leader's own renewals and the bootstrap server.
func (s *Service) IssueSelf(ctx context.Context, name string, pub any) (*Issued, error) {
	id := pki.Identity{Role: pki.RoleServer, ID: name}
	ca, err := s.CA()
	if err != nil {
		return nil, err
	}
	now := s.now()
	certPEM, cert, err := ca.Issue(id, pub, s.cfg.CertTTL, now)
	if err != nil {
		return nil, err
	}
	if _, err := s.cfg.Raft.Apply(ctx, fsm.RenewMember{ID: id.String(), Serial: cert.SerialNumber.Text(16), IssuedAt: now,
		ExpiresAt: cert.NotAfter}); err != nil {
		return nil, err
	}
	return &Issued{Certificate: string(certPEM), CA: string(ca.CertPEM), ExpiresAt: cert.NotAfter}, nil
}

// RevokeMember makes a member's certificates worthless at once.
func (s *Service) RevokeMember(ctx context.Context, id string) error {
	if _, err := rpcIdentity(id); err != nil {
		return apierr.Invalid("id", "%v", err)
	}
	_, err := s.cfg.Raft.Apply(ctx, fsm.RevokeMember{ID: id, At: s.now()})
	if errors.Is(err, state.ErrNotFound) {
		return apierr.NotFound(apierr.CodeNotFound, "member")
	}
	return err
}

// RevokeJoinToken stops a join token from being used.
func (s *Service) RevokeJoinToken(ctx context.Context, id string) error {
	_, err := s.cfg.Raft.Apply(ctx, fsm.RevokeJoinToken{ID: id, At: s.now()})
	if errors.Is(err, state.ErrNotFound) {
		return apierr.NotFound(apierr.CodeNotFound, "join token")
	}
	return err
}

// NewOperatorToken makes an operator token's secret and record.
func NewOperatorToken(name string, now time.Time) (string, state.OperatorToken) {
	return operatorToken(memberspec.NewOperatorSecret(), name, now)
}

func operatorToken(tok, name string, now time.Time) (string, state.OperatorToken) {
	return tok, state.OperatorToken{ID: "op_" + strings.ToLower(ids.Random(8)), Name: name, Hash: secret.Hash(tok), CreatedAt: now}
}

// CreateOperatorToken makes an operator token with the secret tok (from
// NewOperatorSecret; empty for a new one); the secret is returned once.
func (s *Service) CreateOperatorToken(ctx context.Context, ans *writes.Answer[state.OperatorToken], name, tok string) (string, *state.OperatorToken, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 100 {
		return "", nil, apierr.Invalid("name", "name is required, at most 100 characters")
	}
	if tok == "" {
		tok = memberspec.NewOperatorSecret()
	} else if !strings.HasPrefix(tok, memberspec.OperatorTokenPrefix) {
		return "", nil, errors.New("an operator token secret carries its prefix")
	}
	tok, rec := operatorToken(tok, name, s.now())
	if _, err := commit.Apply(ctx, s.cfg.Raft, ans, fsm.CreateOperatorToken{Token: rec}, rec); err != nil {
		return "", nil, err
	}
	return tok, &rec, nil
}

// RevokeOperatorToken deletes an operator token.
func (s *Service) RevokeOperatorToken(ctx context.Context, id string) error {
	_, err := s.cfg.Raft.Apply(ctx, fsm.DeleteOperatorToken{ID: id})
	if errors.Is(err, state.ErrNotFound) {
		return apierr.NotFound(apierr.CodeNotFound, "operator token")
	}
	return err
}

// IsOperator reports whether tok is a live operator token.
func (s *Service) IsOperator(tok string) bool {
	if !strings.HasPrefix(tok, memberspec.OperatorTokenPrefix) {
		return false
	}
	o, err := s.cfg.Store.OperatorTokenByHash(secret.Hash(tok))
	return err == nil && o != nil
}

func rpcIdentity(s string) (pki.Identity, error) {
	role, name, ok := strings.Cut(s, "/")
	id := pki.Identity{Role: pki.Role(role), ID: name}
	if !ok || !id.Role.Valid() || !pki.ValidID(name) {
		return pki.Identity{}, fmt.Errorf("a member id is <role>/<name>, e.g. agent/node-1; got %q", s)
	}
	return id, nil
}

func keyHash(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// joinRefused is the answer to a refused join: one answer for a token
// that is not one (nothing to probe with), the reason for a real token's
// holder (expired, revoked, another role or name, used).
func joinRefused(err error) error {
	switch {
	case errors.Is(err, state.ErrNotFound):
		return apierr.New(401, apierr.CodeAuthRequired, "the join token is not valid")
	case errors.Is(err, state.ErrConflict):
		return apierr.New(401, apierr.CodeAuthRequired, "%s", strings.TrimPrefix(err.Error(), state.ErrConflict.Error()+": "))
	}
	return err
}

// Revocations lists what a member that does not hold the state (a node
// agent) must refuse to honour the rule of Check: each revoked member's
// certificates, and each member's certificates from before its last
// join, while any of them may still be valid — until the last one issued
// before the revocation or join has expired (ttl after it; the member's
// last certificate's expiry if later). Older entries refuse nothing
// that is still valid and are left out, which bounds the list.
func Revocations(ms []*state.ClusterMember, now time.Time, ttl time.Duration) []revocation.Entry {
	if ttl <= 0 {
		ttl = DefaultCertTTL
	}
	var out []revocation.Entry
	for _, m := range ms {
		e := revocation.Entry{ID: m.ID}
		switch {
		case m.RevokedAt != nil:
			e.Revoked, e.Until = true, m.RevokedAt.Add(ttl)
			if m.ExpiresAt.After(e.Until) {
				e.Until = m.ExpiresAt
			}
		case !m.ValidFrom.IsZero():
			e.ValidFrom, e.Until = m.ValidFrom, m.ValidFrom.Add(ttl)
		default:
			continue
		}
		if e.Until.After(now) {
			out = append(out, e)
		}
	}
	return revocation.Normalize(out, now)
}
