package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/controlplane/api"
	"github.com/sandboxd/sandboxd/controlplane/blobs"
	"github.com/sandboxd/sandboxd/controlplane/cluster"
	"github.com/sandboxd/sandboxd/controlplane/oauth"
	"github.com/sandboxd/sandboxd/controlplane/plans"
	"github.com/sandboxd/sandboxd/controlplane/server"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/mirror"
	"github.com/sandboxd/sandboxd/internal/pki"
	"github.com/sandboxd/sandboxd/internal/ratelimit"
	"github.com/sandboxd/sandboxd/internal/safefetch"
)

// commonFlags are the flags server and dev share.
type commonFlags struct {
	cfg            server.Config
	logFormat      string
	logLevel       string
	join           string
	fetchAllow     string
	trustedProxies string
	plansFile      string
	pool           string
	webhookRetries string
	mirror         string
	mirrorOnly     bool
	edgeAddrs      string
	sealingKey     func() (string, error)
	blobStore      string
	// registrationsPerHour and maxClients bound OAuth client
	// registrations (0: no limit).
	registrationsPerHour int
	maxClients           int
}

func (c *commonFlags) register(fs *flag.FlagSet, logFormat string) {
	c.cfg = server.DefaultConfig()
	fs.StringVar(&c.cfg.DataDir, "data-dir", c.cfg.DataDir, "directory for all state")
	fs.StringVar(&c.cfg.APIAddr, "api-addr", c.cfg.APIAddr, "listen address of the REST API")
	fs.StringVar(&c.cfg.AdvertiseAPI, "advertise-api", "", "API URL other servers and emails use (default http://<api-addr>)")
	fs.StringVar(&c.cfg.SMTP.Addr, "smtp-addr", os.Getenv("SANDBOXD_SMTP_ADDR"), "SMTP server host:port for invitation email (default: keep mail in the outbox)")
	fs.StringVar(&c.cfg.SMTP.From, "smtp-from", "sandboxd@localhost", "sender address of outgoing email")
	fs.StringVar(&c.cfg.SMTP.Username, "smtp-username", os.Getenv("SANDBOXD_SMTP_USERNAME"), "SMTP username (password from SANDBOXD_SMTP_PASSWORD)")
	fs.StringVar(&c.logFormat, "log-format", logFormat, "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.fetchAllow, "fetch-allow", os.Getenv("SANDBOXD_FETCH_ALLOW"),
		"addresses or CIDRs, comma-separated, that customer URLs (zipUrl, release assets) may reach although private or loopback")
	fs.StringVar(&c.trustedProxies, "trusted-proxies", os.Getenv("SANDBOXD_TRUSTED_PROXIES"),
		"addresses or CIDRs, comma-separated, of proxies in front of the API whose X-Forwarded-For names the client (default: none; the TCP peer is the client)")
	fs.StringVar(&c.cfg.GitHubAPI, "github-api", os.Getenv("SANDBOXD_GITHUB_API"), "code host API base URL for Library repository entries (default https://api.github.com)")
	fs.StringVar(&c.pool, "pool", "", "warm pools: comma-separated PHP=N, e.g. 8.2=4: every node keeps N ready fresh sites of that PHP version for creates to claim")
	fs.StringVar(&c.mirror, "resource-mirror", os.Getenv("SANDBOXD_RESOURCE_MIRROR"),
		"where Blueprint resources are fetched from: host[/path]=base-URL rules, comma-separated, e.g. downloads.wordpress.org=http://10.0.0.5/wporg")
	fs.BoolVar(&c.mirrorOnly, "resource-mirror-only", false, "fetch Blueprint resources only through --resource-mirror (an egress proxy); unmapped URLs are unreachable")
	fs.StringVar(&c.webhookRetries, "webhook-retries", "",
		"waits before each webhook retry, comma-separated durations (default 10s,30s,1m,5m,15m,1h,3h: 8 attempts); each varies by ±20%")
	fs.StringVar(&c.plansFile, "plans", "", `JSON file of plan limits, {"free": {...}, "paid": {...}} with the fields of GET /api/account/usage's limits; what it leaves out keeps the default`)
	fs.StringVar(&c.cfg.ImportStore.Endpoint, "import-store", os.Getenv("SANDBOXD_IMPORT_STORE"),
		"S3-compatible object store URL for direct multipart import uploads, e.g. http://127.0.0.1:7070 (keys from "+
			"SANDBOXD_IMPORT_STORE_ACCESS_KEY and SANDBOXD_IMPORT_STORE_SECRET_KEY; default: none, multipart answers mode local)")
	fs.StringVar(&c.blobStore, "blob-store", os.Getenv("SANDBOXD_BLOB_STORE"),
		"where blobs (Library ZIPs, template artifacts, import archives) live: local (the data dir, copied between servers) or "+
			"s3://BUCKET[/PREFIX]?endpoint=http(s)://host:port[&region=R], one bucket all servers share (made if missing; keys from "+
			"SANDBOXD_BLOB_STORE_ACCESS_KEY and SANDBOXD_BLOB_STORE_SECRET_KEY)")
	fs.Int64Var(&c.cfg.MaxImportBytes, "max-import-bytes", 20<<30, "largest archive an import may upload, in bytes")
	fs.IntVar(&c.registrationsPerHour, "oauth-registrations-per-hour", api.DefaultRegistrationsPerHour,
		"OAuth clients one address (an IPv6 /48) may register an hour at POST /api/connect/register, which needs no login (0: no limit)")
	fs.IntVar(&c.maxClients, "oauth-max-clients", oauth.DefaultMaxClients,
		"most OAuth clients the cluster keeps registered; past it registrations answer 429 until unused ones are removed (0: no cap)")
	fs.StringVar(&c.cfg.ImportStore.Bucket, "import-store-bucket", "sandboxd-imports", "bucket of --import-store (made if missing)")
	fs.StringVar(&c.cfg.ImportStore.Region, "import-store-region", "us-east-1", "region of --import-store")
	fs.StringVar(&c.cfg.SandboxDomain, "sandbox-domain", c.cfg.SandboxDomain, "domain sites live under: <slug>.<domain> (a wildcard DNS name pointing at the edges)")
	fs.StringVar(&c.cfg.SiteScheme, "site-scheme", c.cfg.SiteScheme, "scheme of site URLs: http, or https when the edges hold a wildcard certificate")
	fs.IntVar(&c.cfg.SitePort, "site-port", c.cfg.SitePort, "port of site URLs (80 and 443 are left out); dev takes --edge-addr's")
	fs.StringVar(&c.cfg.DNSResolver, "dns-resolver", os.Getenv("SANDBOXD_DNS_RESOLVER"), "host:port of the DNS resolver custom-domain checks ask (default: the first nameserver in /etc/resolv.conf)")
	fs.StringVar(&c.edgeAddrs, "edge-addresses", os.Getenv("SANDBOXD_EDGE_ADDRESSES"), "comma-separated public IPs of the edges: apex custom domains point A/AAAA records at them (without any, only subdomains can be connected)")
	b := &c.cfg.CertBudget
	fs.IntVar(&b.Cluster, "acme-orders-cluster", b.Cluster, "new certificate orders every edge together may place with the ACME CA per --acme-orders-window, renewals counted; renewals may go a fifth above it (one ACME account; Let's Encrypt allows 300 per 3h; 0: unbounded)")
	fs.IntVar(&b.Workspace, "acme-orders-workspace", b.Workspace, "new certificate orders the custom domains and sandbox hosts of one account's workspaces may cause per --acme-orders-window (0: unbounded)")
	fs.DurationVar(&b.Window, "acme-orders-window", b.Window, "window of --acme-orders-cluster and --acme-orders-workspace")
	fs.IntVar(&b.RegisteredDomain, "acme-orders-registered-domain", b.RegisteredDomain, "new certificate orders under one registered domain (example.com, or the sandbox domain's) per --acme-orders-registered-domain-window (Let's Encrypt allows 50 a week; 0: unbounded)")
	fs.DurationVar(&b.RegisteredDomainWindow, "acme-orders-registered-domain-window", b.RegisteredDomainWindow, "window of --acme-orders-registered-domain")
	fs.DurationVar(&b.Cooldown, "acme-reorder-cooldown", b.Cooldown, "how long after a name's certificate order the same name may not order again (a name disconnected and connected again reuses its certificate from storage at no cost; 0: no cool-down)")
	c.cfg.ImportStore.AccessKey = os.Getenv("SANDBOXD_IMPORT_STORE_ACCESS_KEY")
	c.cfg.ImportStore.SecretKey = os.Getenv("SANDBOXD_IMPORT_STORE_SECRET_KEY")
	c.cfg.SMTP.Password = os.Getenv("SANDBOXD_SMTP_PASSWORD")
	c.sealingKey = secretFlag(fs, "sealing-key", "SANDBOXD_SEALING_KEY",
		"keys every server seals secrets in the replicated state with, the same on all servers: the first seals, any others "+
			"(one per line in the file, comma-separated in the variable) only open what they sealed, until \"sandboxd admin rotate-sealing-key\" "+
			"reseals it (default: one made once in the data dir, for one machine)")
	fs.StringVar(&c.cfg.AdvertiseCluster, "advertise-cluster", "", "cluster URL agents, edges and other servers dial (default https://<cluster-addr>)")
	fs.DurationVar(&c.cfg.HeartbeatInterval, "heartbeat-interval", 2*time.Second, "how often agents report to the control plane")
	fs.DurationVar(&c.cfg.NodeDownAfter, "node-down-after", 0, "a node silent this long is down and its sites unavailable (default: 5 heartbeat intervals)")
	fs.DurationVar(&c.cfg.SnapshotEvery, "snapshot-every", time.Hour, "how often each running site's files and database are copied to the blob store (0: never on a schedule)")
	fs.IntVar(&c.cfg.SnapshotsKept, "snapshots-kept", 2, "snapshots kept per site")
	fs.DurationVar(&c.cfg.OrphanGrace, "orphan-grace", 30*time.Second, "how long a node that was away may report a site no longer its own (moved or deleted meanwhile) before it is told to remove it")
	fs.DurationVar(&c.cfg.RescheduleAfter, "reschedule-after", 15*time.Minute, "how long a node may be down before its sites are restored on other nodes from their latest snapshots (0: never)")
	fs.DurationVar(&c.cfg.CertTTL, "cert-ttl", 7*24*time.Hour, "lifetime of the certificates the cluster CA issues to servers, agents and edges (renewed at two thirds)")
}

func (c *commonFlags) start() (*server.Server, error) {
	log, err := newLogger(os.Stderr, c.logFormat, c.logLevel)
	if err != nil {
		return nil, err
	}
	c.cfg.Logger = log
	if c.cfg.SealingKey, err = c.sealingKey(); err != nil {
		return nil, err
	}
	if c.cfg.FetchAllow, err = safefetch.ParseAllow(c.fetchAllow); err != nil {
		return nil, fmt.Errorf("--fetch-allow: %w", err)
	}
	if c.cfg.TrustedProxies, err = safefetch.ParseAllow(c.trustedProxies); err != nil {
		return nil, fmt.Errorf("--trusted-proxies: %w", err)
	}
	if c.cfg.ResourceMirror, err = mirror.Parse(c.mirror, !c.mirrorOnly); err != nil {
		return nil, fmt.Errorf("--resource-mirror: %w", err)
	}
	if c.cfg.WebhookSchedule, err = durations(c.webhookRetries); err != nil {
		return nil, fmt.Errorf("--webhook-retries: %w", err)
	}
	if c.cfg.BlobStore, err = blobStoreConfig(c.blobStore, os.Getenv); err != nil {
		return nil, fmt.Errorf("--blob-store: %w", err)
	}
	if c.cfg.Pool, err = poolSizes(c.pool); err != nil {
		return nil, fmt.Errorf("--pool: %w", err)
	}
	if c.cfg.EdgeAddrs, err = addrList(c.edgeAddrs); err != nil {
		return nil, fmt.Errorf("--edge-addresses: %w", err)
	}
	c.cfg.RateLimits.Registrations = ratelimit.PerHour(c.registrationsPerHour)
	c.cfg.OAuthClients.MaxClients = c.maxClients
	if c.maxClients == 0 {
		c.cfg.OAuthClients.MaxClients = -1 // oauth.Limits: below zero is no cap
	}
	if c.plansFile != "" {
		if c.cfg.Plans, err = readPlans(c.plansFile); err != nil {
			return nil, fmt.Errorf("--plans: %w", err)
		}
	}
	s, err := server.New(c.cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func runServer(args []string) error {
	fs := newFlagSet("sandboxd server")
	var c commonFlags
	c.register(fs, "json")
	fs.StringVar(&c.cfg.NodeID, "node-id", "", "server id in the Raft cluster (default: made once and kept in the data dir)")
	fs.StringVar(&c.cfg.RaftAddr, "raft-addr", "127.0.0.1:8300", "listen address of Raft")
	fs.StringVar(&c.cfg.AdvertiseRaftAddr, "advertise-raft", "", "Raft address peers dial (default --raft-addr)")
	fs.DurationVar(&c.cfg.RaftHeartbeatTimeout, "raft-heartbeat-timeout", cluster.DefaultHeartbeatTimeout,
		"how long a follower waits to hear from the leader before it calls an election")
	fs.DurationVar(&c.cfg.RaftElectionTimeout, "raft-election-timeout", cluster.DefaultElectionTimeout,
		"how long a candidate waits for votes before it tries again (at least the heartbeat timeout)")
	fs.StringVar(&c.cfg.ClusterAddr, "cluster-addr", "127.0.0.1:7443", "listen address of the mutual-TLS port agents, edges and other servers use")
	fs.StringVar(&c.join, "join", "", "cluster URL(s) of existing servers, comma-separated (https://host:7443); joins instead of bootstrapping")
	joinToken := secretFlag(fs, "join-token", "SANDBOXD_JOIN_TOKEN", "join token spent on the first start of a joining server (from \"sandboxd admin join-token create --role server\")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.join != "" {
		c.cfg.Bootstrap = false
		for _, p := range list(c.join) {
			if !strings.Contains(p, "://") {
				p = "https://" + p
			}
			c.cfg.Join = append(c.cfg.Join, p)
		}
		var err error
		if c.cfg.JoinToken, err = joinToken(); err != nil {
			return err
		}
	}
	s, err := c.start()
	if err != nil {
		return err
	}
	fmt.Printf("sandboxd server %s: API %s, cluster %s, Raft %s\n", s.Node().ID(), s.URL(), s.ClusterURL(), c.cfg.RaftAddr)
	if tok := s.OperatorToken(); tok != "" {
		// Printed once the token works: scripts wait for this line.
		go func() {
			<-s.OperatorTokenReady()
			fmt.Printf("operator token in %s (sandboxd admin reads it there)\n", filepath.Join(c.cfg.DataDir, "operator-token"))
		}()
	}
	waitSignal()
	return s.Close()
}

func runDev(args []string) error {
	fs := newFlagSet("sandboxd dev")
	var c commonFlags
	c.register(fs, "text")
	edgeAddr := fs.String("edge-addr", "127.0.0.1:8081", "listen address of the edge that serves the sites")
	edgeTLSAddr := fs.String("edge-tls-addr", "", "HTTPS listen address of the edge (with --acme-ca: certificates for custom domains)")
	edgeMetricsAddr := fs.String("edge-metrics-addr", "", "operator-only listen address of the edge's /metrics and /healthz (empty: none)")
	agentMetricsAddr := fs.String("agent-metrics-addr", "", "operator-only listen address of the agent's /metrics and /healthz (empty: none)")
	var acmeF acmeFlags
	acmeF.register(fs)
	imagesDir := fs.String("images-dir", images.DefaultDir(), "image cache filled by \"make images\"")
	socket := fs.String("containerd-socket", "/run/containerd/containerd.sock", "containerd to use; one is started under the data dir when none answers")
	namespace := fs.String("containerd-namespace", "", namespaceUsage)
	phpVersions := fs.String("php-versions", "", phpVersionsUsage)
	stop := fs.Bool("stop", false, "stop the sites, MariaDB and containerd left running by an earlier \"sandboxd dev\" on this data dir, and exit")
	purge := fs.Bool("purge", false, "stop as --stop does, give back the host claims and remove the data dir (every site), and exit")
	maxSites := fs.Int("max-sites", 0, "most sites this machine's node takes (0: unlimited); more nodes join with \"sandboxd agent\"")
	var siteNet siteNetFlags
	siteNet.register(fs, "none", "127.0.0.1:2222") // a developer's machine lends sites no network
	if err := fs.Parse(args); err != nil {
		return err
	}
	acfg := agent.Config{DataDir: filepath.Join(c.cfg.DataDir, "agent"), ImagesDir: *imagesDir, ContainerdSocket: *socket, Namespace: *namespace, MaxSites: *maxSites,
		PHPVersions: list(*phpVersions)}
	if err := siteNet.apply(&acfg); err != nil {
		return err
	}
	if *stop || *purge {
		return stopAgent(filepath.Join(c.cfg.DataDir, "agent"), c.cfg.DataDir, *purge)
	}
	_, port, err := net.SplitHostPort(*edgeAddr)
	if err != nil {
		return fmt.Errorf("--edge-addr: %w", err)
	}
	if c.cfg.SitePort, err = strconv.Atoi(port); err != nil || c.cfg.SitePort == 0 {
		return fmt.Errorf("--edge-addr needs a fixed port, got %q", *edgeAddr)
	}
	if err := server.RemoveDevEnv(c.cfg.DataDir); err != nil {
		return err
	}
	s, err := c.start()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := s.WaitLeader(ctx); err != nil {
		s.Close()
		return err
	}
	token, err := s.EnsureDevOwner(ctx)
	if err != nil {
		s.Close()
		return err
	}
	// The node and the edge join through the cluster port like any
	// other; their certificates are kept for the next start.
	acfg.ControlPlane, acfg.Logger, acfg.MetricsAddr = []string{s.ClusterURL()}, c.cfg.Logger, *agentMetricsAddr
	if acfg.JoinToken, err = s.LocalJoinToken(ctx, filepath.Join(acfg.DataDir, "tls"), pki.RoleAgent); err != nil {
		s.Close()
		return err
	}
	a, err := agent.New(ctx, acfg)
	if err != nil {
		s.Close()
		return fmt.Errorf("node agent: %w", err)
	}
	a.Start()
	edgeEnroll, edgeCreds, err := s.LocalMember(ctx, filepath.Join(c.cfg.DataDir, "edge", "tls"), pki.RoleEdge, "edge-dev")
	if err != nil {
		return errors.Join(err, a.Close(), s.Close())
	}
	go enroll.KeepFresh(context.Background(), edgeEnroll, edgeCreds, func() []string { return []string{s.ClusterURL()} })
	ecfg := edge.Config{ID: "edge-dev", ControlPlane: []string{s.ClusterURL()}, Creds: edgeCreds, Addr: *edgeAddr, TLSAddr: *edgeTLSAddr,
		MetricsAddr: *edgeMetricsAddr, Logger: c.cfg.Logger}
	if err := acmeF.apply(&ecfg); err != nil {
		a.Close()
		s.Close()
		return err
	}
	e, err := edge.New(ecfg)
	if err != nil {
		a.Close()
		s.Close()
		return err
	}
	e.Start()
	// Print the credentials only once a site can be created and served.
	for _, ready := range []<-chan struct{}{a.Registered(), e.Ready()} {
		select {
		case <-ready:
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("agent or edge did not come up: %w", ctx.Err()), e.Close(), a.Close(), s.Close())
		}
	}
	if err := s.WriteDevEnv(token); err != nil {
		return errors.Join(err, e.Close(), a.Close(), s.Close())
	}
	fmt.Printf("SANDBOX_URL=%s\nSANDBOX_TOKEN=%s\n", s.URL(), token)
	ssh := a.SSHAddr()
	if ssh == "" {
		ssh = "off"
	}
	fmt.Fprintf(os.Stderr, "\nsandboxd dev is running: API %s, sites on %s (PHP %s), SSH gateway %s; data in %s (the two lines above are kept in %s/%s).\n"+
		"Create a site:\n  curl -s -X POST %s/api/app/sites -H \"Authorization: Bearer %s\" -H 'Content-Type: application/json' -d '{\"name\":\"My site\"}'\n"+
		"or with the command line (make build puts it in bin/):\n  sandboxctl login --server %s   # in a browser; or --with-token < token\n"+
		"  sandboxctl sites create --name \"My site\" --wait\n\n",
		s.URL(), "http://"+*edgeAddr, strings.Join(a.PHPVersions(), ", "), ssh, c.cfg.DataDir, c.cfg.DataDir, server.DevEnvFile, s.URL(), token, s.URL())
	waitSignal()
	// Sites, MariaDB and containerd keep running: the next start
	// re-attaches to them in milliseconds. The API does not.
	return errors.Join(server.RemoveDevEnv(c.cfg.DataDir), e.Close(), a.Close(), s.Close())
}

func waitSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	<-ch
	signal.Stop(ch)
}

// readPlans reads plan limits over the defaults, refusing unknown fields
// so a misspelt limit is not silently the default.
func readPlans(path string) (plans.Config, error) {
	cfg := plans.Default()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, cfg.Validate()
}

// poolSizes reads --pool: PHP=N pairs, each version one of the contract's
// and N at most 64.
// blobStoreConfig reads --blob-store and, for a bucket, its keys from the
// environment: keys never go on a command line.
func blobStoreConfig(raw string, getenv func(string) string) (blobs.S3Config, error) {
	cfg, err := blobs.ParseURL(raw)
	if err != nil || cfg.Endpoint == "" {
		return cfg, err
	}
	cfg.AccessKey, cfg.SecretKey = getenv("SANDBOXD_BLOB_STORE_ACCESS_KEY"), getenv("SANDBOXD_BLOB_STORE_SECRET_KEY")
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return blobs.S3Config{}, fmt.Errorf("%s needs its keys in SANDBOXD_BLOB_STORE_ACCESS_KEY and SANDBOXD_BLOB_STORE_SECRET_KEY", cfg)
	}
	return cfg, nil
}

func poolSizes(s string) (map[string]int, error) {
	kv, err := pairs(s)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for php, v := range kv {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 64 {
			return nil, fmt.Errorf("%s=%s: the size must be 0 to 64", php, v)
		}
		if !sitespec.ValidPHP(php) {
			return nil, fmt.Errorf("%s is not a PHP version (one of %s)", php, strings.Join(sitespec.PHPVersions, ", "))
		}
		out[php] = n
	}
	return out, nil
}

// addrList reads a comma-separated list of IP addresses.
func addrList(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address", f)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// durations reads a comma-separated list of durations; empty is nil.
func durations(s string) ([]time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q is not a positive duration", f)
		}
		out = append(out, d)
	}
	if len(out) > 20 {
		return nil, fmt.Errorf("at most 20 retries, got %d", len(out))
	}
	return out, nil
}
