// Package agent assembles a node agent: containerd (started if none
// answers), the image catalogue, the node's MariaDB, the site manager,
// the AgentService the control plane calls, and the registration and
// heartbeat loop towards the control plane.
package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/agent/agentmetrics"
	"github.com/sandboxd/sandboxd/agent/daemon"
	"github.com/sandboxd/sandboxd/agent/dbguard"
	"github.com/sandboxd/sandboxd/agent/diskstore"
	"github.com/sandboxd/sandboxd/agent/gitdeploy"
	"github.com/sandboxd/sandboxd/agent/hostclaim"
	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/nodeswap"
	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/screenshot"
	"github.com/sandboxd/sandboxd/agent/sitedisk"
	"github.com/sandboxd/sandboxd/agent/sitenet"
	"github.com/sandboxd/sandboxd/agent/sites"
	"github.com/sandboxd/sandboxd/agent/sshgate"
	"github.com/sandboxd/sandboxd/agent/templates"
	"github.com/sandboxd/sandboxd/agent/toolbox"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/revocation"
	"github.com/sandboxd/sandboxd/internal/rpcauth"
	"github.com/sandboxd/sandboxd/internal/rpclimit"
	"github.com/sandboxd/sandboxd/internal/siteingress"
	"github.com/sandboxd/sandboxd/protocol/agent/v1/agentv1connect"
)

// Version is reported at registration.
var Version = "0.1.0"

// DefaultPHPVersion is imported before the agent registers.
const DefaultPHPVersion = "8.2"

// Config is one agent's configuration.
type Config struct {
	// NodeID names the node; default: kept in DataDir, made once.
	NodeID string
	// DataDir holds containerd state (when the agent starts its own),
	// MariaDB data and the sites.
	DataDir string
	// ListenAddr is where AgentService listens (h2c).
	ListenAddr string
	// AdvertiseAddr is the URL the control plane dials; default
	// http://<ListenAddr>.
	AdvertiseAddr string
	// BackendHost is where an edge reaches this node's site ports.
	BackendHost string
	// ControlPlane lists cluster URLs (https://host:port) of control-plane
	// servers; one is enough, the others are learnt at registration.
	ControlPlane []string
	// JoinToken is spent once to get the node's cluster certificate
	// (kept in DataDir/tls afterwards).
	JoinToken string
	// ContainerdSocket is tried first; when nothing answers there, the
	// agent starts its own containerd under DataDir.
	ContainerdSocket string
	// Namespace is the containerd namespace of this agent's images and
	// containers; default one of its own, derived from DataDir. Agents of
	// one host may share one: each image is then imported and unpacked
	// once for all of them, and each agent's containers carry its scope
	// (ContainerScope) so that none touches another's.
	Namespace string
	// ImagesDir is the image cache `make images` fills.
	ImagesDir string
	// ImageOverrides point PHP versions at registry images.
	ImageOverrides map[string]string
	// PHPVersions are the PHP versions this node offers (imports and
	// advertises); empty: every one the image cache has.
	PHPVersions []string
	// Capacity is what the node offers the scheduler.
	MemoryMB int64
	CPUMilli int64
	MaxSites int
	Labels   map[string]string
	// SiteEgress is what sites may reach beyond the node: none (default)
	// or public (the internet, never private or reserved ranges).
	SiteEgress sitenet.Egress
	// SiteAllow lists destinations sites may reach whatever the egress.
	SiteAllow []sitenet.Allow
	// SiteSubnet is the sites' network; default: a free /22 of
	// 10.200.0.0/16, chosen once and kept in DataDir.
	SiteSubnet netip.Prefix
	// ClaimsDir keeps site uids and subnets unique among the host's
	// agents; default hostclaim.DefaultDir.
	ClaimsDir string
	// LogWriter is the capped container logger binary of MariaDB's
	// container; default this executable (sandboxd becomes the logger
	// when a shim starts it). Sites have none.
	LogWriter string
	// Sandbox is the node's runtime class for sites: "runc" (the default)
	// or "gvisor" (runsc, ptrace platform, through the runc shim).
	Sandbox string
	// GitCAFile, when set, is the PEM bundle Git deploys check https code
	// hosts against instead of the system's roots (a private code host).
	GitCAFile string
	// SSHAddr is where the node's SSH gateway for customers listens
	// (shells, commands and SFTP in their sites); empty runs none.
	SSHAddr string
	// SSHPublicAddr is host:port customers reach the gateway at; default
	// SSHAddr as bound.
	SSHPublicAddr string
	// MetricsAddr is the operator's plain-HTTP listener for /metrics and
	// /healthz (counts only); empty serves none.
	MetricsAddr string
	// DBSystemMaxMB and DBTempMaxMB bound what the sites share on the
	// node's disk in MariaDB (its undo logs; its temporary tables and
	// sort files); 0 takes mariadb's defaults. Each site's own tables
	// are on its own disk.
	DBSystemMaxMB int64
	DBTempMaxMB   int64
	// DBMemoryMB bounds MariaDB's container's memory and DBSessionMemMB
	// what one connection may hold in it; 0 takes mariadb's defaults.
	DBMemoryMB, DBSessionMemMB int64
	// IngressAddr is where edges (mutual TLS, an edge's certificate)
	// reach this node's sites; default 127.0.0.1:0 (edges on this host
	// only). IngressPublicAddr is host:port edges dial; default
	// IngressAddr as bound, its host BackendHost when unspecified.
	IngressAddr       string
	IngressPublicAddr string
	// SleepAfter, above zero, is every site's idle time before it dozes,
	// whatever its plan says; zero leaves it to each site's plan
	// (DefaultSleepAfter for a site whose plan set none); below zero no
	// site sleeps.
	SleepAfter time.Duration
	// DeepSleepAfter is how long a site dozes before it sleeps deeper
	// (its container's task stopped); zero takes DefaultDeepSleepAfter,
	// below zero never.
	DeepSleepAfter time.Duration
	Logger         *slog.Logger
}

// WakeReserve is the share of the host's memory a wake leaves
// available: below it, the idlest sites are put to sleep first.
const WakeReserve = 0.1

// SitesPerShim is how many sites share one shim process: a shim takes
// a few MiB, and thousands of sites need a few dozen of them, not one
// each; a shim that fails takes no more than these with it.
const SitesPerShim = 32

// Idle times of sites whose plan and node set none.
const (
	DefaultSleepAfter     = 30 * time.Minute
	DefaultDeepSleepAfter = time.Hour
)

// idle is the sites' idle policy the config makes.
func (c Config) idle() (sites.Idle, bool) {
	deep := c.DeepSleepAfter
	switch {
	case deep == 0:
		deep = DefaultDeepSleepAfter
	case deep < 0:
		deep = 0
	}
	switch {
	case c.SleepAfter < 0:
		return sites.Idle{}, true
	case c.SleepAfter > 0:
		return sites.Idle{Doze: c.SleepAfter, Sleep: deep}, true
	}
	return sites.Idle{Doze: DefaultSleepAfter, Sleep: deep}, false
}

// settleEvery is how often idle sites are looked at: a quarter of the
// shortest idle time, within [100ms, 10s].
func (c Config) settleEvery() time.Duration {
	idle, _ := c.idle()
	d := 10 * time.Second
	for _, t := range []time.Duration{idle.Doze, idle.Sleep} {
		if t > 0 {
			d = min(d, t/4)
		}
	}
	return max(d, 100*time.Millisecond)
}

// Runtime classes a node runs its sites under.
const (
	SandboxRunc   = "runc"
	SandboxGVisor = "gvisor"
)

// Site uids come from [FirstSiteUID, FirstSiteUID+SiteUIDs): no system
// account or other sandbox software is there.
const (
	FirstSiteUID = 2_000_000
	SiteUIDs     = 1_000_000
)

// Agent is a running node agent.
type Agent struct {
	cfg     Config
	lock    *os.File // the data dir's lock, held until Close
	log     *slog.Logger
	daemon  *daemon.Daemon
	rt      *runtime.Runtime
	catalog *images.Catalog
	db      *mariadb.Server
	guard   *dbguard.Guard
	// stopGuard ends the guard's goroutine.
	stopGuard func()
	net       *sitenet.Network
	sites     *sites.Manager
	// shots takes the sites' screenshots as a uid of the host's registry.
	shots     *screenshot.Shooter
	templates *templates.Store
	// builderDone is closed when the template store's builder has ended,
	// settleDone when the loop that puts idle sites to sleep has.
	builderDone, settleDone chan struct{}
	box                     *toolbox.Box
	http                    *http.Server
	ssh                     *sshgate.Gateway
	metrics                 *agentmetrics.Metrics
	ln                      net.Listener
	url                     string
	cancel                  context.CancelFunc
	done                    chan struct{}
	// registered is closed after the first successful registration.
	registered     chan struct{}
	registeredOnce sync.Once
	// imported is closed when the background image import has ended.
	imported chan struct{}
	// stockDone is closed when the first stock template's making ended.
	stockDone chan struct{}
	// creds is the node's cluster certificate; servers the control
	// plane's cluster URLs as last learnt.
	creds    *rpcauth.Creds
	servers  atomic.Pointer[[]string]
	registry agentv1connect.RegistryServiceClient
	ingress  *siteingress.Server
	// revoked is the cluster's revocations as last heard: callers holding
	// a certificate it refuses are turned away.
	revoked *revocation.Set
	// removing holds the orphaned sites being removed; removeMu removes
	// one at a time.
	removing sync.Map
	// presence is what the control plane was told of sites' sleep.
	presence presenceLog
	removeMu sync.Mutex
	// metricsHTTP serves Config.MetricsAddr.
	metricsHTTP *http.Server
	metricsAddr string
}

// New starts everything but the control-plane loop: containerd, images,
// MariaDB, the sites (re-attached) and the AgentService listener.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DataDir == "" || len(cfg.ControlPlane) == 0 {
		return nil, errors.New("agent: data dir and control plane are required")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	cfg.DataDir = dir
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	if cfg.NodeID == "" {
		if cfg.NodeID, err = persistent(filepath.Join(dir, "node-id")); err != nil {
			return nil, err
		}
	}
	if cfg.Namespace == "" {
		cfg.Namespace = Namespace(dir)
	}
	if cfg.ImagesDir == "" {
		cfg.ImagesDir = images.DefaultDir()
	}
	if cfg.BackendHost == "" {
		cfg.BackendHost = "127.0.0.1"
	}
	if cfg.ContainerdSocket == "" {
		cfg.ContainerdSocket = daemon.SystemSocket
	}
	lock, err := lockDataDir(dir)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("component", "agent", "node_id", cfg.NodeID), done: make(chan struct{}),
		registered: make(chan struct{}), imported: make(chan struct{}), metrics: agentmetrics.New(), lock: lock}
	a.servers.Store(&cfg.ControlPlane)
	ok := false
	defer func() {
		if !ok {
			a.closeParts()
		}
	}()
	if a.creds, err = enroll.Obtain(ctx, a.enrollConfig()); err != nil {
		return nil, err
	}
	a.openRevocations()
	a.registry = agentv1connect.NewRegistryServiceClient(a.creds.FailoverClient(a.Servers, pki.RoleServer), rpcauth.ControlPlane,
		rpclimit.RegistryClient()...)
	socket, d, err := daemon.Ensure(ctx, cfg.ContainerdSocket, containerdDir(dir), cfg.Logger)
	if err != nil {
		return nil, err
	}
	a.daemon = d
	if err := recordSocket(dir, socket); err != nil {
		return nil, err
	}
	if err := checkNamespace(ctx, socket, dir, cfg.Namespace); err != nil {
		return nil, err
	}
	if err := recordNamespace(dir, cfg.Namespace); err != nil {
		return nil, err
	}
	if a.rt, err = connectRuntime(socket, dir, cfg.Namespace); err != nil {
		return nil, err
	}
	if a.catalog, err = images.Load(cfg.ImagesDir, cfg.ImageOverrides); err != nil {
		return nil, err
	}
	if err := a.catalog.Only(cfg.PHPVersions); err != nil {
		return nil, fmt.Errorf("--php-versions: %w", err)
	}
	mdb, err := a.catalog.MariaDB(ctx, a.rt)
	if err != nil {
		return nil, err
	}
	if cfg.LogWriter == "" {
		if cfg.LogWriter, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	// The default runtime is imported now; the others in the background,
	// so a first start is not held up by images nobody asked for yet (a
	// site that needs one meanwhile waits for its import).
	if _, err := a.catalog.PHP(ctx, a.rt, DefaultPHPVersion); err != nil && !errors.Is(err, images.ErrMissing) {
		return nil, err
	}
	go func() {
		defer close(a.imported)
		if err := a.catalog.EnsureAll(context.Background(), a.rt); err != nil {
			a.log.Warn("importing images", "err", err)
		}
	}()
	if a.db, err = mariadb.New(mariadb.Config{Image: mdb, Dir: filepath.Join(dir, "mariadb"), LogWriter: cfg.LogWriter,
		SystemMaxMB: cfg.DBSystemMaxMB, TempMaxMB: cfg.DBTempMaxMB, MemoryMB: cfg.DBMemoryMB, SessionMemMB: cfg.DBSessionMemMB}); err != nil {
		return nil, err
	}
	claims := orDefault(cfg.ClaimsDir, hostclaim.DefaultDir)
	uids, err := hostclaim.Open(claims, "uid", FirstSiteUID, SiteUIDs)
	if err != nil {
		return nil, err
	}
	subnets, err := hostclaim.Open(claims, "subnet", 0, 64)
	if err != nil {
		return nil, err
	}
	if a.net, err = sitenet.New(ctx, sitenet.Config{Dir: filepath.Join(dir, "network"), Name: NetworkName(dir), Subnet: cfg.SiteSubnet,
		Egress: cfg.SiteEgress, Allow: cfg.SiteAllow, Claims: subnets, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	sandbox, err := sandboxBinary(dir, cfg.Sandbox)
	if err != nil {
		return nil, err
	}
	var resolvers []string
	if cfg.SiteEgress == sitenet.EgressPublic {
		resolvers = hostResolvers()
	}
	// The guard holds each site's database to its plan's disk; it runs
	// for as long as the agent (closed with it), and so does MariaDB's
	// watch (started with MariaDB, below).
	if a.guard, err = dbguard.New(dbguard.Config{Limiter: a.db, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	guardCtx, stopGuard := context.WithCancel(context.WithoutCancel(ctx))
	guardDone := make(chan struct{})
	a.stopGuard = func() { stopGuard(); <-guardDone }
	go func() {
		defer close(guardDone)
		a.guard.Run(guardCtx)
	}()
	idle, override := cfg.idle()
	if idle.Doze > 0 {
		a.ensureSwap()
	}
	if a.sites, err = sites.New(sites.Config{Dir: filepath.Join(dir, "sites"), Runtime: meteredRuntime{a.rt, a.metrics}, Images: a.catalog, DB: a.db, Guard: a.guard,
		Network: a.net, UIDs: uids, Sandbox: sandbox, Resolvers: resolvers, Logger: cfg.Logger,
		Idle: idle, IdleOverride: override, Observe: sleepMetrics{a.metrics}, SitesPerShim: SitesPerShim, WakeReserve: WakeReserve,
		DiskStore: true}); err != nil {
		return nil, err
	}
	a.templates = templates.New(templates.Config{Sites: a.sites, DB: a.db, Stock: true, Logger: cfg.Logger})
	a.box = toolbox.New(a.sites)
	// The browser runs as a uid no site (nor another agent's browser) has.
	shotUID, err := uids.Claim(filepath.Join(dir, "screenshot-uid"))
	if err != nil {
		return nil, fmt.Errorf("screenshot uid: %w", err)
	}
	if a.shots, err = screenshot.New(screenshot.Config{Dir: filepath.Join(dir, "screenshots"), UID: shotUID, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	// The sites' disks, with their database volumes, are there before
	// MariaDB starts: its crash recovery opens the tables it has redo for.
	if err := a.sites.AttachDisks(); err != nil {
		a.log.Warn("some sites' disks did not mount", "err", err)
	}
	if err := a.db.Run(ctx, a.rt); err != nil {
		return nil, err
	}
	// MariaDB is started again if it stops, and no site's transaction
	// may hold the undo log every site shares.
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		a.db.Watch(guardCtx, a.rt, time.Second, cfg.Logger.With("component", "mariadb", "node_id", cfg.NodeID), a.metrics)
	}()
	a.stopGuard = func() { stopGuard(); <-guardDone; <-watchDone }
	if err := a.sites.Reattach(ctx); err != nil {
		a.log.Warn("some sites did not restart", "err", err)
	}
	if a.ln, err = net.Listen("tcp", orDefault(cfg.ListenAddr, "127.0.0.1:0")); err != nil {
		return nil, fmt.Errorf("agent listen: %w", err)
	}
	a.url = cfg.AdvertiseAddr
	if a.url == "" {
		a.url = "https://" + a.ln.Addr().String()
	}
	mux := http.NewServeMux()
	fetcher := &gitdeploy.Fetcher{Dir: filepath.Join(dir, "git"), CAFile: cfg.GitCAFile}
	path, handler := agentv1connect.NewAgentServiceHandler(&service{sites: a.sites, templates: a.templates, box: a.box, git: fetcher, shots: a.shots, log: a.log},
		rpclimit.AgentServer()...)
	mux.Handle(path, handler)
	a.serveService(mux)
	if err := a.serveMetrics(cfg.MetricsAddr); err != nil {
		return nil, err
	}
	if err := a.serveIngress(ingressSites{a.sites}); err != nil {
		return nil, err
	}
	if err := a.startSSH(); err != nil {
		return nil, err
	}
	ok = true
	return a, nil
}

// containerdDir keeps the containerd socket path short enough for a unix
// socket even under a long data dir.
func containerdDir(dataDir string) string {
	d := filepath.Join(dataDir, "containerd")
	if len(d) < 80 {
		return d
	}
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(os.TempDir(), "sandboxd-ctd-"+hex.EncodeToString(sum[:])[:12])
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func persistent(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return string(b), nil
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	id := fmt.Sprintf("node-%.40s-%s", sanitize(host), hex.EncodeToString(b))
	return id, os.WriteFile(path, []byte(id), 0o600)
}

// ImagesImported is closed once every catalogued image is in containerd
// (or failed to import, which is logged).
func (a *Agent) ImagesImported() <-chan struct{} { return a.imported }

// Registered is closed once the control plane has accepted this node.
func (a *Agent) Registered() <-chan struct{} { return a.registered }

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "host"
	}
	return b.String()
}

// SSHAddr is the SSH gateway's address as customers reach it, or "".
func (a *Agent) SSHAddr() string { return a.sshPublicAddr() }

// URL is the AgentService base URL.
func (a *Agent) URL() string { return a.url }

// Sites is the site manager (tests use it to look behind the API).
func (a *Agent) Sites() *sites.Manager { return a.sites }

// Templates is the node's template store, for benchmarks that make
// sites as the agent's service does.
func (a *Agent) Templates() *templates.Store { return a.templates }

// Toolbox is the node's sites' toolbox, for benchmarks.
func (a *Agent) Toolbox() *toolbox.Box { return a.box }

// PHPVersions lists the runtimes this node can run.
func (a *Agent) PHPVersions() []string { return a.catalog.PHPVersions() }

// Start registers with the control plane and heartbeats until Close. The
// loop is owned by the Agent.
func (a *Agent) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.stockDone = make(chan struct{})
	a.builderDone = make(chan struct{})
	go func() {
		defer close(a.builderDone)
		a.templates.Run(ctx)
	}()
	go func() {
		defer close(a.stockDone)
		// The default runtime's stock install is made ahead of the first
		// create, which would otherwise wait for it.
		if _, err := a.templates.Stock(ctx, DefaultPHPVersion); err != nil && ctx.Err() == nil && !errors.Is(err, images.ErrMissing) {
			a.log.Warn("stock template", "php", DefaultPHPVersion, "err", err)
		}
	}()
	a.settleDone = make(chan struct{})
	go func() {
		defer close(a.settleDone)
		every := a.cfg.settleEvery()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
				a.sites.Settle(ctx)
			}
		}
	}()
	go func() {
		defer close(a.done)
		a.loop(ctx)
	}()
	go enroll.KeepFresh(ctx, a.enrollConfig(), a.creds, a.Servers)
}

func (a *Agent) enrollConfig() enroll.Config {
	return enroll.Config{Dir: filepath.Join(a.cfg.DataDir, "tls"), Role: pki.RoleAgent, Name: a.cfg.NodeID,
		Servers: a.cfg.ControlPlane, JoinToken: a.cfg.JoinToken, Logger: a.log}
}

// Servers are the control plane's cluster URLs as last learnt.
func (a *Agent) Servers() []string { return *a.servers.Load() }

// Close stops the loop and the listener. Sites, MariaDB and a containerd
// the agent started keep running, so a restarted agent re-attaches.
func (a *Agent) Close() error {
	if a.cancel != nil {
		a.cancel()
		<-a.done
		<-a.stockDone
		<-a.builderDone
		<-a.settleDone
	}
	a.closeParts()
	return nil
}

func (a *Agent) closeParts() {
	if a.shots != nil {
		a.shots.Stop()
	}
	if a.ssh != nil {
		_ = a.ssh.Close()
	}
	if a.http != nil {
		_ = a.http.Close()
	}
	if a.metricsHTTP != nil {
		_ = a.metricsHTTP.Close()
	}
	if a.ingress != nil {
		_ = a.ingress.Close()
	}
	if a.stopGuard != nil {
		a.stopGuard()
	}
	if a.db != nil {
		_ = a.db.Close()
	}
	if a.rt != nil {
		_ = a.rt.Close()
	}
	if a.lock != nil {
		_ = a.lock.Close() // the data dir is free for a stop or the next start
	}
}

// Namespace is the containerd namespace an agent with this data dir uses
// unless configured otherwise.
func Namespace(dataDir string) string {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		dir = dataDir
	}
	sum := sha256.Sum256([]byte(dir))
	return "sandboxd-" + hex.EncodeToString(sum[:])[:10]
}

// StopEverything removes the containers (sites and MariaDB) of the agent
// with this data dir and stops a containerd it started there. Site files
// and databases stay on disk; the next start brings the sites back.
func StopEverything(ctx context.Context, dataDir string) error {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	socket := ""
	for _, s := range []string{filepath.Join(containerdDir(dir), "containerd.sock"), recordedSocket(dir), daemon.SystemSocket} {
		if s != "" && daemon.Answers(ctx, s) {
			socket = s
			break
		}
	}
	var errs []error
	if socket != "" {
		ns := recordedNamespace(dir)
		rt, err := connectRuntime(socket, dir, ns)
		if err != nil {
			return err
		}
		defer rt.Close()
		ids, err := rt.Containers(ctx)
		errs = append(errs, err)
		for _, id := range ids {
			errs = append(errs, rt.Remove(ctx, id))
		}
		// A namespace shared with other agents keeps its cgroup while
		// they hold containers (the removal leaves a busy one alone).
		errs = append(errs, runtime.RemoveNamespaceCgroups(ns))
	}
	// With the containers gone, MariaDB's mounts (the sites' database
	// volumes, its temporary disk), the sites' disks and namespaces go
	// too (a later start makes them again, with the same addresses).
	errs = append(errs, mariadb.Unmount(filepath.Join(dir, "mariadb")))
	// A clone's tree (an overlay on its disk over an id-mapped view of
	// its template) goes before the disk.
	views, _ := filepath.Glob(filepath.Join(dir, "sites", "fs", "*", "template-view"))
	trees, _ := filepath.Glob(filepath.Join(dir, "sites", "fs", "*", "disk", "wordpress"))
	for _, p := range append(trees, views...) {
		errs = append(errs, sitedisk.Unmount(p))
	}
	disks, _ := filepath.Glob(filepath.Join(dir, "sites", "fs", "*", "disk"))
	for _, d := range disks {
		errs = append(errs, sitedisk.Unmount(d))
	}
	// The store the disks lie in, last.
	errs = append(errs, diskstore.Unmount(filepath.Join(dir, "sites", "fs")))
	errs = append(errs, sitenet.Shutdown(filepath.Join(dir, "network"), NetworkName(dir)))
	errs = append(errs, daemon.StopIn(containerdDir(dir)))
	return errors.Join(errs...)
}

// Purge stops everything of the agent with this data dir and gives back
// what it held on the host (site uids, its subnet): for tests and for
// retiring a node; the data dir itself is the caller's to remove.
func Purge(ctx context.Context, dataDir, claimsDir string) error {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	errs := []error{StopEverything(ctx, dir)}
	for _, kind := range []struct {
		name         string
		first, count int
	}{{"uid", FirstSiteUID, SiteUIDs}, {"subnet", 0, 64}} {
		r, err := hostclaim.Open(orDefault(claimsDir, hostclaim.DefaultDir), kind.name, kind.first, kind.count)
		if err == nil {
			err = r.ReleaseUnder(dir)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// namespaceRecord names the file in an agent's data dir that keeps a
// containerd namespace shared with other agents, for StopEverything.
const namespaceRecord = "containerd-namespace"

// ContainerScope starts the containerd id of every container of the
// agent with this data dir when its namespace is shared with others.
func ContainerScope(dataDir string) string { return "a" + NetworkName(dataDir) + "-" }

// connectRuntime is the agent's runtime in namespace ns, scoped to its
// own containers when ns is not the agent's own namespace.
func connectRuntime(socket, dir, ns string) (*runtime.Runtime, error) {
	if ns == Namespace(dir) {
		return runtime.Connect(socket, ns)
	}
	return runtime.ConnectScoped(socket, ns, ContainerScope(dir))
}

// checkNamespace refuses a namespace another agent owns (an agent's own,
// sandboxd-<hash>, is never shared: its containers carry no scope) and a
// change of namespace while the agent's containers still run in the one
// it used before: they would run twice, and nothing would stop the old.
func checkNamespace(ctx context.Context, socket, dir, ns string) error {
	if ns != Namespace(dir) && strings.HasPrefix(ns, "sandboxd-") {
		return fmt.Errorf("agent: containerd namespace %q: names starting with sandboxd- are agents' own; share another", ns)
	}
	old := recordedNamespace(dir)
	if old == ns {
		return nil
	}
	rt, err := connectRuntime(socket, dir, old)
	if err != nil {
		return err
	}
	defer rt.Close()
	ids, err := rt.Containers(ctx)
	if err != nil {
		return fmt.Errorf("agent: containers in namespace %s: %w", old, err)
	}
	if len(ids) > 0 {
		return fmt.Errorf("agent: this agent's sites run in containerd namespace %s, not %s: stop them first (sandboxd agent --stop), "+
			"or keep the namespace", old, ns)
	}
	return nil
}

// recordNamespace keeps a shared namespace in the data dir, or removes
// the record when the agent's namespace is its own.
func recordNamespace(dir, ns string) error {
	path := filepath.Join(dir, namespaceRecord)
	if ns == Namespace(dir) {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return os.WriteFile(path, []byte(ns+"\n"), 0o600)
}

// recordedNamespace is the namespace recordNamespace kept, or the
// agent's own.
func recordedNamespace(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, namespaceRecord))
	if ns := strings.TrimSpace(string(b)); err == nil && ns != "" {
		return ns
	}
	return Namespace(dir)
}

// socketRecord names the file in an agent's data dir that keeps the
// socket of a containerd the agent did not start, so that stopping the
// agent's containers later (sandboxd dev --stop) finds them.
const socketRecord = "containerd-socket"

// recordSocket keeps socket in the data dir, or removes the record when
// the agent's containerd is its own (under the data dir).
func recordSocket(dir, socket string) error {
	path := filepath.Join(dir, socketRecord)
	if filepath.Dir(socket) == containerdDir(dir) {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(socket+"\n"), 0o600)
}

// recordedSocket is the socket recordSocket kept, or "".
func recordedSocket(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, socketRecord))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// NetworkName is the short id of the site network of the agent with this
// data dir (its bridge is sbx<name>, its nftables tables sandboxd_<name>).
func NetworkName(dataDir string) string {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		dir = dataDir
	}
	sum := sha256.Sum256([]byte("network:" + dir))
	return hex.EncodeToString(sum[:])[:8]
}

// hostResolvers are the host's nameservers a site could use: not the
// host's loopback (a site cannot reach it).
func hostResolvers() []string {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && !a.IsLoopback() {
				out = append(out, a.String())
			}
		}
	}
	return out
}

// sandboxBinary is the runtime binary sites run under for a runtime
// class: "" for runc, the runsc wrapper (written under dir) for gVisor.
func sandboxBinary(dir, class string) (string, error) {
	switch class {
	case "", SandboxRunc:
		return "", nil
	case SandboxGVisor:
		runsc, err := exec.LookPath("runsc")
		if err != nil {
			return "", fmt.Errorf("runtime gvisor: runsc is not installed (apt-get install runsc): %w", err)
		}
		wrapper := filepath.Join(dir, "runsc-sandbox")
		if err := runtime.WriteRunscWrapper(wrapper, runsc); err != nil {
			return "", fmt.Errorf("runtime gvisor: %w", err)
		}
		return wrapper, nil
	}
	return "", fmt.Errorf("runtime %q: use runc or gvisor", class)
}

// serveMetrics starts the operator's metrics listener when addr is set:
// the AgentService port takes only servers' certificates, which a
// Prometheus server does not hold.
func (a *Agent) serveMetrics(addr string) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("agent metrics listen %s: %w", addr, err)
	}
	a.metricsAddr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metrics.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		status, code := "ok", http.StatusOK
		select {
		case <-a.registered:
		default:
			status, code = "not_registered", http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, "{\"status\":%q}\n", status)
	})
	a.metricsHTTP = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = a.metricsHTTP.Serve(ln) }()
	return nil
}

// MetricsAddr is the operator's metrics listener address, or "".
func (a *Agent) MetricsAddr() string { return a.metricsAddr }

// serveService serves the AgentService h on a.ln. Only control-plane
// servers call here (mutual TLS, a server's certificate the cluster
// still honours), with long RPCs (site creation, plugin ZIPs): headers,
// idle connections and header size are bounded; a ReadTimeout or
// WriteTimeout would cut those RPCs, so there is none.
func (a *Agent) serveService(h http.Handler) {
	a.http = &http.Server{Handler: a.serviceHandler(h), Protocols: rpcauth.Protocols(),
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	go func() { _ = a.http.Serve(tls.NewListener(a.ln, a.creds.ServerTLS(true))) }()
}

// serveIngress starts the node's ingress for edges to sites.
func (a *Agent) serveIngress(sites siteingress.Sites) error {
	in, err := siteingress.Listen(orDefault(a.cfg.IngressAddr, "127.0.0.1:0"), ingressTLS(a.creds), sites, a.log)
	if err != nil {
		return err
	}
	a.ingress = in
	go func() { _ = in.Serve() }()
	return nil
}

// ingressPublicAddr is host:port edges reach the ingress at.
func (a *Agent) ingressPublicAddr() string {
	if a.cfg.IngressPublicAddr != "" {
		return a.cfg.IngressPublicAddr
	}
	host, port, _ := net.SplitHostPort(a.ingress.Addr())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = a.cfg.BackendHost
	}
	return net.JoinHostPort(host, port)
}

// ensureSwap gives dozing sites compressed swap (a quarter of the host's
// memory at most, in zram) and keeps the agent's own cgroup out of it.
// Without swap, a dozing site gives back its page cache only.
func (a *Agent) ensureSwap() {
	on, err := nodeswap.Ensure(memTotal() / 4)
	switch {
	case err != nil:
		a.log.Warn("no swap for dozing sites: they keep their memory until they sleep", "err", err)
	case on:
		a.log.Info("compressed swap (zram) switched on for dozing sites")
	}
	if err := nodeswap.Exempt(os.Getpid()); err != nil {
		a.log.Warn("keeping the agent out of swap", "err", err)
	}
}

// memTotal is the host's memory in bytes (1 GiB when unknown).
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	return 1 << 30
}

// ingressSites is the node's sites as its ingress reaches them: a
// connection from an edge is a visitor's door.
type ingressSites struct{ m *sites.Manager }

func (s ingressSites) Backend(id string) (string, bool) { return s.m.Backend(id) }

func (s ingressSites) Hold(ctx context.Context, id string) (func(), error) {
	return s.m.Hold(ctx, id, sites.DoorEdge)
}
