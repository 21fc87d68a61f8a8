package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/fsm"
	"github.com/sandboxd/sandboxd/controlplane/members"
	"github.com/sandboxd/sandboxd/controlplane/memberspec"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/seal"
	"github.com/sandboxd/sandboxd/internal/secret"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
	"github.com/sandboxd/sandboxd/protocol/edge/v1/edgev1connect"
)

// Files a server keeps in its data dir for the fleet's credentials.
const (
	tlsDir            = "tls"
	sealingKeyFile    = "sealing-key"
	operatorTokenFile = "operator-token"
	// pendingOperatorFile holds the bootstrap operator token until the
	// state holds its hash: a token in operatorTokenFile always works.
	pendingOperatorFile = "operator-token.pending"
	// pendingCAFile holds the bootstrap CA's key, sealed, until the
	// first leader term has put it in the replicated state.
	pendingCAFile = "ca-key.pending"
)

// SealingKeyBytes is the size of a sealing key (base64url in its file).
const SealingKeyBytes = 32

// NewSealingKey makes a sealing key in its text form.
func NewSealingKey() string {
	b := make([]byte, SealingKeyBytes)
	if _, err := rand.Read(b); err != nil {
		panic("server: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// credentials returns this server's cluster certificate: the one kept in
// the data dir; for a brand-new bootstrap server a new CA and a
// certificate it signs itself (the CA enters the state at the first
// leader term); for a new joining server one exchanged for its join
// token at an existing server.
func (s *Server) credentials(ctx context.Context, sealer *seal.Sealer, fresh bool) (*rpcauth.Creds, error) {
	dir := filepath.Join(s.cfg.DataDir, tlsDir)
	if enroll.Have(dir) {
		return enroll.Load(dir)
	}
	switch {
	case s.cfg.Bootstrap && fresh:
		now := time.Now()
		ca, caKey, err := pki.NewCA("sandboxd cluster CA", now)
		if err != nil {
			return nil, err
		}
		key, err := pki.NewKey()
		if err != nil {
			return nil, err
		}
		keyPEM, err := pki.EncodeKey(key)
		if err != nil {
			return nil, err
		}
		ttl := s.cfg.CertTTL
		if ttl == 0 {
			ttl = members.DefaultCertTTL
		}
		certPEM, _, err := ca.Issue(pki.Identity{Role: pki.RoleServer, ID: s.cfg.NodeID}, key.Public(), ttl, now)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if err := writeFileAtomic(filepath.Join(dir, pendingCAFile), sealer.Seal(string(caKey), "cluster-ca"), 0o600); err != nil {
			return nil, err
		}
		if err := enroll.Save(dir, certPEM, keyPEM, ca.CertPEM); err != nil {
			return nil, err
		}
		return enroll.Load(dir)
	case s.cfg.JoinToken != "":
		return enroll.Obtain(ctx, enroll.Config{Dir: dir, Role: pki.RoleServer, Name: s.cfg.NodeID, Servers: s.cfg.Join,
			JoinToken: s.cfg.JoinToken, Logger: s.log})
	}
	return nil, fmt.Errorf("config: %s has no cluster certificate: bootstrap a new cluster (--bootstrap) "+
		"or join one with a join token (`sandboxd admin join-token create --role server`, then SANDBOXD_JOIN_TOKEN or --join-token-file)", dir)
}

// finishBootstrap is leader work: the first term of a new cluster puts
// the bootstrap CA (sealed) and the first operator token in the state.
func (s *Server) finishBootstrap(ctx context.Context) {
	dir := filepath.Join(s.cfg.DataDir, tlsDir)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := s.bootstrapOnce(ctx, dir)
		if err == nil {
			return
		}
		s.log.Warn("recording the cluster's credentials failed; retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (s *Server) bootstrapOnce(ctx context.Context, dir string) error {
	store := s.node.Store()
	if ca, err := store.ClusterCA(); err != nil {
		return err
	} else if ca == nil {
		sealed, err := os.ReadFile(filepath.Join(dir, pendingCAFile))
		if errors.Is(err, os.ErrNotExist) {
			return nil // not the bootstrap server: nothing to record
		} else if err != nil {
			return err
		}
		caCert, err := pki.ParseCert(s.creds.CAPEM())
		if err != nil {
			return err
		}
		leaf := s.creds.Leaf()
		now := time.Now().UTC().Truncate(time.Second)
		var op state.OperatorToken
		if s.bootstrapOperator != "" {
			_, op = members.NewOperatorToken("bootstrap", now)
			op.Hash = secret.Hash(s.bootstrapOperator)
		}
		_, err = s.node.Apply(ctx, fsm.PutClusterCA{
			CA: state.ClusterCA{CertPEM: s.creds.CAPEM(), KeySealed: sealed, Fingerprint: pki.Fingerprint(caCert), CreatedAt: now},
			First: state.ClusterMember{ID: s.creds.Identity().String(), Role: string(pki.RoleServer), Name: s.cfg.NodeID,
				Serial: leaf.SerialNumber.Text(16), IssuedAt: leaf.NotBefore, ExpiresAt: leaf.NotAfter, JoinedAt: now},
			Operator: op,
		})
		if err != nil {
			return err
		}
	}
	if _, err := s.members.CA(); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, pendingCAFile))
	s.bootstrapped.Store(true)
	return nil
}

// Bootstrapped reports whether the cluster's CA is in the state (with
// it, on a new cluster, the first operator token).
func (s *Server) Bootstrapped() bool {
	if s.bootstrapped.Load() {
		return true
	}
	ca, _ := s.node.Store().ClusterCA()
	return ca != nil
}

// clusterHandler serves the mutual-TLS port: enrolment (a join needs
// only its token), agents' registry calls, edges' routes and
// certificates, and everything servers send one another (forwarded API
// requests, blobs, Raft membership). Each path takes only its roles.
func (s *Server) clusterHandler(api http.Handler) http.Handler {
	check := s.members.Check
	mux := http.NewServeMux()
	mux.Handle("POST "+enroll.JoinPath, api)
	mux.Handle("POST "+enroll.RenewPath, rpcauth.Require(check, pki.RoleServer, pki.RoleAgent, pki.RoleEdge)(api))
	mux.Handle("/"+agentv1connect.RegistryServiceName+"/", rpcauth.Require(check, pki.RoleAgent)(api))
	mux.Handle("/"+edgev1connect.RouteServiceName+"/", rpcauth.Require(check, pki.RoleEdge)(api))
	mux.Handle("/"+edgev1connect.CertStorageServiceName+"/", rpcauth.Require(check, pki.RoleEdge)(api))
	mux.Handle("/", rpcauth.Require(check, pki.RoleServer)(api))
	return mux
}

// clusterOnly keeps the cluster's own paths off the public API port:
// nobody reaches them without a cluster certificate.
func clusterOnly(path string) bool {
	return strings.HasPrefix(path, "/internal/") ||
		strings.HasPrefix(path, "/"+agentv1connect.RegistryServiceName+"/") ||
		strings.HasPrefix(path, "/"+edgev1connect.RouteServiceName+"/") ||
		strings.HasPrefix(path, "/"+edgev1connect.CertStorageServiceName+"/")
}

func (s *Server) publicHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if clusterOnly(r.URL.Path) {
			apierr.Write(w, apierr.NotFound(apierr.CodeNotFound, "route"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// registerMembership adds the enrolment endpoints and a server's request
// to be a Raft voter (the cluster port routes them by role).
func (s *Server) registerMembership() {
	s.router.HandleRaw("POST "+enroll.JoinPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req members.JoinRequest
		if err := decodeSmall(r, &req); err != nil {
			apierr.Write(w, err)
			return
		}
		issued, err := s.members.Join(r.Context(), req)
		if err != nil {
			apierr.Write(w, err)
			return
		}
		_ = rest.JSON(w, http.StatusOK, issued)
	}))
	s.router.HandleRaw("POST "+enroll.RenewPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := rpcauth.Peer(r.Context())
		if !ok {
			apierr.Write(w, apierr.AuthRequired())
			return
		}
		var req struct {
			PublicKey string `json:"publicKey"`
		}
		if err := decodeSmall(r, &req); err != nil {
			apierr.Write(w, err)
			return
		}
		issued, err := s.members.Renew(r.Context(), id, req.PublicKey)
		if err != nil {
			apierr.Write(w, err)
			return
		}
		_ = rest.JSON(w, http.StatusOK, issued)
	}))
	s.router.HandleRaw("POST "+voterPath, http.HandlerFunc(s.addVoter))
}

// voterPath is where a server that holds its certificate asks the
// leader to make it a Raft voter.
const voterPath = "/internal/cluster/join"

// voterRequest is a server asking to be a Raft voter.
type voterRequest struct {
	ID          string `json:"id"`
	RaftAddr    string `json:"raftAddr"`
	APIAddr     string `json:"apiAddr"`
	ClusterAddr string `json:"clusterAddr"`
}

func (s *Server) addVoter(w http.ResponseWriter, r *http.Request) {
	peer, ok := rpcauth.Peer(r.Context())
	if !ok || peer.Role != pki.RoleServer {
		apierr.Write(w, apierr.AuthRequired())
		return
	}
	var body voterRequest
	if err := decodeSmall(r, &body); err != nil {
		apierr.Write(w, err)
		return
	}
	switch {
	case body.ID != peer.ID:
		apierr.Write(w, apierr.New(http.StatusForbidden, apierr.CodeInsufficientScope, "server %s may only add itself", peer.ID))
		return
	case body.RaftAddr == "" || body.APIAddr == "" || body.ClusterAddr == "":
		apierr.Write(w, apierr.Invalid("", "raftAddr, apiAddr and clusterAddr are required"))
		return
	}
	if err := s.node.AddVoter(r.Context(), state.Server{ID: body.ID, RaftAddr: body.RaftAddr, APIAddr: body.APIAddr,
		ClusterAddr: body.ClusterAddr}); err != nil {
		apierr.Write(w, apierr.Unavailable("adding %s failed (%v); retry", body.ID, err))
		return
	}
	_ = rest.JSON(w, http.StatusOK, map[string]bool{"joined": true})
}

func decodeSmall(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apierr.Invalid("", "the body is not valid JSON for this request: %v", err)
	}
	return nil
}

// Members is the fleet's credential service (join tokens, certificates,
// operator tokens).
func (s *Server) Members() *members.Service { return s.members }

// Creds is this server's cluster certificate.
func (s *Server) Creds() *rpcauth.Creds { return s.creds }

// ClusterURL is this server's mutual-TLS URL (agents, edges and peers).
func (s *Server) ClusterURL() string { return s.clusterURL }

// OperatorToken is the operator token this server made at bootstrap
// (kept in its data dir), or "" on servers that joined.
func (s *Server) OperatorToken() string { return s.bootstrapOperator }

// raftServerTLS takes Raft connections from servers of the cluster only,
// whose certificates check (once this server has its state) accepts.
func raftServerTLS(c *rpcauth.Creds, check func() rpcauth.Checker) *tls.Config {
	cfg := c.ServerTLS(true)
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		id, err := pki.Verify(cs.PeerCertificates, c.Roots(), time.Now(), pki.RoleServer)
		if err != nil {
			return err
		}
		if ch := check(); ch != nil {
			return ch(id, cs.PeerCertificates[0])
		}
		return nil
	}
	return cfg
}

// publicProtocols: the API port takes HTTP/1.1 and HTTP/2 without TLS
// (h2c); TLS, when wanted, is a proxy's in front.
func publicProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// LocalJoinToken makes a join token for a member this process runs
// itself (dev's agent and edge, benchmarks) when its credential
// directory dir holds none yet; "" when it does.
func (s *Server) LocalJoinToken(ctx context.Context, dir string, role pki.Role) (string, error) {
	if enroll.Have(dir) {
		return "", nil
	}
	tok, _, err := s.members.CreateJoinToken(ctx, memberspec.JoinTokenOptions{Role: role, TTL: 10 * time.Minute,
		Description: "a " + string(role) + " in the server's own process"})
	return tok, err
}

// LocalMember is the credentials of an edge (or other member) this
// process runs itself, kept in dir, and their enrolment config for
// enroll.KeepFresh.
func (s *Server) LocalMember(ctx context.Context, dir string, role pki.Role, name string) (enroll.Config, *rpcauth.Creds, error) {
	cfg := enroll.Config{Dir: dir, Role: role, Name: name, Servers: []string{s.clusterURL}, Logger: s.log}
	tok, err := s.LocalJoinToken(ctx, dir, role)
	if err != nil {
		return cfg, nil, err
	}
	cfg.JoinToken = tok
	creds, err := enroll.Obtain(ctx, cfg)
	return cfg, creds, err
}

// memberCheck is the membership check once the service exists (Raft's
// listener starts before it).
func (s *Server) memberCheck() rpcauth.Checker {
	if m := s.membersReady.Load(); m != nil {
		return m.Check
	}
	return nil
}
