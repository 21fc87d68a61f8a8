package main

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/edge"
	"github.com/sandboxd/sandboxd/internal/enroll"
	"github.com/sandboxd/sandboxd/internal/pki"
)

// runAgent runs a node agent against a control plane.
func runAgent(args []string) error {
	fs := newFlagSet("sandboxd agent")
	var cfg agent.Config
	var logFormat, logLevel, labels, phpImages, controlPlane string
	fs.StringVar(&controlPlane, "control-plane", "https://127.0.0.1:7443", "comma-separated cluster URLs (--cluster-addr) of control-plane servers; one is enough")
	joinToken := secretFlag(fs, "join-token", "SANDBOXD_JOIN_TOKEN", "join token spent on the first start (from \"sandboxd admin join-token create --role agent\")")
	fs.StringVar(&cfg.DataDir, "data-dir", "/var/lib/sandboxd/agent", "directory for sites, MariaDB and (if started here) containerd")
	fs.StringVar(&cfg.NodeID, "node-id", "", "node id (default: made once and kept in the data dir)")
	fs.StringVar(&cfg.ListenAddr, "listen-addr", "127.0.0.1:8090", "listen address of the AgentService")
	fs.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "", "AgentService URL the control plane dials (default https://<listen-addr>)")
	fs.StringVar(&cfg.BackendHost, "backend-host", "127.0.0.1", "this node's address as edges reach it (the ingress's host when --ingress-addr binds every address)")
	fs.StringVar(&cfg.IngressAddr, "ingress-addr", "127.0.0.1:8444", "listen address where edges reach this node's sites (mutual TLS, edges' certificates only); 0.0.0.0:8444 for edges on other hosts")
	fs.StringVar(&cfg.IngressPublicAddr, "ingress-public-addr", "", "host:port edges dial for the ingress (default: --ingress-addr, with --backend-host for an unspecified host)")
	fs.StringVar(&cfg.ContainerdSocket, "containerd-socket", "/run/containerd/containerd.sock", "containerd to use; one is started under the data dir when none answers")
	fs.StringVar(&cfg.Namespace, "containerd-namespace", "", namespaceUsage)
	phpVersions := fs.String("php-versions", "", phpVersionsUsage)
	fs.StringVar(&cfg.ImagesDir, "images-dir", images.DefaultDir(), "image cache filled by \"make images\"")
	fs.StringVar(&phpImages, "php-image", "", "comma-separated VERSION=REF pairs pointing PHP versions at registry images (pulled when missing; localhost registries over plain HTTP)")
	fs.StringVar(&labels, "labels", "", "comma-separated key=value labels sites can be constrained to")
	fs.Int64Var(&cfg.MemoryMB, "memory-mb", 0, "memory offered to sites (0: unlimited)")
	fs.IntVar(&cfg.MaxSites, "max-sites", 0, "most sites this node takes (0: unlimited)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "operator-only listen address of /metrics and /healthz, e.g. 127.0.0.1:9102 (empty: none; the AgentService port takes servers' certificates only)")
	fs.StringVar(&logFormat, "log-format", "json", "log format: text or json")
	fs.StringVar(&logLevel, "log-level", "info", "log level")
	var net siteNetFlags
	net.register(fs, "public", ":2222")
	stop := fs.Bool("stop", false, "stop everything this agent left running (SIGTERM leaves its sites up for the next start): sites, MariaDB, "+
		"a containerd it started, its mounts, bridge and nftables tables; data kept; refused while the agent runs")
	purge := fs.Bool("purge", false, "retire this host's agent: stop everything as --stop does, give back its site uids and subnet, "+
		"and remove the data dir (every site's files and database); drain the node first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *stop || *purge {
		return stopAgent(cfg.DataDir, cfg.DataDir, *purge)
	}
	if err := net.apply(&cfg); err != nil {
		return err
	}
	cfg.ControlPlane = list(controlPlane)
	var err error
	if cfg.JoinToken, err = joinToken(); err != nil {
		return err
	}
	if cfg.Labels, err = pairs(labels); err != nil {
		return fmt.Errorf("--labels: %w", err)
	}
	if cfg.ImageOverrides, err = pairs(phpImages); err != nil {
		return fmt.Errorf("--php-image: %w", err)
	}
	cfg.PHPVersions = list(*phpVersions)
	if cfg.Logger, err = newLogger(os.Stderr, logFormat, logLevel); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, err := agent.New(ctx, cfg)
	if err != nil {
		return err
	}
	a.Start()
	fmt.Printf("sandboxd agent: AgentService %s, control plane %s\n", a.URL(), cfg.ControlPlane)
	waitSignal()
	return a.Close()
}

// stopAgent is an agent's --stop and --purge, and dev's (whose data dir,
// shown, holds the agent's).
func stopAgent(dataDir, shown string, purge bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if !purge {
		if err := agent.Stop(ctx, dataDir); err != nil {
			return err
		}
		fmt.Println("stopped; data kept in", shown)
		return nil
	}
	if err := agent.Retire(ctx, dataDir, ""); err != nil {
		return err
	}
	if shown != dataDir {
		if err := agent.RemoveDataDir(shown); err != nil {
			return err
		}
	}
	fmt.Println("purged: everything stopped, host claims given back,", shown, "removed")
	return nil
}

// runEdge runs an edge proxy against a control plane.
func runEdge(args []string) error {
	fs := newFlagSet("sandboxd edge")
	var cfg edge.Config
	var logFormat, logLevel, controlPlane, dataDir string
	fs.StringVar(&controlPlane, "control-plane", "https://127.0.0.1:7443", "comma-separated cluster URLs (--cluster-addr) of control-plane servers; one is enough")
	fs.StringVar(&dataDir, "data-dir", "/var/lib/sandboxd/edge", "directory for the edge's cluster certificate")
	joinToken := secretFlag(fs, "join-token", "SANDBOXD_JOIN_TOKEN", "join token spent on the first start (from \"sandboxd admin join-token create --role edge\")")
	fs.StringVar(&cfg.ID, "id", "", "edge id in the control plane's logs (default: hostname)")
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:8081", "HTTP listen address")
	fs.StringVar(&cfg.TLSAddr, "tls-addr", "", "HTTPS listen address (needs --tls-cert and --tls-key, or --acme-ca)")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert", "", "certificate (PEM) for the sandbox domain, e.g. a wildcard")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key", "", "private key (PEM) of --tls-cert")
	fs.IntVar(&cfg.HTTPSPort, "https-port", 0, "port plain-HTTP requests for custom domains are redirected to (default: --tls-addr's)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "operator-only listen address of /metrics and /healthz, e.g. 127.0.0.1:9101 (empty: none; never the public --addr)")
	var acmeF acmeFlags
	acmeF.register(fs)
	fs.StringVar(&logFormat, "log-format", "json", "log format: text or json")
	fs.StringVar(&logLevel, "log-level", "info", "log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := acmeF.apply(&cfg); err != nil {
		return err
	}
	if cfg.TLSAddr != "" && cfg.ACME.CA == "" && (cfg.TLSCertFile == "" || cfg.TLSKeyFile == "") {
		return fmt.Errorf("--tls-addr needs --tls-cert and --tls-key, or --acme-ca")
	}
	if cfg.ID == "" {
		cfg.ID = agentSafe(hostname())
	}
	var err error
	if cfg.Logger, err = newLogger(os.Stderr, logFormat, logLevel); err != nil {
		return err
	}
	cfg.ControlPlane = list(controlPlane)
	tok, err := joinToken()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ecfg := enroll.Config{Dir: filepath.Join(dataDir, "tls"), Role: pki.RoleEdge, Name: cfg.ID, Servers: cfg.ControlPlane,
		JoinToken: tok, Logger: cfg.Logger}
	if cfg.Creds, err = enroll.Obtain(ctx, ecfg); err != nil {
		return err
	}
	e, err := edge.New(cfg)
	if err != nil {
		return err
	}
	e.Start()
	renewCtx, stopRenew := context.WithCancel(context.Background())
	defer stopRenew()
	go enroll.KeepFresh(renewCtx, ecfg, cfg.Creds, func() []string { return cfg.ControlPlane })
	fmt.Printf("sandboxd edge: http %s", e.Addr())
	if e.TLSAddr() != "" {
		fmt.Printf(", https %s", e.TLSAddr())
	}
	if e.MetricsAddr() != "" {
		fmt.Printf(", metrics %s", e.MetricsAddr())
	}
	fmt.Println()
	waitSignal()
	return e.Close()
}

// acmeFlags configure an edge's certificates for custom domains.
type acmeFlags struct {
	ca, email, root                     string
	noHTTP01, noTLSALPN01, sandboxHosts bool
}

func (f *acmeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "acme-ca", os.Getenv("SANDBOXD_ACME_CA"), "ACME directory URL for custom domains' certificates, e.g. https://acme-v02.api.letsencrypt.org/directory (needs an HTTPS listener)")
	fs.StringVar(&f.email, "acme-email", os.Getenv("SANDBOXD_ACME_EMAIL"), "contact address of the ACME account")
	fs.StringVar(&f.root, "acme-ca-root", "", "PEM file of the CA certificate the ACME server's own HTTPS is trusted by (a private CA such as Pebble)")
	fs.BoolVar(&f.noHTTP01, "acme-disable-http01", false, "do not use the HTTP-01 challenge (port 80 does not reach the edges)")
	fs.BoolVar(&f.noTLSALPN01, "acme-disable-tlsalpn01", false, "do not use the TLS-ALPN-01 challenge (TLS ends before the edges)")
	fs.BoolVar(&f.sandboxHosts, "acme-sandbox-hosts", false, "also get a certificate for each ready site's sandbox host on its first HTTPS visit (no wildcard certificate needed)")
}

func (f *acmeFlags) apply(cfg *edge.Config) error {
	cfg.ACME = edge.ACMEConfig{CA: f.ca, Email: f.email, DisableHTTPChallenge: f.noHTTP01, DisableTLSALPNChallenge: f.noTLSALPN01,
		SandboxHosts: f.sandboxHosts}
	if f.ca != "" && cfg.TLSAddr == "" {
		return fmt.Errorf("--acme-ca needs an HTTPS listener (--tls-addr, or --edge-tls-addr in dev)")
	}
	if f.root != "" {
		pem, err := os.ReadFile(f.root)
		if err != nil {
			return fmt.Errorf("--acme-ca-root: %w", err)
		}
		cfg.ACME.Roots = x509.NewCertPool()
		if !cfg.ACME.Roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--acme-ca-root: %s holds no PEM certificate", f.root)
		}
	}
	return nil
}

func pairs(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q is not key=value", p)
		}
		out[k] = v
	}
	return out, nil
}

// secretFlag takes a secret from --NAME-file or the environment variable,
// never from the command line (where ps shows it).
func secretFlag(fs *flag.FlagSet, name, env, usage string) func() (string, error) {
	file := fs.String(name+"-file", "", "file holding the "+usage+" (or "+env+")")
	return func() (string, error) {
		if *file != "" {
			b, err := os.ReadFile(*file)
			if err != nil {
				return "", fmt.Errorf("--%s-file: %w", name, err)
			}
			return strings.TrimSpace(string(b)), nil
		}
		return strings.TrimSpace(os.Getenv(env)), nil
	}
}

// list splits a comma-separated flag.
func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, strings.TrimRight(p, "/"))
		}
	}
	return out
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// agentSafe turns a host name into a member name: lower case, only
// a-z 0-9 . _ -, at most 64 characters.
func agentSafe(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' || r == '.' || r == '_' {
			b.WriteRune(r)
		}
	}
	out := strings.TrimLeft(b.String(), "-._")
	if len(out) > 64 {
		out = out[:64]
	}
	if out == "" {
		return "edge"
	}
	return out
}
