// Package enroll is a member's side of the fleet's credentials: it
// joins the cluster once with a join token (trusting only the CA whose
// fingerprint the token carries), keeps the key, certificate and CA in
// its data directory, and renews the certificate before it expires.
package enroll

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
)

// Files in a member's credential directory: the certificate and its key
// in one file (replaced in one rename, so a reader never pairs a new key
// with an old certificate), and the CA.
const (
	MemberFile = "member.pem"
	CAFile     = "ca.pem"
)

// Paths of the control plane's enrolment endpoints (on its cluster port).
const (
	JoinPath  = "/internal/members/join"
	RenewPath = "/internal/members/renew"
)

// Config says who joins, where, and where the credentials live.
type Config struct {
	// Dir holds key.pem, cert.pem and ca.pem (made 0700; files 0600).
	Dir  string
	Role pki.Role
	Name string
	// Servers are the control plane's cluster URLs (https://host:port),
	// tried in turn.
	Servers []string
	// JoinToken is spent when Dir holds no certificate yet.
	JoinToken string
	Logger    *slog.Logger
	Now       func() time.Time
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Have reports whether dir already holds a certificate.
func Have(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, MemberFile))
	return err == nil
}

// Load reads the credentials kept in dir.
func Load(dir string) (*rpcauth.Creds, error) {
	member, err := os.ReadFile(filepath.Join(dir, MemberFile))
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	var certPEM, keyPEM []byte
	for rest := member; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			certPEM = append(certPEM, pem.EncodeToMemory(b)...)
		} else {
			keyPEM = pem.EncodeToMemory(b)
		}
	}
	return rpcauth.NewCreds(certPEM, keyPEM, ca)
}

// Save writes credentials to dir: the CA first, then the certificate
// with its key in one atomic replacement.
func Save(dir string, certPEM, keyPEM, caPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("enroll: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, CAFile), caPEM); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, MemberFile), append(append([]byte{}, certPEM...), keyPEM...))
}

// Obtain returns the member's credentials: those in Dir when there are
// any (the name and role they hold must be the configured ones), else
// it joins with the join token, retrying the servers until ctx ends or
// the token is refused.
func Obtain(ctx context.Context, cfg Config) (*rpcauth.Creds, error) {
	cfg.defaults()
	if Have(cfg.Dir) {
		creds, err := Load(cfg.Dir)
		if err != nil {
			return nil, err
		}
		if want := (pki.Identity{Role: cfg.Role, ID: cfg.Name}); creds.Identity() != want {
			return nil, fmt.Errorf("enroll: %s holds the credentials of %s, not %s", cfg.Dir, creds.Identity(), want)
		}
		return creds, nil
	}
	if cfg.JoinToken == "" {
		return nil, fmt.Errorf("enroll: %s has no cluster certificate and no join token was given "+
			"(make one with `sandboxd admin join-token create --role %s` and pass it in SANDBOXD_JOIN_TOKEN or --join-token-file)", cfg.Dir, cfg.Role)
	}
	fp, err := tokenCA(cfg.JoinToken)
	if err != nil {
		return nil, err
	}
	if len(cfg.Servers) == 0 {
		return nil, errors.New("enroll: no control-plane server to join")
	}
	// The key is made once and kept, so a retry after a lost answer
	// presents the same key (the token then still works for it).
	keyPEM, err := pendingKey(cfg.Dir)
	if err != nil {
		return nil, err
	}
	key, err := pki.ParseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	pubPEM, err := pki.EncodePublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(map[string]string{"token": cfg.JoinToken, "role": string(cfg.Role), "name": cfg.Name, "publicKey": string(pubPEM)})
	client := pinnedClient(fp)
	backoff := 200 * time.Millisecond
	for {
		var lastErr error
		for _, srv := range cfg.Servers {
			issued, err := post(ctx, client, srv+JoinPath, body)
			if err == nil {
				if err := checkIssued(issued, fp); err != nil {
					return nil, err
				}
				if err := Save(cfg.Dir, []byte(issued.Certificate), keyPEM, []byte(issued.CA)); err != nil {
					return nil, err
				}
				_ = os.Remove(filepath.Join(cfg.Dir, pendingKeyFile))
				cfg.Logger.Info("joined the cluster", "member", cfg.Role, "name", cfg.Name, "server", srv, "expires", issued.ExpiresAt)
				return rpcauth.NewCreds([]byte(issued.Certificate), keyPEM, []byte(issued.CA))
			}
			var refused *refusal
			if errors.As(err, &refused) {
				return nil, fmt.Errorf("enroll: %s refused the join token: %w", srv, err)
			}
			lastErr = err
			cfg.Logger.Info("join attempt failed", "server", srv, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("enroll: could not join: %w (last: %v)", ctx.Err(), lastErr)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// RenewDue is when a certificate should be renewed: two thirds into its
// life.
func RenewDue(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

// KeepFresh renews creds (with a new key) once they are due, saving them
// to dir, until ctx ends. servers is asked each time, so it may change.
func KeepFresh(ctx context.Context, cfg Config, creds *rpcauth.Creds, servers func() []string) {
	cfg.defaults()
	for {
		wait := time.Until(RenewDue(creds.Leaf()))
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(wait, time.Hour)):
				continue
			}
		}
		if err := Renew(ctx, cfg.Dir, creds, servers()); err != nil {
			cfg.Logger.Warn("certificate renewal failed; retrying", "err", err, "expires", creds.Leaf().NotAfter)
			select {
			case <-ctx.Done():
				return
			case <-time.After(max(time.Second, min(time.Until(creds.Leaf().NotAfter)/10, time.Minute))):
			}
			continue
		}
		cfg.Logger.Info("certificate renewed", "member", creds.Identity().String(), "expires", creds.Leaf().NotAfter)
	}
}

// Renew asks one of servers for a fresh certificate over a new key,
// authenticated by the current one, and swaps it in.
func Renew(ctx context.Context, dir string, creds *rpcauth.Creds, servers []string) error {
	key, err := pki.NewKey()
	if err != nil {
		return err
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		return err
	}
	pubPEM, err := pki.EncodePublicKey(key.Public())
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]string{"publicKey": string(pubPEM)})
	client := creds.Client("", pki.RoleServer)
	defer client.CloseIdleConnections()
	var lastErr error = errors.New("no server to ask")
	for _, srv := range servers {
		issued, err := post(ctx, client, srv+RenewPath, body)
		if err != nil {
			lastErr = err
			continue
		}
		// On disk first: a member restarted later must not load a
		// certificate older than the one it used.
		if err := Save(dir, []byte(issued.Certificate), keyPEM, []byte(issued.CA)); err != nil {
			return err
		}
		return creds.Update([]byte(issued.Certificate), keyPEM)
	}
	return lastErr
}

type issued struct {
	Certificate string    `json:"certificate"`
	CA          string    `json:"ca"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

// refusal is an answer that retrying will not change.
type refusal struct {
	status int
	msg    string
}

func (r *refusal) Error() string { return fmt.Sprintf("%d: %s", r.status, r.msg) }

func post(ctx context.Context, client *http.Client, url string, body []byte) (*issued, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var env struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.Unmarshal(raw, &env)
		msg := cmpOr(env.Error.Message, strings.TrimSpace(string(raw)))
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			return nil, &refusal{status: resp.StatusCode, msg: msg}
		}
		return nil, fmt.Errorf("%d: %s", resp.StatusCode, msg)
	}
	var out issued
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("enroll: answer: %w", err)
	}
	return &out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// tokenCA is the CA fingerprint a join token carries.
func tokenCA(tok string) (string, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(tok), "sbxj1.")
	fp, _, _ := strings.Cut(rest, ".")
	if !ok || len(fp) != 64 {
		return "", errors.New("enroll: not a join token: expected sbxj1.<CA fingerprint>.<id>.<secret> as `sandboxd admin join-token create` prints it")
	}
	return strings.ToLower(fp), nil
}

// pinnedClient trusts only a server whose chain holds the CA with
// fingerprint fp (and whose certificate that CA issued to a server).
func pinnedClient(fp string) *http.Client {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // checked against the pinned CA below
		VerifyConnection: func(cs tls.ConnectionState) error {
			for _, c := range cs.PeerCertificates {
				if c.IsCA && pki.Fingerprint(c) == fp {
					roots := x509.NewCertPool()
					roots.AddCert(c)
					_, err := pki.Verify(cs.PeerCertificates, roots, time.Now(), pki.RoleServer)
					return err
				}
			}
			return errors.New("enroll: the server's CA is not the one the join token names")
		},
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}}
}

func checkIssued(i *issued, fp string) error {
	ca, err := pki.ParseCert([]byte(i.CA))
	if err != nil {
		return fmt.Errorf("enroll: answer: %w", err)
	}
	if pki.Fingerprint(ca) != fp {
		return errors.New("enroll: the server answered with another CA than the join token names")
	}
	return nil
}

const pendingKeyFile = "key.pending.pem"

func pendingKey(dir string) ([]byte, error) {
	p := filepath.Join(dir, pendingKeyFile)
	if b, err := os.ReadFile(p); err == nil {
		return b, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	k, err := pki.NewKey()
	if err != nil {
		return nil, err
	}
	b, err := pki.EncodeKey(k)
	if err != nil {
		return nil, err
	}
	return b, writeAtomic(p, b)
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("enroll: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("enroll: %w", err)
	}
	return nil
}
