// Package server assembles one control-plane server: the Raft node, the
// REST API, the job dispatcher, request forwarding to the leader, health,
// metrics and the OpenAPI document, served on one HTTP listener.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pluginzip "github.com/sandboxd/sandboxd/connector"

	"github.com/sandboxd/sandboxd/blueprint"
	"github.com/sandboxd/sandboxd/controlplane/accounts"
	"github.com/sandboxd/sandboxd/controlplane/blobs"
	"github.com/sandboxd/sandboxd/controlplane/blueprintrun"
	"github.com/sandboxd/sandboxd/controlplane/blueprints"
	"github.com/sandboxd/sandboxd/controlplane/certstore"
	"github.com/sandboxd/sandboxd/controlplane/domains"
	"github.com/sandboxd/sandboxd/controlplane/fleet"
	"github.com/sandboxd/sandboxd/controlplane/imports"
	"github.com/sandboxd/sandboxd/controlplane/library"
	"github.com/sandboxd/sandboxd/controlplane/oauth"
	"github.com/sandboxd/sandboxd/controlplane/sites"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/controlplane/statemetrics"
	"github.com/sandboxd/sandboxd/controlplane/webhookspec"
	"github.com/sandboxd/sandboxd/controlplane/workspaces"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/objstore"
	"github.com/sandboxd/sandboxd/internal/promreg"
	"github.com/sandboxd/sandboxd/internal/safefetch"
	"github.com/sandboxd/sandboxd/internal/secret"

	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/cluster"
	"github.com/sandboxd/sandboxd/controlplane/jobs"
	"github.com/sandboxd/sandboxd/controlplane/launch"
	"github.com/sandboxd/sandboxd/controlplane/launcher"
	"github.com/sandboxd/sandboxd/controlplane/mail"
	"github.com/sandboxd/sandboxd/controlplane/members"
	"github.com/sandboxd/sandboxd/controlplane/nodes"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/pool"
	"github.com/sandboxd/sandboxd/controlplane/repos"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/routes"
	"github.com/sandboxd/sandboxd/controlplane/sealing"
	"github.com/sandboxd/sandboxd/controlplane/shots"
	"github.com/sandboxd/sandboxd/controlplane/sitejobs"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/controlplane/templates"
	"github.com/sandboxd/sandboxd/controlplane/webhooks"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/hostcookie"
	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/mirror"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/rpclimit"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
	"github.com/sandboxd/sandboxd/protocol/edge/v1/edgev1connect"
	"github.com/sandboxd/sandboxd/scheduler"
)

// Version is reported in the OpenAPI document and /healthz.
var Version = "0.1.0"

// Config is one server's configuration; the zero value plus DataDir is a
// working single-node server (see DefaultConfig).
type Config struct {
	// DataDir holds raft state, the node id, the server's cluster
	// certificate (tls/), the bootstrap operator token and the api-url
	// file the admin CLI reads.
	DataDir string
	// NodeID defaults to the id stored in DataDir, made on first start.
	NodeID string
	// APIAddr is the listen address of the HTTP API.
	APIAddr string
	// AdvertiseAPI is the URL peers and emails use; defaults to
	// http://APIAddr (with the real port when APIAddr ends in :0).
	AdvertiseAPI string
	// RaftAddr is the Raft listen address; empty means an in-process
	// transport (single node only).
	RaftAddr string
	// AdvertiseRaftAddr is what peers dial; defaults to RaftAddr.
	AdvertiseRaftAddr string
	// Bootstrap forms a new single-voter cluster when DataDir is empty.
	Bootstrap bool
	// Join lists cluster URLs (https://host:port of --cluster-addr) of
	// existing servers to join through.
	Join []string
	// JoinToken is spent, once, to get this server's cluster certificate
	// when it joins an existing cluster (`sandboxd admin join-token
	// create --role server`).
	JoinToken string
	// ClusterAddr is the mutual-TLS listen address agents, edges and the
	// other servers reach this one at; empty means 127.0.0.1:0.
	ClusterAddr string
	// AdvertiseCluster is the URL of ClusterAddr others dial; defaults to
	// https://ClusterAddr (with the real port).
	AdvertiseCluster string
	// SealingKey seals every secret kept in the replicated state (the CA
	// key, license keys, webhook secrets, deploy keys, certificates). All
	// servers share it; empty means the one kept in DataDir (made on the
	// first start), which suits one machine only. It may hold several
	// keys, one per line or comma-separated: the first seals, the others
	// only open what they sealed until a rotation (sealing.Parse).
	SealingKey string
	// CertTTL is how long member certificates the leader issues are
	// valid (renewed at two thirds); zero means 7 days.
	CertTTL time.Duration
	Plans   plans.Config
	SMTP    mail.SMTPConfig
	Logger  *slog.Logger
	// JobWorkers bounds concurrent jobs on the leader; zero means 16.
	JobWorkers int
	// JobsPerWorkspace bounds how many of those one workspace's jobs may
	// hold, so one tenant cannot take every worker; zero means a quarter
	// of JobWorkers (4 of 16). See jobs.Config.PerWorkspace.
	JobsPerWorkspace int
	// Now is the clock handlers stamp commands with; nil means time.Now.
	Now func() time.Time
	// LeaderWait is how long a request waits out an election before it is
	// answered 503 service_unavailable; zero means 5s.
	LeaderWait time.Duration

	// ReadHeaderTimeout bounds how long a client may take to send a
	// request's line and headers; zero means 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection (HTTP/1) or one without
	// open streams (HTTP/2) after this long; zero means 2m.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers; zero means 64 KiB.
	MaxHeaderBytes int
	// BodyTimeout bounds the whole body of an API route that takes JSON
	// (up to 1 MiB); zero means 1m. UploadTimeout does the same for the
	// routes that take files (plugin ZIPs up to 64 MiB, peer blobs up to
	// 512 MiB); zero means 30m (256 MiB at about 150 KB/s).
	BodyTimeout   time.Duration
	UploadTimeout time.Duration
	// StallTimeout cuts an API client that sends no body bytes, or takes
	// none of its response, for this long; zero means 1m.
	//
	// There is no server-wide ReadTimeout or WriteTimeout: both count from
	// the start of a request, so they would cut the edges' route stream (a
	// Connect stream that lives as long as the edge) and slow but moving
	// uploads. API routes get the per-request deadlines above
	// (internal/deadline); raw handlers (Connect RPCs, health, metrics)
	// only the header, idle and header-size bounds.
	StallTimeout time.Duration

	// SandboxDomain is the domain sites live under: <slug>.<domain>.
	SandboxDomain string
	// SiteScheme and SitePort form site URLs with the edge's address:
	// http://<slug>.<domain>:<port> (the port is left out when default).
	SiteScheme string
	SitePort   int
	// Strategy places sites: spread or binpack.
	Strategy scheduler.Strategy
	// ExpireInterval is how often the leader deletes sites past their
	// expiresAt; zero means 15s.
	ExpireInterval time.Duration
	// Pool is how many ready fresh sites of each PHP version every node
	// keeps for creates to claim (made with the paid plan's disk, so paid
	// creates claim them); empty keeps none. Templates set their own.
	Pool map[string]int
	// HeartbeatInterval is what agents are told to use; zero means 2s.
	HeartbeatInterval time.Duration
	// NodeDownAfter marks a node down (its sites unavailable) after this
	// long without a heartbeat; zero means 5 heartbeat intervals.
	NodeDownAfter time.Duration
	// SnapshotEvery is how often each running site's files and database
	// are copied to the blob store; zero takes no scheduled snapshots.
	SnapshotEvery time.Duration
	// SnapshotsKept is how many snapshots of a site are kept; zero means 2.
	SnapshotsKept int
	// RescheduleAfter is how long a node may be down before its sites are
	// restored on other nodes from their latest snapshots; zero never.
	RescheduleAfter time.Duration
	// FleetTick is how often the leader looks after snapshots, drains
	// and lost nodes; zero means 2s.
	FleetTick time.Duration
	// OrphanGrace is how long a node reports a site that is no longer its
	// own (deleted or moved while it was away) before it is told to
	// remove it; zero means 30s.
	OrphanGrace time.Duration
	// FetchAllow lists address ranges customer URLs (zipUrl, release
	// assets) may reach although private or loopback; empty allows none.
	FetchAllow []netip.Prefix
	// ResourceMirror maps the remote URLs Blueprints name (wordpress.org,
	// code hosts) to the operator's mirror; nil fetches them directly.
	ResourceMirror *mirror.Mirror
	// ImportStore is the S3-compatible store clients upload large
	// imports to directly; an empty Endpoint means none (multipart
	// answers mode local).
	ImportStore objstore.Config
	// BlobStore is the S3-compatible bucket every server keeps blobs
	// (Library ZIPs, template artifacts, import archives) in; an empty
	// Endpoint keeps them in the data directory, copied between servers.
	BlobStore blobs.S3Config
	// MaxImportBytes bounds one import's archive; zero means
	// imports.DefaultMaxSize.
	MaxImportBytes int64
	// GitHubAPI is the code host's API base URL for Library repository
	// entries; empty means https://api.github.com.
	GitHubAPI string
	// TrustedProxies are the load balancers or proxies in front of the
	// servers whose X-Forwarded-For is believed when they are the TCP peer
	// (see rest.ForwardedClient); empty, the default, trusts none and
	// attributes each request to its TCP peer. Servers vouch for their
	// clients to one another over the cluster port, whatever this says.
	TrustedProxies []netip.Prefix
	// RateLimits bounds failed authentications per address and writes per
	// token and per address (429 rate_limited with Retry-After); the zero
	// value limits nothing, DefaultConfig sets api.DefaultRateLimits.
	RateLimits api.RateLimits
	// OAuthClients bound the OAuth clients anyone may register: a cap
	// on how many the cluster keeps, and when unused ones are removed
	// (see oauth.Limits; zero values are its defaults). Registrations
	// per address are RateLimits.Registrations.
	OAuthClients oauth.Limits
	// OAuthCollectInterval is how often the leader removes unused OAuth
	// clients; zero means 1h.
	OAuthCollectInterval time.Duration
	// LaunchLimits bound public launches per address and per template;
	// the zero value limits nothing, DefaultConfig sets
	// launcher.DefaultLimits.
	LaunchLimits launcher.Limits
	// WebhookSchedule is the wait before each webhook retry; nil means
	// webhooks.DefaultSchedule (8 attempts in all).
	WebhookSchedule []time.Duration
	// WebhookRoots, when set, replaces the system's CA pool for webhook
	// deliveries (tests; operators use SSL_CERT_FILE).
	WebhookRoots *x509.CertPool
	// DemoInterval is how often the leader looks for demos that became
	// ready or ended; zero means 500ms.
	DemoInterval time.Duration
	// DNSResolver is host:port of the DNS server custom-domain checks
	// ask; empty means the first nameserver in /etc/resolv.conf.
	DNSResolver string
	// EdgeAddrs are the edges' public addresses: what apex custom domains
	// point their A/AAAA records at. Without any, only subdomains (a
	// CNAME to the site's sandbox host) can be connected.
	EdgeAddrs []netip.Addr
	// DomainCheckInterval is how often the leader checks pending custom
	// domains by itself (and releases claims pending past
	// state.ClaimTTL); zero means 1m.
	DomainCheckInterval time.Duration
	// Retention is how long the leader's hourly prune keeps finished
	// jobs, old mail, spent invitations and tokens, finished runs,
	// ended imports and leads; the zero value means
	// state.DefaultRetention.
	Retention state.Retention
	// CertBudget bounds the certificate orders the edges place with the
	// ACME CA, all from one account (see certstore.DefaultBudget); the
	// zero value bounds nothing.
	CertBudget state.CertBudget

	// RaftHeartbeatTimeout and RaftElectionTimeout tune failure detection;
	// zero keeps cluster's defaults.
	RaftHeartbeatTimeout time.Duration
	RaftElectionTimeout  time.Duration
	// FastRaftForTests and NoSyncForTests tune Raft for in-process tests.
	FastRaftForTests bool
	NoSyncForTests   bool
	// RaftTrailingLogsForTests lowers how many entries survive a snapshot,
	// so tests can force a snapshot install on a new member.
	RaftTrailingLogsForTests uint64
}

// DefaultConfig is the embedded default: single node, data in ./.data.
func DefaultConfig() Config {
	return Config{DataDir: ".data", APIAddr: "127.0.0.1:8080", Bootstrap: true, Plans: plans.Default(),
		SandboxDomain: "localhost", SiteScheme: "http", SitePort: 8081, RateLimits: api.DefaultRateLimits(),
		LaunchLimits: launcher.DefaultLimits(), CertBudget: certstore.DefaultBudget()}
}

// Validate reports an unusable configuration.
func (c Config) Validate() error {
	switch {
	case c.DataDir == "":
		return errors.New("config: data dir is required")
	case c.APIAddr == "":
		return errors.New("config: API address is required")
	case c.RaftAddr == "" && len(c.Join) > 0:
		return errors.New("config: joining a cluster needs a Raft address (--raft-addr)")
	case c.Bootstrap && len(c.Join) > 0:
		return errors.New("config: bootstrap and join are exclusive")
	}
	if err := c.CertBudget.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return c.Plans.Validate()
}

// Server is one running control-plane server.
type Server struct {
	cfg        Config
	log        *slog.Logger
	node       *cluster.Node
	router     *rest.Router
	handler    http.Handler
	api        *api.API
	dispatcher *jobs.Dispatcher
	metrics    *promreg.Registry
	registry   *nodes.Registry
	pool       *pool.Pool
	launcher   *launcher.Launcher
	listener   net.Listener
	http       *http.Server
	url        string
	stopJoin   context.CancelFunc
	blobSync   *blobs.Syncer
	stopSync   context.CancelFunc

	members           *members.Service
	creds             *rpcauth.Creds
	peers             *http.Client // mutual TLS to other servers
	clusterLn         net.Listener
	clusterHTTP       *http.Server
	clusterURL        string
	bootstrapOperator string
	// operatorReady is closed once bootstrapOperator is in its file and
	// its hash in this server's state (at once when there is none).
	operatorReady chan struct{}
	bootstrapped  atomic.Bool
	membersReady  atomic.Pointer[members.Service]
	stopRenew     context.CancelFunc
	sealing       *sealingService
}

// New opens the node's storage, starts Raft and binds the API listener.
// Serving starts with Start.
func New(cfg Config) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.httpDefaults()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if cfg.NodeID == "" {
		if cfg.NodeID, err = persistent(filepath.Join(cfg.DataDir, "node-id"), func() string { return "server-" + ids.Random(5) }); err != nil {
			return nil, err
		}
	}
	if cfg.SealingKey == "" {
		if cfg.SealingKey, err = persistent(filepath.Join(cfg.DataDir, sealingKeyFile), NewSealingKey); err != nil {
			return nil, err
		}
	}
	keys, err := sealing.Parse(cfg.SealingKey)
	if err != nil {
		return nil, err
	}
	_, statErr := os.Stat(filepath.Join(cfg.DataDir, "raft", "raft.db"))
	fresh := errors.Is(statErr, os.ErrNotExist)
	// A blob store that cannot be used stops the server before Raft
	// starts.
	blobStore, err := openBlobs(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.APIAddr, err)
	}
	// Whatever was started is stopped again, last first, if New fails.
	closers := []func() error{ln.Close}
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				_ = closers[i]()
			}
		}
	}()
	url := cfg.AdvertiseAPI
	if url == "" {
		url = "http://" + ln.Addr().String()
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("node_id", cfg.NodeID), listener: ln, url: strings.TrimRight(url, "/")}

	clusterAddr := cmp.Or(cfg.ClusterAddr, "127.0.0.1:0")
	cln, err := net.Listen("tcp", clusterAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", clusterAddr, err)
	}
	closers = append(closers, cln.Close)
	s.clusterURL = strings.TrimRight(cmp.Or(cfg.AdvertiseCluster, "https://"+cln.Addr().String()), "/")
	caSealer := keys.Sealer(sealing.PurposeClusterCA)
	s.operatorReady = make(chan struct{})
	if fresh && cfg.Bootstrap {
		// The token waits in its pending file until the state holds its
		// hash (watchOperatorToken): a token an operator can read works.
		if s.bootstrapOperator, err = persistent(filepath.Join(cfg.DataDir, pendingOperatorFile), func() string {
			tok, _ := members.NewOperatorToken("bootstrap", time.Now())
			return tok
		}); err != nil {
			return nil, err
		}
	} else if b, err := os.ReadFile(filepath.Join(cfg.DataDir, operatorTokenFile)); err == nil {
		s.bootstrapOperator = strings.TrimSpace(string(b))
		close(s.operatorReady)
	} else if b, err := os.ReadFile(filepath.Join(cfg.DataDir, pendingOperatorFile)); err == nil {
		s.bootstrapOperator = strings.TrimSpace(string(b)) // stopped before its hash was committed
	} else {
		close(s.operatorReady)
	}
	joinCtx, cancelJoin := context.WithTimeout(context.Background(), 2*time.Minute)
	s.creds, err = s.credentials(joinCtx, caSealer, fresh)
	cancelJoin()
	if err != nil {
		return nil, err
	}
	if id := s.creds.Identity(); id != (pki.Identity{Role: pki.RoleServer, ID: cfg.NodeID}) {
		return nil, fmt.Errorf("config: %s holds the certificate of %s, not server/%s", filepath.Join(cfg.DataDir, tlsDir), id, cfg.NodeID)
	}
	s.peers = s.creds.Client("", pki.RoleServer)
	s.clusterLn = tls.NewListener(cln, s.creds.ServerTLS(false))

	store := state.NewStore()
	node, err := cluster.New(cluster.Config{
		NodeID: cfg.NodeID, DataDir: filepath.Join(cfg.DataDir, "raft"), RaftAddr: cfg.RaftAddr,
		AdvertiseRaftAddr: cfg.AdvertiseRaftAddr, APIAddr: s.url, ClusterAddr: s.clusterURL, Bootstrap: cfg.Bootstrap,
		Logger: cfg.Logger, FastTimeoutsForTests: cfg.FastRaftForTests, NoSyncForTests: cfg.NoSyncForTests,
		HeartbeatTimeout: cfg.RaftHeartbeatTimeout, ElectionTimeout: cfg.RaftElectionTimeout,
		InmemTransport: cfg.RaftAddr == "", TrailingLogs: cfg.RaftTrailingLogsForTests,
		ServerTLS: raftServerTLS(s.creds, s.memberCheck), ClientTLS: s.creds.ClientTLS("", pki.RoleServer),
	}, store)
	if err != nil {
		return nil, err
	}
	closers = append(closers, node.Shutdown)
	s.node = node
	s.members = members.New(members.Config{Store: store, Raft: node, Sealer: caSealer, CertTTL: cfg.CertTTL, Now: cfg.Now,
		Logger: cfg.Logger})
	s.membersReady.Store(s.members)
	node.OnLeader(s.finishBootstrap)
	s.sealing = newSealingService(s, keys)

	var mailer workspaces.Mailer = mail.NewOutbox(node)
	if cfg.SMTP.Addr != "" {
		mailer = mail.NewSMTP(cfg.SMTP)
	}
	s.dispatcher = jobs.NewDispatcher(jobs.Config{Store: store, Raft: node, Workers: cfg.JobWorkers,
		PerWorkspace: cfg.JobsPerWorkspace, Logger: cfg.Logger, Now: cfg.Now})
	s.registry = nodes.New(nodes.Config{Store: store, Raft: node, Creds: s.creds, HeartbeatInterval: cfg.HeartbeatInterval,
		DownAfter: cfg.NodeDownAfter, OrphanGrace: cfg.OrphanGrace, CertTTL: cfg.CertTTL,
		Now: cfg.Now, Logger: cfg.Logger})
	sealer, replaySealer := keys.Sealer(sealing.PurposeLibrary), keys.Sealer(sealing.PurposeReplay)
	if cfg.GitHubAPI == "" {
		cfg.GitHubAPI = "https://api.github.com"
	}
	s.blobSync = &blobs.Syncer{Store: blobStore, Shared: cfg.BlobStore.Endpoint != "", Wanted: func() ([]string, error) { return wantedBlobs(store) },
		Peers: s.peerURLs, Client: s.creds.Client("", pki.RoleServer), Interval: 2 * time.Second, Log: s.log.With("component", "blobs")}
	fetch := safefetch.New(cfg.FetchAllow, 5*time.Minute)
	runners := &sitejobs.Runners{Store: store, Raft: node, Agents: s.registry, Blobs: blobStore, Fetch: fetch,
		Artifacts: blobStore, Held: s.registry, Now: cfg.Now}
	runners.SnapshotsKept = cfg.SnapshotsKept
	runners.DiskMB = func(site *state.Site) int {
		acct, err := store.Account(site.UserID)
		if err != nil || acct == nil {
			return 0
		}
		return cfg.Plans.For(acct.Plan).SiteDiskMB
	}
	runners.SleepAfterSeconds = func(site *state.Site) int64 {
		acct, err := store.Account(site.UserID)
		if err != nil || acct == nil {
			return 0
		}
		return sites.SleepAfterSeconds(cfg.Plans.For(acct.Plan))
	}
	runners.Register(s.dispatcher)
	node.OnLeader(func(ctx context.Context) {
		runners.Fleet(ctx, sitejobs.FleetConfig{SnapshotEvery: cfg.SnapshotEvery, RescheduleAfter: cfg.RescheduleAfter, Tick: cfg.FleetTick,
			Placer: s.registry, Strategy: cfg.Strategy, SiteMemoryMB: nodes.SiteMemoryMB})
	})
	node.OnLeader(func(ctx context.Context) { s.blobSync.Collect(ctx, 10*time.Minute, time.Hour) })
	node.OnLeader(s.registry.Monitor)
	node.OnLeader(func(ctx context.Context) { runners.CollectTemplates(ctx, 10*time.Second, s.registry) })
	s.pool = pool.New(pool.Config{Store: store, Raft: node, Nodes: s.registry, SiteURL: s.siteURL, Stock: cfg.Pool,
		StockDiskMB: cfg.Plans.Paid.SiteDiskMB, TemplateDiskMB: cfg.Plans.Paid.SiteDiskMB, Now: cfg.Now, Logger: cfg.Logger})
	node.OnLeader(func(ctx context.Context) { s.pool.Fill(ctx, 2*time.Second) })
	node.OnLeader(func(ctx context.Context) { pruneIdempotency(ctx, node, cfg.Now, time.Hour, s.log) })
	retention := cfg.Retention
	if retention == (state.Retention{}) {
		retention = state.DefaultRetention()
	}
	node.OnLeader(func(ctx context.Context) { pruneState(ctx, node, cfg.Now, time.Hour, retention, s.log) })
	node.OnLeader(func(ctx context.Context) {
		runners.Expire(ctx, cmp.Or(cfg.ExpireInterval, 15*time.Second), func() ([]*state.Site, error) {
			sites, _, err := store.AllSites()
			return sites, err
		})
	})

	s.metrics = promreg.New()
	s.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		cluster.NewCollector(node), s.dispatcher, s.registry, statemetrics.New(statemetrics.FromStore(store)))
	metrics := rest.NewMetrics(s.metrics)

	s.router = rest.NewRouter(cfg.Logger)
	// Every writer the REST API starts goes through one applier that
	// carries a request's Idempotency-Key record with its command.
	// Every service writes through Raft itself; a REST request's answer
	// goes to the service that makes its change (package writes).
	lib := library.New(library.Config{Store: store, Raft: node, Plans: cfg.Plans, Blobs: blobStore, Sealer: sealer, Fetch: fetch,
		GitHubAPI: cfg.GitHubAPI, GitHubHTTP: &http.Client{Timeout: 30 * time.Second}, Replicate: s.blobSync.Push,
		Now: cfg.Now, Logger: cfg.Logger})
	shotKey, err := keys.Derive("sandboxd screenshot url v1")
	if err != nil {
		return nil, err
	}
	shotSigner := shots.Signer{Key: shotKey, Base: s.url, Now: cfg.Now}
	siteService := sites.New(sites.Config{Store: store, Raft: node, Plans: cfg.Plans, Nodes: s.registry, Strategy: cfg.Strategy,
		SiteURL: s.siteURL, Zips: lib, CheckURL: func(raw string) error { _, err := fetch.CheckURL(raw); return err }, Pools: s.pool,
		ShotURL: shotSigner.URL, Now: cfg.Now})
	tpls := templates.New(templates.Config{Store: store, Raft: node, Plans: cfg.Plans, Now: cfg.Now})
	// The operator's mirror may be on their private network: its own
	// client reaches its addresses, which tenant URLs still cannot.
	mirrorFetch := safefetch.New(append(slices.Clone(cfg.FetchAllow), addressesOf(cfg.ResourceMirror.Targets())...), 5*time.Minute)
	resourceFetch := func(ctx context.Context, u string, max int64) ([]byte, error) {
		to, mapped, err := cfg.ResourceMirror.Resolve(u)
		switch {
		case err != nil:
			return nil, err
		case mapped:
			return mirrorFetch.Get(ctx, to, max, nil)
		}
		return fetch.Get(ctx, to, max, nil)
	}
	env := func() blueprint.Env { return blueprintEnv(s.registry.AvailablePHP(), cfg.ResourceMirror, fetch) }
	bps := blueprints.New(blueprints.Config{Store: store, Raft: node, Plans: cfg.Plans, Now: cfg.Now, Zips: lib,
		Fetch: resourceFetch, Env: env, Sites: siteService})
	runners.Blueprints = blueprintrun.New(blueprintrun.Config{Store: store, Raft: node, Agents: s.registry, Fetch: resourceFetch,
		Blob: blobStore.Get, Env: env, Now: cfg.Now, Logger: cfg.Logger,
		// git connects by itself: the URL is the mirror's, or one whose
		// every address the guard allows, and git is pinned to one.
		GitURL: func(ctx context.Context, raw string) (string, string, error) {
			to, mapped, err := cfg.ResourceMirror.Resolve(raw)
			switch {
			case err != nil:
				return "", "", err
			case mapped:
				_, err = mirrorFetch.CheckURL(to)
				return to, "", err
			}
			pin, err := fetch.Pin(ctx, to)
			return to, pin, err
		}})
	var objects imports.ObjectStore
	if cfg.ImportStore.Endpoint != "" {
		octx, ocancel := context.WithTimeout(context.Background(), 30*time.Second)
		bucket, err := objstore.New(octx, cfg.ImportStore)
		ocancel()
		if err != nil {
			return nil, fmt.Errorf("import store: %w", err)
		}
		objects = bucket
	}
	importService, err := imports.New(imports.Config{Store: store, Raft: node, Sites: siteService, Blobs: blobStore,
		Dir: filepath.Join(cfg.DataDir, "imports"), MaxSize: cfg.MaxImportBytes, Objects: objects, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	runners.Imports = importService
	connectKey, err := keys.Derive("sandboxd connect session v1")
	if err != nil {
		return nil, err
	}
	connector := oauth.New(oauth.Config{Store: store, Raft: node, Mailer: mailer, PublicURL: s.url, Key: connectKey,
		Secure: strings.HasPrefix(s.url, "https://"), Limits: cfg.OAuthClients, Now: cfg.Now, Log: s.log.With("component", "oauth")})
	node.OnLeader(func(ctx context.Context) { collectOAuthClients(ctx, connector, cfg.OAuthCollectInterval, s.log) })
	// Jobs run once every runner is in place.
	node.OnLeader(s.dispatcher.Run)
	hookSealer := keys.Sealer(sealing.PurposeWebhooks)
	sender := webhooks.NewSender(cfg.FetchAllow, cfg.WebhookRoots)
	hooks := webhooks.New(webhooks.Config{Store: store, Raft: node, Sealer: hookSealer, Sender: sender, Allow: cfg.FetchAllow, Now: cfg.Now})
	deliveries := &webhooks.Dispatcher{Store: store, Raft: node, Sender: sender, Secret: hooks.Secret, Schedule: cfg.WebhookSchedule,
		Now: cfg.Now, Log: s.log.With("component", "webhooks")}
	node.OnLeader(deliveries.Run)
	s.metrics.MustRegister(deliveries)
	ipKey, err := keys.Derive("sandboxd launch ip-hash v1")
	if err != nil {
		return nil, err
	}
	launches := launch.New(launch.Config{Store: store, Raft: node, Sites: siteService, IPKey: ipKey, Now: cfg.Now,
		Log: s.log.With("component", "launch")})
	node.OnLeader(func(ctx context.Context) { launches.Watch(ctx, cmp.Or(cfg.DemoInterval, 500*time.Millisecond)) })
	visitorKey, err := keys.Derive("sandboxd launch visitor v1")
	if err != nil {
		return nil, err
	}
	s.launcher = launcher.New(launcher.Config{Launches: launches, Limits: cfg.LaunchLimits, SiteOrigins: s.siteOrigins(),
		Cookies: hostcookie.Jar{Secure: strings.HasPrefix(s.url, "https://"), Key: visitorKey},
		Logger:  s.log.With("component", "launcher")})
	s.metrics.MustRegister(s.pool)
	resolver, err := domains.NewResolver(cfg.DNSResolver)
	if err != nil {
		s.log.Warn("custom domains cannot be checked", "err", err)
		resolver = nil
	}
	gitSealer := keys.Sealer(sealing.PurposeGit)
	repoService := repos.New(repos.Config{Store: store, Raft: node, Sealer: gitSealer, PublicURL: s.url, Allow: cfg.FetchAllow, Now: cfg.Now})
	runners.GitSecrets, runners.PinHost = repoService.Secrets, fetch.PinHost
	domainService := domains.New(domains.Config{Store: store, Raft: node, Resolver: resolver, EdgeAddrs: cfg.EdgeAddrs,
		SandboxDomain: cfg.SandboxDomain, Logger: cfg.Logger, Now: cfg.Now})
	node.OnLeader(func(ctx context.Context) { domainService.Watch(ctx, cmp.Or(cfg.DomainCheckInterval, time.Minute)) })
	accountService := accounts.New(accounts.Config{Store: store, Raft: node, Plans: cfg.Plans, Now: cfg.Now})
	workspaceService := workspaces.New(workspaces.Config{Store: store, Raft: node, Plans: cfg.Plans, Mailer: mailer, PublicURL: s.url,
		Now: cfg.Now, Logger: cfg.Logger})
	s.api = api.New(api.Config{
		Store: store, Plans: cfg.Plans, Members: s.members,
		Accounts: accountService, Workspaces: workspaceService,
		Fleet: fleet.New(fleet.Config{Store: store, Raft: node, Leave: node.RemoveServer, Now: cfg.Now}), Cluster: clusterView{s}, Logger: cfg.Logger, Now: cfg.Now,
		Sites: siteService, Tools: siteService, Checkpoints: siteService, Code: siteService, Screenshots: siteService, Templates: tpls,
		MCPResource: connector.MCPResource(), MCPResourceMetadata: connector.ResourceMetadataURL(), Library: lib, PeerBlobs: lib, ReplaySealer: replaySealer, Webhooks: hooks,
		Blueprints:   bps,
		Runs:         bps,
		Imports:      importService,
		OAuth:        connector,
		Domains:      domainService,
		Repositories: repoService,
		Sealing:      s.sealing,
		RateLimits:   cfg.RateLimits, Metrics: metrics,
	})
	s.api.Register(s.router)
	for pattern, h := range s.launcher.Routes() {
		s.router.HandleRaw(pattern, h)
	}
	for pattern, h := range connector.Routes() {
		s.router.HandleRaw(pattern, h)
	}
	s.router.HandleRaw("POST /hooks/git/{id}/{secret}", gitHook(repoService, s.log))
	s.router.HandleRaw(shots.Path, shotSigner.Handler(s.registry))
	// The connector plugin, ready to install on a live site.
	s.router.HandleRaw("GET /connect/sandboxd-connector.zip", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		zip, err := pluginzip.PluginZip()
		if err != nil {
			apierr.Write(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/zip")
		w.Header().Set("Content-Disposition", `attachment; filename="sandboxd-connector.zip"`)
		_, _ = w.Write(zip)
	}))
	s.registerInfra()
	s.registerMembership()
	regPath, regHandler := agentv1connect.NewRegistryServiceHandler(s.registry, rpclimit.RegistryServer()...)
	s.router.HandleRaw(regPath, regHandler)
	routeService := routes.New(store, cfg.Logger)
	routeService.CaughtUp = node.CaughtUp
	routePath, routeHandler := edgev1connect.NewRouteServiceHandler(routeService, rpclimit.RoutesServer()...)
	s.router.HandleRaw(routePath, routeHandler)
	certSealer := keys.Sealer(sealing.PurposeCerts)
	certService := certstore.New(certstore.Config{Store: store, Raft: node, Sealer: certSealer, Budget: cfg.CertBudget,
		Logger: cfg.Logger, Now: cfg.Now})
	s.metrics.MustRegister(certService)
	certPath, certHandler := edgev1connect.NewCertStorageServiceHandler(certService, rpclimit.CertServer()...)
	s.router.HandleRaw(certPath, certHandler)
	s.handler = rest.Observe(s.clientIP(s.deadlines(s.forward(s.router))), cfg.Logger, metrics)
	s.http = &http.Server{Handler: s.publicHandler(s.handler), Protocols: publicProtocols(), ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout: cfg.IdleTimeout, MaxHeaderBytes: cfg.MaxHeaderBytes, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	s.clusterHTTP = &http.Server{Handler: s.clusterHandler(s.handler), Protocols: rpcauth.Protocols(), ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout: cfg.IdleTimeout, MaxHeaderBytes: cfg.MaxHeaderBytes, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	return s, nil
}

// blobStore is everything the server hands a blob store to: the Library,
// the job runners, imports and the replication loop.
type blobStore interface {
	blobs.Replica
	library.Blobs
	sitejobs.Blobs
	sitejobs.Artifacts
	imports.Blobs
}

// openBlobs opens the configured blob store: the shared bucket, or the
// data directory's.
func openBlobs(cfg Config) (blobStore, error) {
	if cfg.BlobStore.Endpoint == "" {
		dir, err := blobs.Open(filepath.Join(cfg.DataDir, "blobs"))
		if err != nil {
			return nil, err
		}
		return dir, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bucket, err := blobs.OpenS3(ctx, cfg.BlobStore)
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	return bucket, nil
}

// wantedBlobs are the blobs every server keeps: the Library's ZIPs, those
// of unfinished deploys, template artifacts and Blueprint bundles.
func wantedBlobs(store *state.Store) ([]string, error) {
	out, err := library.WantedBlobs(store)
	if err != nil {
		return nil, err
	}
	arts, err := store.TemplateArtifacts()
	if err != nil {
		return nil, err
	}
	bundles, err := store.BlueprintBundles()
	if err != nil {
		return nil, err
	}
	uploads, err := store.ImportArtifacts()
	if err != nil {
		return nil, err
	}
	snaps, err := store.AllSnapshots()
	for _, sn := range snaps {
		out = append(out, sn.FilesSHA256, sn.DatabaseSHA256)
	}
	return append(append(append(out, arts...), bundles...), uploads...), err
}

// persistent reads a value kept in a file, making and storing it once.
func persistent(path string, generate func() string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	v := generate()
	if err := writeFileAtomic(path, []byte(v+"\n"), 0o600); err != nil {
		return "", err
	}
	return v, nil
}

// watchOperatorToken moves the bootstrap operator token from its pending
// file to operator-token once this server's state holds its hash, so
// that an operator (or a script) that reads the file is never refused.
func (s *Server) watchOperatorToken(ctx context.Context) {
	select {
	case <-s.operatorReady:
		return
	default:
	}
	hash := secret.Hash(s.bootstrapOperator)
	failed := false
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if op, err := s.node.Store().OperatorTokenByHash(hash); err == nil && op != nil {
			pending := filepath.Join(s.cfg.DataDir, pendingOperatorFile)
			err := os.Rename(pending, filepath.Join(s.cfg.DataDir, operatorTokenFile))
			if err == nil {
				close(s.operatorReady)
				return
			}
			if !failed { // tried again at the next tick; said once
				s.log.Error("the operator token is committed but its file could not be written; retrying", "file", pending, "err", err)
				failed = true
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// OperatorTokenReady is closed once OperatorToken can be used (and is in
// <data-dir>/operator-token on the server that bootstrapped the cluster).
func (s *Server) OperatorTokenReady() <-chan struct{} { return s.operatorReady }

func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Start serves the API and, when configured, asks to join the cluster.
// It returns at once; Close stops everything.
func (s *Server) Start() error {
	if err := writeFileAtomic(filepath.Join(s.cfg.DataDir, "api-url"), []byte(s.url+"\n"), 0o600); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(s.cfg.DataDir, "cluster-url"), []byte(s.clusterURL+"\n"), 0o600); err != nil {
		return err
	}
	go func() {
		if err := s.http.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("api server stopped", "err", err)
		}
	}()
	go func() {
		if err := s.clusterHTTP.Serve(s.clusterLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("cluster server stopped", "err", err)
		}
	}()
	renewCtx, stopRenew := context.WithCancel(context.Background())
	s.stopRenew = stopRenew
	go enroll.KeepFresh(renewCtx, enroll.Config{Dir: filepath.Join(s.cfg.DataDir, tlsDir), Logger: s.log}, s.creds, s.clusterURLs)
	go s.sealing.watch(renewCtx) // stops with the renewals, at Close or Kill
	go s.watchOperatorToken(renewCtx)
	if len(s.cfg.Join) > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopJoin = cancel
		go s.joinLoop(ctx)
	}
	syncCtx, stopSync := context.WithCancel(context.Background())
	s.stopSync = stopSync
	go s.blobSync.Run(syncCtx)
	s.log.Info("control plane serving", "component", "server", "api", s.url, "cluster", s.clusterURL, "raft", s.cfg.RaftAddr)
	return nil
}

// peerURLs are the cluster URLs of the other servers.
func (s *Server) peerURLs() []string {
	servers, err := s.node.Store().Servers()
	if err != nil {
		return nil
	}
	var out []string
	for _, sv := range servers {
		if sv.ID != s.cfg.NodeID && sv.ClusterAddr != "" {
			out = append(out, strings.TrimRight(sv.ClusterAddr, "/"))
		}
	}
	return out
}

// clusterURLs are every server's cluster URL, this one's first.
func (s *Server) clusterURLs() []string { return append([]string{s.clusterURL}, s.peerURLs()...) }

// BlobSync is the Library replication loop (tests call Once).
func (s *Server) BlobSync() *blobs.Syncer { return s.blobSync }

// URL is the API base URL.
func (s *Server) URL() string { return s.url }

// Node is the Raft node (tests and benchmarks use it).
func (s *Server) Node() *cluster.Node { return s.node }

// Handler is the full HTTP stack.
func (s *Server) Handler() http.Handler { return s.handler }

// Router is the API router (tests walk its routes).
func (s *Server) Router() *rest.Router { return s.router }

// Dispatcher runs jobs on the leader; later features register runners.
func (s *Server) Dispatcher() *jobs.Dispatcher { return s.dispatcher }

// Close stops serving, leader work and Raft.
func (s *Server) Close() error {
	if s.stopJoin != nil {
		s.stopJoin()
	}
	if s.stopSync != nil {
		s.stopSync()
	}
	if s.stopRenew != nil {
		s.stopRenew()
	}
	_ = s.clusterHTTP.Close()
	// Requests in flight get a grace period; one still running after it
	// (a write waiting on a quorum whose other servers are gone) has its
	// connection closed: its client sees a transport error, which the
	// docs/api.md tells it to retry with the same Idempotency-Key.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var herr error
	if err := s.http.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("requests still running after the shutdown grace period; closing their connections")
		herr = s.http.Close()
	} else {
		herr = err
	}
	nerr := s.node.Shutdown()
	return errors.Join(herr, nerr)
}

// Kill stops the server abruptly, as a crash would: connections are cut
// and Raft stops without handing over. For failover tests.
func (s *Server) Kill() {
	if s.stopSync != nil {
		s.stopSync()
	}
	if s.stopRenew != nil {
		s.stopRenew()
	}
	_ = s.http.Close()
	_ = s.clusterHTTP.Close()
	_ = s.node.Shutdown()
}

func (s *Server) registerInfra() {
	s.router.HandleRaw("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leader := s.node.LeaderAPI()
		status, code := "ok", http.StatusOK
		if leader == "" {
			status, code = "no_leader", http.StatusServiceUnavailable
		}
		sealingKey := s.sealing.health()
		if sealingKey == "mismatch" && code == http.StatusOK {
			// It could not lead: the cluster's secrets need a key it lacks.
			status, code = "sealing_key_mismatch", http.StatusServiceUnavailable
		}
		// Anyone may ask: ids and indexes only, never an address (the
		// leader's URL is in the operator's GET /api/admin/cluster).
		_ = rest.JSON(w, code, map[string]any{"status": status, "version": Version, "nodeId": s.node.ID(),
			"raftState": s.node.State().String(), "leaderId": s.node.LeaderID(), "term": s.node.Term(), "appliedIndex": s.node.AppliedIndex(),
			"sealingKey": sealingKey})
	}))
	s.router.HandleRaw("GET /metrics", s.metrics.Handler())
	s.router.HandleRaw("GET /api/openapi.json", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.OpenAPI())
	}))
}

// siteURL is a site's public URL on the edge.
func (s *Server) siteURL(slug string) string {
	host := slug + "." + s.cfg.SandboxDomain
	scheme := s.cfg.SiteScheme
	if scheme == "" {
		scheme = "http"
	}
	if p := s.cfg.SitePort; p != 0 && !(scheme == "http" && p == 80) && !(scheme == "https" && p == 443) {
		host += ":" + strconv.Itoa(p)
	}
	return scheme + "://" + host
}

// blueprintEnv is what Blueprint checks know of this cluster: the PHP
// images its ready nodes have (sorted, oldest first), with their
// WordPress, and whether the fetcher may reach a URL (through the
// mirror; the address guard).
func blueprintEnv(php []string, m *mirror.Mirror, fetch *safefetch.Client) blueprint.Env {
	env := blueprint.Env{Reach: func(raw string) error {
		to, mapped, err := m.Resolve(raw)
		if err != nil || mapped {
			return err // a mapped URL goes to the operator's mirror
		}
		_, err = fetch.CheckURL(to)
		return err
	}}
	for _, v := range php {
		if wp, ok := sitespec.WordPressOf[v]; ok {
			env.PHPVersions = append(env.PHPVersions, v)
			env.WordPressVersions = append(env.WordPressVersions, wp)
			if env.WordPressOf == nil {
				env.WordPressOf = map[string]string{}
			}
			env.WordPressOf[v] = wp
		}
	}
	return env
}

// addressesOf resolves the mirror's hosts to the prefixes its client
// may reach (a name that does not resolve now adds nothing).
func addressesOf(hosts []string) []netip.Prefix {
	var out []netip.Prefix
	for _, h := range hosts {
		if a, err := netip.ParseAddr(h); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		addrs, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
		cancel()
		for _, a := range addrs {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return out
}

// siteOrigins is the CSP source matching every site's origin.
func (s *Server) siteOrigins() string {
	u := s.siteURL("x")
	return strings.Replace(u, "://x.", "://*.", 1)
}

// Pool is the warm pools (benchmarks size them while running).
func (s *Server) Pool() *pool.Pool { return s.pool }

// MetricNames lists the metrics /metrics may show (tests check the
// dashboards and alert rules against it).
func (s *Server) MetricNames() []string { return s.metrics.Names() }

// Registry is the node registry (dev wiring and tests use it).
func (s *Server) Registry() *nodes.Registry { return s.registry }

// OpenAPI is the API's OpenAPI 3.1 document.
func (s *Server) OpenAPI() map[string]any {
	headers := map[string]string{
		"x-service-signature": "sha256= followed by the unpadded base64url HMAC-SHA256 of the raw body, keyed with the signing secret. Compare in constant time before parsing.",
		"x-service-event":     "The event type.",
		"x-service-delivery":  "The delivery's id, the same on every attempt.",
		"idempotency-key":     "The event's id, the same on every attempt: deduplicate on it.",
	}
	retries := " Delivered with a 10 s timeout, no redirect followed; a non-2xx answer is retried after 10 s, 30 s, 1 min, 5 min, 15 min, 1 h and 3 h (each ±20%), 8 attempts in all, then failed."
	return s.router.OpenAPI(rest.OpenAPIInfo{Title: "sandboxd API", Version: Version, Enums: api.Enums(),
		Description: "Disposable WordPress sandboxes. Errors use the envelope {error: {code, message, details}}. " +
			"A template's public launch link is served outside the API, at GET /launch/{launchToken} (HTML for people). " +
			"Git push webhooks are received at POST /hooks/git/{repositoryId}/{secret}, the webhookUrl a connected repository's creation answers " +
			"(GitHub, GitLab and Gitea push events; 202 {jobId} when a deploy starts, 200 {ignored} otherwise, 401 for a bad signature).",
		Webhooks: []rest.Webhook{
			{Name: webhookspec.DemoReady, Summary: "A demo launched from a template's public link is ready at its URL." + retries,
				Body: webhooks.Event{}, Headers: headers},
			{Name: webhookspec.DemoExpired, Summary: "A launched demo's lease ended (status expired); its site is being deleted." + retries,
				Body: webhooks.Event{}, Headers: headers},
		}})
}
