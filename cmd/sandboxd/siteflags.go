package main

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/agent/mariadb"
	"github.com/sandboxd/sandboxd/agent/sitenet"
)

// siteNetFlags are the operator's switches for what sites may reach and
// what they run under.
type siteNetFlags struct {
	egress, allow, subnet, sandbox string
	ssh, sshPublic                 string
	gitCA                          string
	dbSystemMB, dbTempMB           int64
	dbMemoryMB, dbSessionMB        int64
	sleepAfter, deepSleepAfter     time.Duration
}

func (f *siteNetFlags) register(fs *flag.FlagSet, egress, ssh string) {
	fs.StringVar(&f.ssh, "ssh-addr", ssh, "listen address of the node's SSH gateway: customers' shells, commands and SFTP in their sites (empty: none)")
	fs.StringVar(&f.sshPublic, "ssh-public-addr", "", "host:port customers reach the SSH gateway at (default: --ssh-addr as bound)")
	fs.StringVar(&f.gitCA, "git-ca-file", "", "PEM bundle Git deploys trust for https code hosts instead of the system's roots (a private code host)")
	fs.StringVar(&f.egress, "site-egress", egress, "what sites reach beyond the node: none, or public (the internet; never private, loopback, link-local, CGNAT or reserved ranges)")
	fs.StringVar(&f.allow, "site-allow", "", "comma-separated ADDR[/BITS][:PORT] sites may reach whatever --site-egress says (e.g. a resolver 10.0.0.2:53)")
	fs.StringVar(&f.sandbox, "runtime", agent.SandboxRunc, "what sites run under: runc, or gvisor (runsc with the ptrace platform: a kernel of its own per site, at a cost in speed; sites made before keep theirs until reset)")
	fs.DurationVar(&f.sleepAfter, "sleep-after", 0, "idle time after which every site of this node dozes (frozen, its memory in compressed swap), whatever its plan's sleepAfterMinutes; 0: each plan's; -1s: no site sleeps")
	fs.DurationVar(&f.deepSleepAfter, "deep-sleep-after", agent.DefaultDeepSleepAfter, "how long a site dozes before it sleeps deeper (its processes stopped; waking takes a few tenths of a second more); -1s: never")
	fs.StringVar(&f.subnet, "site-subnet", "", "IPv4 subnet of the sites' bridge (default: a free /22 of 10.200.0.0/16, chosen once)")
	fs.Int64Var(&f.dbSystemMB, "mariadb-system-max-mb", mariadb.DefaultSystemMaxMB,
		"bound of the node's MariaDB system tablespace, which holds every site's undo log (a site's own tables are on its own disk); past half of it, the site transactions holding the undo are ended")
	fs.Int64Var(&f.dbTempMB, "mariadb-temp-max-mb", mariadb.DefaultTempMaxMB,
		"bound of the node's MariaDB temporary tablespace, and size of the disk of its sort files and on-disk temporary tables")
	fs.Int64Var(&f.dbMemoryMB, "mariadb-memory-mb", mariadb.DefaultMemoryMB,
		"memory limit of the node's MariaDB container: past it the kernel ends MariaDB and the agent starts it again, never the node's other processes; a site's connections together may hold an eighth of it")
	fs.Int64Var(&f.dbSessionMB, "mariadb-session-mem-mb", mariadb.DefaultSessionMemMB,
		"memory one database connection may hold in the node's MariaDB; a site cannot raise it, and a site connection holding more is ended")
}

// apply puts the flags into an agent config.
func (f *siteNetFlags) apply(cfg *agent.Config) error {
	cfg.SSHAddr, cfg.SSHPublicAddr, cfg.GitCAFile = f.ssh, f.sshPublic, f.gitCA
	if f.dbSystemMB < 64 || f.dbTempMB < 64 {
		return fmt.Errorf("--mariadb-system-max-mb and --mariadb-temp-max-mb must be at least 64")
	}
	if f.dbSessionMB < 16 || f.dbMemoryMB < 512 || f.dbSessionMB > f.dbMemoryMB/8 {
		return fmt.Errorf("--mariadb-session-mem-mb must be at least 16 and at most an eighth of --mariadb-memory-mb (at least 512): a site's connections together may hold an eighth")
	}
	cfg.DBSystemMaxMB, cfg.DBTempMaxMB = f.dbSystemMB, f.dbTempMB
	cfg.SleepAfter, cfg.DeepSleepAfter = f.sleepAfter, f.deepSleepAfter
	cfg.DBMemoryMB, cfg.DBSessionMemMB = f.dbMemoryMB, f.dbSessionMB
	switch e := sitenet.Egress(f.egress); e {
	case sitenet.EgressNone, sitenet.EgressPublic:
		cfg.SiteEgress = e
	default:
		return fmt.Errorf("--site-egress %q: use none or public", f.egress)
	}
	switch f.sandbox {
	case agent.SandboxRunc, agent.SandboxGVisor:
		cfg.Sandbox = f.sandbox
	default:
		return fmt.Errorf("--runtime %q: use runc or gvisor", f.sandbox)
	}
	for _, s := range strings.Split(f.allow, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		a, err := sitenet.ParseAllow(s)
		if err != nil {
			return fmt.Errorf("--site-allow: %w", err)
		}
		cfg.SiteAllow = append(cfg.SiteAllow, a)
	}
	if f.subnet != "" {
		p, err := netip.ParsePrefix(f.subnet)
		if err != nil || !p.Addr().Is4() || p.Bits() > 28 {
			return fmt.Errorf("--site-subnet %q: want an IPv4 prefix of /28 or larger", f.subnet)
		}
		cfg.SiteSubnet = p.Masked()
	}
	return nil
}
