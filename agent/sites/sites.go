// Package sites is the lifecycle core of a node's WordPress sandboxes:
// for each site its own host uid, disk, files, database and user,
// network namespace and container, made (installed afresh, or from a
// template's Source), started, stopped, remade and deleted idempotently
// by site id, and re-attached after an agent restart; and its content
// copied out (snapshots) and in (imports) in place. The template store
// (agent/templates) and the toolbox (agent/toolbox) work on top of it.
//
// On the host a site is a root-owned directory (FS) holding what the
// agent writes for it (conf/, secrets/, login/: mounted read-only) and its disk (disk.img, mounted at
// disk/), whose top directories belong to the site's uid and are mounted
// writable. The disk's root is never mounted, so the site cannot replace
// those directories with links; the agent never reads or writes inside
// them as root except through agent/sitefile, and otherwise works inside
// the container as the site's user.
package sites

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent/dbguard"
	"github.com/sandboxd/sandboxd/agent/diskstore"
	"github.com/sandboxd/sandboxd/agent/images"
	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/agent/sitenet"
)

var (
	//go:embed files/start.sh
	startScript []byte
	//go:embed files/install.php
	installScript []byte
	//go:embed files/sandbox-mu-plugin.php
	muPlugin []byte
	//go:embed files/adminer.php
	adminerScript []byte
	//go:embed files/sendmail
	sendmailScript []byte
	// blueprintFiles is the Blueprint step runner, written to
	// conf/blueprint/ of every site.
	//go:embed files/blueprint/*.php
	blueprintFiles embed.FS
)

// Port is where every site's web server listens in its own namespace.
const Port = 8080

// Sentinel errors.
var (
	ErrNotFound = errors.New("site not found")
	ErrInvalid  = errors.New("invalid site request")
	// ErrDiskFull refuses a write the site's disk has no room for.
	ErrDiskFull = errors.New("the site's disk is full")
)

// Runtime is what the manager needs from containerd.
type Runtime interface {
	images.Store
	Run(ctx context.Context, s runtime.Spec) error
	Running(ctx context.Context, id string) (bool, error)
	Stop(ctx context.Context, id string, grace time.Duration) error
	Remove(ctx context.Context, id string) error
	Exec(ctx context.Context, id string, argv, env []string, uid, gid uint32, stdin []byte) (*runtime.ExecResult, error)
}

// Database is what the manager needs from the node's MariaDB.
type Database interface {
	Addr() string
	// SocketDir holds the server's Unix socket; sites get it read-only.
	SocketDir() string
	// AttachVolume makes dir (on the site's disk, never in its
	// container) the volume key, where the site's databases live and so
	// count against its disk; DetachVolume drops what is left there
	// and lets it go.
	AttachVolume(key, dir string) error
	DetachVolume(ctx context.Context, key string) error
	// CreateSiteDatabase places the database in volume ("": the
	// server's own data directory, for templates).
	CreateSiteDatabase(ctx context.Context, volume, name, user, password string) error
	DropSiteDatabase(ctx context.Context, name, user string) error
}

// Network gives a site its namespace and address (agent/sitenet).
type Network interface {
	Attach(ctx context.Context, id string, want netip.Addr) (sitenet.Attachment, error)
	Detach(ctx context.Context, id string) error
}

// UIDs hands out host uids no other site on the host has
// (agent/hostclaim); owner is the site's record file.
type UIDs interface {
	Claim(owner string) (int, error)
	Release(owner string) error
}

// Limits bound one site's container and disk.
type Limits struct {
	MemoryMB int64 `json:"memoryMb"`
	CPUMilli int64 `json:"cpuMilli"`
	Pids     int64 `json:"pids"`
	// DiskMB is the size of the site's disk: files, uploads, logs, mail.
	DiskMB int64 `json:"diskMb"`
	// SleepAfterSeconds is the plan's idle time before the site dozes:
	// 0 the node's default, below 0 never.
	SleepAfterSeconds int64 `json:"sleepAfterSeconds,omitempty"`
}

// Debug is WordPress's debug constants for a site.
type Debug struct {
	WPDebug        bool `json:"wpDebug"`
	WPDebugLog     bool `json:"wpDebugLog"`
	WPDebugDisplay bool `json:"wpDebugDisplay"`
	ScriptDebug    bool `json:"scriptDebug"`
}

// DefaultLimits fit an idle WordPress (~40 MiB) with room for a busy one,
// and a disk of 1 GiB (WordPress core takes about 60 MiB of it).
var DefaultLimits = Limits{MemoryMB: 256, CPUMilli: 1000, Pids: 128, DiskMB: 1024}

// CreateRequest asks for a site.
type CreateRequest struct {
	ID               string
	Slug             string
	Name             string
	PHPVersion       string
	WordPressVersion string
	URL              string
	AdminUser        string
	AdminEmail       string
	Limits           Limits
	// Scratch marks a site made to build something else from (a stock
	// template) and deleted after: one an agent restart finds is deleted.
	Scratch bool
	// Pooled marks a site that waits in a warm pool: it dozes at once,
	// until a claim (Rename) gives it an owner.
	Pooled bool
	// Profile names the profile its web server is sized by (Profiles);
	// empty is the node's.
	Profile string
}

// Site is the agent's record of one site, kept outside the site's own
// files so nothing running in the sandbox can change it.
type Site struct {
	ID               string `json:"id"`
	Slug             string `json:"slug"`
	Name             string `json:"name"`
	PHPVersion       string `json:"phpVersion"`
	WordPressVersion string `json:"wordpressVersion"`
	URL              string `json:"url"`
	AdminUser        string `json:"adminUser"`
	AdminEmail       string `json:"adminEmail"`
	Port             int    `json:"port"`
	// UID is the host uid (and gid) the site's processes and files have.
	UID int `json:"uid"`
	// IP is the site's address in its namespace; the edge dials IP:Port.
	IP         string            `json:"ip"`
	Image      string            `json:"image"`
	DBName     string            `json:"dbName"`
	DBUser     string            `json:"dbUser"`
	DBPassword string            `json:"dbPassword"`
	Limits     Limits            `json:"limits"`
	Debug      Debug             `json:"debug"`
	PHPConfig  map[string]string `json:"phpConfig,omitempty"`
	Stopped    bool              `json:"stopped"`
	// Template is the template a clone's tree lies over (its files are an
	// overlay); TemplateURL the URL its content was moved from.
	Template    string `json:"template,omitempty"`
	TemplateURL string `json:"templateUrl,omitempty"`
	// Stock says the template is the node's stock install: the clone has
	// its own title and administrator, set again on every reset.
	Stock bool `json:"stock,omitempty"`
	// DiskReserveMB is the room on the site's disk beyond its plan's
	// size that only MariaDB may use, where its database may overshoot
	// until the guard stops it; 0 for a disk made by an older agent, on
	// which the database is not (it stays in MariaDB's own directory
	// until the site is reset).
	DiskReserveMB int64 `json:"diskReserveMb,omitempty"`
	// Scratch and Pooled: see CreateRequest.
	Scratch bool `json:"scratch,omitempty"`
	Pooled  bool `json:"pooled,omitempty"`
	// Profile: see CreateRequest.
	Profile string `json:"profile,omitempty"`
	// Depth is how deeply the site sleeps ("" awake), SleptAt since when.
	Depth     Depth     `json:"depth,omitempty"`
	SleptAt   time.Time `json:"sleptAt,omitzero"`
	CreatedAt time.Time `json:"createdAt"`
}

// Config wires a Manager.
type Config struct {
	// Dir holds records/ (one JSON per site) and fs/ (each site's files).
	Dir     string
	Runtime Runtime
	Images  *images.Catalog
	DB      Database
	Network Network
	UIDs    UIDs
	// Sandbox is a runc-compatible binary sites run under instead of runc
	// (the runsc wrapper: gVisor); empty is runc.
	Sandbox string
	// Resolvers are the nameservers a site's resolv.conf lists (sites
	// reach them only if the egress policy lets them).
	Resolvers []string
	Logger    *slog.Logger
	// ReadyTimeout bounds the wait for a site's first HTTP answer.
	ReadyTimeout time.Duration
	// Guard holds each site's database to its plan's disk
	// (agent/dbguard); with none, databases stay in MariaDB's own
	// directory, bounded by nothing.
	Guard Guard
	// Idle is when idle sites doze and sleep (Settle): its Doze is for
	// the sites whose plan sets none, unless IdleOverride makes it every
	// site's (the operator's flag, tests).
	Idle         Idle
	IdleOverride bool
	// Observe, if set, is told of every wake and sleep.
	Observe Observer
	// Profile sizes the sites' web servers and opcache; zero is Lean.
	Profile Profile
	// WakeReserve is the share of the host's memory (0.1: a tenth) a
	// wake leaves available, putting the idlest sites to sleep if it must
	// (and refusing when that is not enough); 0 checks nothing.
	WakeReserve float64
	// SitesPerShim is how many sites share one shim process (sites of
	// neighbouring uids); 0 gives each its own.
	SitesPerShim int
	// DiskStore keeps the sites' disks where they clone by reference
	// (agent/diskstore), mounting an image of its own at fs/ when the
	// data directory's filesystem cannot; without it (or where it cannot
	// be made) the node has no checkpoints and no forks.
	DiskStore bool
}

// Guard holds sites' databases to their plans' disks (agent/dbguard).
type Guard interface {
	Track(ctx context.Context, s dbguard.Site) error
	Untrack(user string)
	Limited(user string) bool
}

// Manager runs a node's sites.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	mu    sync.Mutex
	sites map[string]*Site
	locks map[string]*sync.Mutex
	// content holds each site's guard between snapshots (shared) and
	// what replaces its content (alone); see Snapshot.
	content map[string]*sync.RWMutex
	http    *http.Client
	// tokenMu serializes one-time token writes, so a burst of them
	// keeps to maxLiveTokens.
	tokenMu sync.Mutex
	// presences is each site's sleep and wake bookkeeping (sleep.go).
	presences map[string]*presence
	// sourceBytes is each template database's size, by name, once read.
	sourceBytes sync.Map
	// cloning says the sites' disks clone by reference (checkpoints and
	// forks need it: a copy would freeze a site for a whole disk's copy).
	cloning bool
	// sqlSlots bounds the RunSQL calls under way on the node.
	sqlSlots chan struct{}
	now      func() time.Time
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
}

// New loads the site records under cfg.Dir.
func New(cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.Network == nil || cfg.UIDs == nil {
		return nil, errors.New("sites: a network and a uid registry are required")
	}
	for _, d := range []string{cfg.Dir, filepath.Join(cfg.Dir, "records"), filepath.Join(cfg.Dir, "fs")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, err
		}
	}
	cloning := false
	if cfg.DiskStore {
		st, err := diskstore.Prepare(filepath.Join(cfg.Dir, "fs"), filepath.Join(cfg.Dir, "fs.xfs"))
		switch {
		case errors.Is(err, exec.ErrNotFound):
			cfg.Logger.Warn("mkfs.xfs is not installed (Debian: xfsprogs): no checkpoints or forks on this node", "err", err)
		case err != nil:
			return nil, err
		case !st.Cloning:
			cfg.Logger.Warn("the sites' disks are where they cannot be cloned by reference: no checkpoints or forks on this node",
				"dir", st.Dir)
		}
		cloning = err == nil && st.Cloning
	}
	m := &Manager{cfg: cfg, cloning: cloning, sqlSlots: make(chan struct{}, 4), log: cfg.Logger.With("component", "sites"), sites: map[string]*Site{}, locks: map[string]*sync.Mutex{},
		content: map[string]*sync.RWMutex{}, presences: map[string]*presence{}, now: time.Now,
		dial: (&net.Dialer{Timeout: time.Second}).DialContext,
		http: &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	recs, _ := filepath.Glob(filepath.Join(cfg.Dir, "records", "*.json"))
	for _, f := range recs {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var s Site
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("site record %s: %w", f, err)
		}
		if s.UID == 0 {
			// Made by an agent before per-site uids: it shared uid 33 with
			// every site and cannot be trusted to be confined.
			m.log.Warn("site from an older agent is not served; delete and recreate it", "site_id", s.ID)
		}
		m.sites[s.ID] = &s
	}
	return m, nil
}

// Lock holds a site's lock until the function it returns is called:
// what changes a site (its record, container, files or database) runs
// under it, one at a time.
func (m *Manager) Lock(id string) func() {
	m.mu.Lock()
	l, ok := m.locks[id]
	if !ok {
		l = &sync.Mutex{}
		m.locks[id] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// contentGuard is a site's guard between snapshots and what replaces
// the site's content (see Snapshot); it is taken under the site's lock.
func (m *Manager) contentGuard(id string) *sync.RWMutex {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.content[id]
	if !ok {
		g = &sync.RWMutex{}
		m.content[id] = g
	}
	return g
}

func (m *Manager) get(id string) *Site {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sites[id]; ok {
		c := *s
		return &c
	}
	return nil
}

// Image is the runtime image of a PHP version, imported first if the
// node has not yet.
func (m *Manager) Image(ctx context.Context, php string) (string, error) {
	return m.cfg.Images.PHP(ctx, m.cfg.Runtime, php)
}

// Get returns a copy of a site's record, or nil.
func (m *Manager) Get(id string) *Site { return m.get(id) }

// List returns every site, ordered by id.
func (m *Manager) List() []Site {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Site, 0, len(m.sites))
	for _, s := range m.sites {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (m *Manager) save(s *Site) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	p := m.recordPath(s.ID)
	if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return err
	}
	m.mu.Lock()
	c := *s
	m.sites[s.ID] = &c
	m.mu.Unlock()
	return nil
}

var (
	idRE   = regexp.MustCompile(`^site_[a-z0-9]{4,40}$`)
	slugRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	userRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,59}$`)
	hostRE = regexp.MustCompile(`^[a-z0-9.-]+$`)
)

// Validate refuses a request Make would refuse, before anything is done
// for it.
func Validate(r CreateRequest) error { return validate(&r) }

func validate(r *CreateRequest) error {
	u, err := url.Parse(r.URL)
	switch {
	case !idRE.MatchString(r.ID):
		return fmt.Errorf("%w: id %q", ErrInvalid, r.ID)
	case !slugRE.MatchString(r.Slug):
		return fmt.Errorf("%w: slug %q", ErrInvalid, r.Slug)
	case r.PHPVersion == "":
		return fmt.Errorf("%w: php version is required", ErrInvalid)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || !hostRE.MatchString(u.Hostname()) || u.Path != "" || u.RawQuery != "" || u.User != nil:
		return fmt.Errorf("%w: url %q must be http(s)://host[:port]", ErrInvalid, r.URL)
	case !userRE.MatchString(r.AdminUser):
		return fmt.Errorf("%w: admin user %q", ErrInvalid, r.AdminUser)
	case strings.ContainsAny(r.AdminEmail, "'\"\\<> \n") || !strings.Contains(r.AdminEmail, "@"):
		return fmt.Errorf("%w: admin email %q", ErrInvalid, r.AdminEmail)
	case r.Profile != "" && Profiles[r.Profile].Name == "":
		return fmt.Errorf("%w: profile %q", ErrInvalid, r.Profile)
	}
	return nil
}

func containerID(siteID string) string { return "wp-" + siteID }

// ContainerID is the id of a site's container, where sessions (SSH,
// SFTP) of the site work.
func ContainerID(siteID string) string { return containerID(siteID) }

// dbName is the site's database and user name: the id without its prefix.
func dbName(siteID string) string { return "wp_" + strings.TrimPrefix(siteID, "site_") }

func (m *Manager) recordPath(id string) string {
	return filepath.Join(m.cfg.Dir, "records", id+".json")
}

// FS returns the root-owned directory of a site on the host.
func (m *Manager) FS(id string) string { return filepath.Join(m.cfg.Dir, "fs", id) }

// Data returns where the site's disk is mounted on the host: its top
// directories are the site's (wordpress/, state/, logs/, mail/, tmp/),
// but for its database volume (dbDir).
func (m *Manager) Data(id string) string { return filepath.Join(m.FS(id), "disk") }

// dbDir is the site's database volume: a top directory of its disk that
// no container of the site mounts, the node's MariaDB's own.
func (m *Manager) dbDir(id string) string { return filepath.Join(m.Data(id), "mariadb") }

// scratch reports whether the site was made to build something from
// (Scratch), or is one an agent before that field made for a stock
// template (its id says so).
func (s *Site) scratch() bool { return s.Scratch || strings.HasPrefix(s.ID, "site_stock") }

// Addr is where the site's web server answers: its own address, Port.
func (s *Site) Addr() string {
	return net.JoinHostPort(s.IP, strconv.Itoa(Port))
}
