// Package mariadb runs the one MariaDB server a node's sites share, as a
// container on the host network bound to 127.0.0.1 (which no site can
// reach: sites connect through its Unix socket, mounted into each), and
// manages each site's database and user in it.
package mariadb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// adminUser is the agent's own account.
const adminUser = "sandboxd"

// uid is the unprivileged user mariadbd runs as inside its container; the
// data directory on the host belongs to it.
const uid = 999

// UID is the host uid MariaDB's files have: a site's disk reserves room
// for it.
const UID = uid

// ContainerID is the MariaDB container's id in the agent's namespace.
const ContainerID = "mariadb"

// Runner is what the server needs from the container runtime.
type Runner interface {
	Run(ctx context.Context, s runtime.Spec) error
	Exec(ctx context.Context, id string, argv, env []string, uid, gid uint32, stdin []byte) (*runtime.ExecResult, error)
	Exists(ctx context.Context, id string) (bool, error)
	Running(ctx context.Context, id string) (bool, error)
	Stop(ctx context.Context, id string, grace time.Duration) error
	Remove(ctx context.Context, id string) error
}

// Server is a node's MariaDB.
type Server struct {
	cfg      Config
	dir      string
	port     int
	password string
	db       *sql.DB
	// copies holds the connections of checkpoints and forks (Export,
	// Import): a pool of their own, so that tenants' checkpoints waiting
	// on locks never take the connections the node's guards use.
	copies *sql.DB
}

// Addr is the server's TCP address on the node's loopback (the agent's
// and an operator's way in; not reachable from any site).
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// SocketDir is the host directory holding the server's Unix socket,
// mysqld.sock, the way sites reach it.
func (s *Server) SocketDir() string { return filepath.Join(s.dir, "data", "run") }

// MaxUserConnections bounds the connections one site's user may hold, so
// one site cannot take the server's connections from the others.
const MaxUserConnections = 40

// Config is a node's MariaDB.
type Config struct {
	// Image is the MariaDB image.
	Image string
	// Dir holds the server's data directory, its socket, the mount point
	// of the sites' database volumes and its temporary disk.
	Dir string
	// LogWriter is the binary that writes the server's log with a cap
	// (agent/logwriter): a tenant can make the server log (aborted
	// connections, full tables). Empty appends without a cap.
	LogWriter string
	// SystemMaxMB bounds InnoDB's system tablespace, which holds every
	// site's undo log (what a transaction changed, until it is purged):
	// past it, the transaction that needs more fails, and nothing fills
	// the node's disk. Default DefaultSystemMaxMB.
	SystemMaxMB int64
	// MemoryMB bounds the server's container's memory: however the sites
	// use the server, the kernel ends it (and the agent's Watch starts it
	// again) before the node runs short. Default DefaultMemoryMB.
	MemoryMB int64
	// SessionMemMB bounds the memory one connection may take in the
	// server (its sorts, joins, in-memory temporary tables, variables):
	// a site cannot raise it, and a statement that would need more fails.
	// Default DefaultSessionMemMB.
	SessionMemMB int64
	// UndoHighMB is how much of the shared undo log (in the system
	// tablespace) may be in use before the site transactions holding it
	// are ended (see ReapUndo). Default half of SystemMaxMB.
	UndoHighMB int64
	// TempMaxMB bounds InnoDB's temporary tablespace (temporary tables)
	// and is the size of the disk of the server's tmpdir (sort files,
	// on-disk internal temporary tables). Default DefaultTempMaxMB.
	TempMaxMB int64
}

// Defaults of the bounds of what every site shares on the node's disk,
// and of one connection's memory.
const (
	DefaultSystemMaxMB  = 2048
	DefaultTempMaxMB    = 2048
	DefaultSessionMemMB = 256
	DefaultMemoryMB     = 4096
)

// heapTableMB bounds an in-memory temporary table (a GROUP BY, a
// DISTINCT, a UNION): past it the table goes to the temporary disk, so a
// site's large query is slower rather than a share of the server's
// memory. A site cannot raise it.
const heapTableMB = 32

// MaxLogBytes bounds each of the server's two log files.
const MaxLogBytes = 8 << 20

// Start makes sure the server runs (New, then Run).
func Start(ctx context.Context, rt Runner, cfg Config) (*Server, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Run(ctx, rt); err != nil {
		return nil, err
	}
	return s, nil
}

// New lays out the server's directories (the data directory, the
// volumes' shared mount point, the temporary disk) without starting it:
// site volumes can be attached before the server starts, which it must
// find there (InnoDB's crash recovery opens the tables it has redo for).
func New(cfg Config) (*Server, error) {
	if cfg.SystemMaxMB <= 0 {
		cfg.SystemMaxMB = DefaultSystemMaxMB
	}
	if cfg.TempMaxMB <= 0 {
		cfg.TempMaxMB = DefaultTempMaxMB
	}
	if cfg.SessionMemMB <= 0 {
		cfg.SessionMemMB = DefaultSessionMemMB
	}
	if cfg.MemoryMB <= 0 {
		cfg.MemoryMB = DefaultMemoryMB
	}
	dir := cfg.Dir
	// The system tablespace never shrinks: a bound below what it holds
	// would keep the server from starting, so it is at least that.
	if st, err := os.Stat(filepath.Join(dir, "data", "db", "ibdata1")); err == nil {
		cfg.SystemMaxMB = max(cfg.SystemMaxMB, (st.Size()+1<<20-1)>>20)
	}
	if cfg.UndoHighMB <= 0 || cfg.UndoHighMB > cfg.SystemMaxMB {
		cfg.UndoHighMB = cfg.SystemMaxMB / 2
	}
	s := &Server{dir: dir, cfg: cfg}
	for _, d := range []string{dir, filepath.Join(dir, "data"), filepath.Join(dir, "data", "run")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	if err := os.Chown(filepath.Join(dir, "data"), uid, uid); err != nil {
		return nil, err
	}
	if err := os.Chown(filepath.Join(dir, "data", "run"), uid, uid); err != nil {
		return nil, err
	}
	// Sites (each its own uid) reach the socket in it.
	if err := os.Chmod(filepath.Join(dir, "data", "run"), 0o755); err != nil {
		return nil, err
	}
	if err := s.prepareVolumes(); err != nil {
		return nil, err
	}
	if err := s.prepareTemp(); err != nil {
		return nil, err
	}
	var err error
	if s.port, err = persistentPort(filepath.Join(dir, "port")); err != nil {
		return nil, err
	}
	if s.password, err = persistent(filepath.Join(dir, "admin-password"), func() string { return secret.New("") }); err != nil {
		return nil, err
	}
	return s, nil
}

// Run starts the server's container (or re-attaches to it: a running
// one is left alone unless its spec changed) and waits until an admin
// connection works.
func (s *Server) Run(ctx context.Context, rt Runner) error {
	dir, image := s.dir, s.cfg.Image
	// The init file runs on every start, so the admin account always
	// matches the password on disk.
	initSQL := fmt.Sprintf("CREATE USER IF NOT EXISTS 'sandboxd'@'127.0.0.1' IDENTIFIED BY '%[1]s';\n"+
		"ALTER USER 'sandboxd'@'127.0.0.1' IDENTIFIED BY '%[1]s';\n"+
		"GRANT ALL PRIVILEGES ON *.* TO 'sandboxd'@'127.0.0.1' WITH GRANT OPTION;\n", s.password)
	initPath := filepath.Join(dir, "data", "init.sql")
	if err := os.WriteFile(initPath, []byte(initSQL), 0o600); err != nil {
		return err
	}
	if err := os.Chown(initPath, uid, uid); err != nil {
		return err
	}
	mounts := []runtime.Mount{{Source: filepath.Join(dir, "data"), Target: "/data"}}
	if _, err := os.Stat(filepath.Join(dir, "data", "db", "mysql")); errors.Is(err, os.ErrNotExist) {
		if err := initialise(ctx, rt, image, dir, mounts); err != nil {
			return err
		}
	}
	if err := s.lockDataDir(); err != nil {
		return fmt.Errorf("mariadb: %w", err)
	}
	spec := s.spec()
	if err := s.replaceOutdated(ctx, rt, spec); err != nil {
		return err
	}
	if err := rt.Run(ctx, spec); err != nil {
		return fmt.Errorf("start mariadb: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, revFile), []byte(specRevision(spec)+"\n"), 0o600); err != nil {
		return err
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = adminUser, s.password, "tcp", s.Addr()
	cfg.Timeout = 2 * time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(8)
	if err := waitReady(ctx, db, dir); err != nil {
		db.Close()
		return err
	}
	copies, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		db.Close()
		return err
	}
	copies.SetMaxOpenConns(maxCopies)
	if s.copies != nil {
		s.copies.Close()
	}
	s.db, s.copies = db, copies
	return s.fixGrants(ctx)
}

// spec is the server's container.
func (s *Server) spec() runtime.Spec {
	mounts := []runtime.Mount{{Source: filepath.Join(s.dir, "data"), Target: "/data"},
		{Source: s.volumesDir(), Target: volumesTarget, Slave: true},
		{Source: s.tempDir(), Target: "/tmp"}}
	return runtime.Spec{ID: ContainerID, Image: s.cfg.Image, UID: uid, GID: uid, Mounts: mounts,
		LogPath: filepath.Join(s.dir, "mariadb.log"), LogWriter: s.cfg.LogWriter, LogMaxBytes: MaxLogBytes,
		MemoryBytes: s.cfg.MemoryMB << 20, Args: s.args(), NoSwap: true}
}

// waitReady waits until the server answers db, for a minute at most.
func waitReady(ctx context.Context, db *sql.DB, dir string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("mariadb did not accept connections: %w\n%s", err, lastLines(logTail(filepath.Join(dir, "mariadb.log")), 10))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// args is the server's command line. Besides the basics, it bounds one
// connection's memory and what the sites share on the node's disk: no
// binary log; a redo log of fixed size; the system tablespace (undo logs) and the temporary
// tablespace capped; sort files and on-disk temporary tables on a disk
// of their own. Every site's own tables live in its volume, on its own
// disk (see AttachVolume): so that no table can be put anywhere else,
// DATA DIRECTORY and INDEX DIRECTORY are ignored (no symbolic links)
// and every table is InnoDB, one file per table (MyISAM and Aria would
// write logs to the shared data directory or wait for a full disk, and
// MEMORY tables take the server's memory); a CREATE TABLE naming
// another engine gets InnoDB with a warning (the server's SQL mode has
// no NO_ENGINE_SUBSTITUTION).
func (s *Server) args() []string {
	return []string{"mariadbd", "--no-defaults", "--datadir=/data/db", "--port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1", "--socket=/data/run/mysqld.sock", "--pid-file=/data/run/mysqld.pid",
		"--init-file=/data/init.sql", "--skip-name-resolve", "--skip-log-bin", "--max-connections=1000",
		"--innodb-buffer-pool-size=128M", "--innodb-log-file-size=32M", "--innodb-flush-log-at-trx-commit=2",
		"--character-set-server=utf8mb4", "--collation-server=utf8mb4_unicode_ci", "--performance-schema=OFF",
		"--skip-symbolic-links", "--innodb-file-per-table=ON", "--enforce-storage-engine=InnoDB",
		"--sql-mode=STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER",
		"--innodb-undo-tablespaces=0",
		fmt.Sprintf("--innodb-data-file-path=ibdata1:12M:autoextend:max:%dM", s.cfg.SystemMaxMB),
		fmt.Sprintf("--innodb-temp-data-file-path=ibtmp1:12M:autoextend:max:%dM", s.cfg.TempMaxMB),
		"--tmpdir=/tmp", fmt.Sprintf("--tmp-disk-table-size=%d", s.cfg.TempMaxMB<<20),
		// What one connection may take of the server's memory, which a
		// site's SET SESSION cannot raise (--maximum-*).
		fmt.Sprintf("--max-session-mem-used=%d", s.cfg.SessionMemMB<<20),
		fmt.Sprintf("--maximum-max-session-mem-used=%d", s.cfg.SessionMemMB<<20),
		fmt.Sprintf("--tmp-table-size=%d", heapTableMB<<20), fmt.Sprintf("--maximum-tmp-table-size=%d", heapTableMB<<20),
		fmt.Sprintf("--maximum-tmp-memory-table-size=%d", heapTableMB<<20),
		fmt.Sprintf("--max-heap-table-size=%d", heapTableMB<<20), fmt.Sprintf("--maximum-max-heap-table-size=%d", heapTableMB<<20),
		// Buffers a session sizes itself: at most a few times the
		// defaults.
		"--maximum-sort-buffer-size=16M", "--maximum-join-buffer-size=16M", "--maximum-join-buffer-space-limit=64M",
		"--maximum-mrr-buffer-size=16M", "--maximum-read-buffer-size=8M", "--maximum-read-rnd-buffer-size=8M",
		"--maximum-group-concat-max-len=16M", "--maximum-max-recursive-iterations=1000000",
		// Full-text searches' caches, out of any session's count.
		"--innodb-ft-result-cache-limit=64M", "--innodb-ft-total-cache-size=64M", "--innodb-ft-cache-size=8M"}
}

// revFile keeps the revision of the spec the container was made with.
const revFile = "container-rev"

// specRevision is a digest of what the container is made with.
func specRevision(spec runtime.Spec) string {
	b, _ := json.Marshal(struct {
		Image  string
		Args   []string
		Mounts []runtime.Mount
		Log    int64
		Memory int64
	}{spec.Image, spec.Args, spec.Mounts, spec.LogMaxBytes, spec.MemoryBytes})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// replaceOutdated removes the server's container when it was made with
// another spec (an older agent's, without the volumes or the bounds):
// the running server stops cleanly and Run makes it again.
func (s *Server) replaceOutdated(ctx context.Context, rt Runner, spec runtime.Spec) error {
	b, err := os.ReadFile(filepath.Join(s.dir, revFile))
	if err == nil && strings.TrimSpace(string(b)) == specRevision(spec) {
		return nil
	}
	exists, err := rt.Exists(ctx, ContainerID)
	if err != nil || !exists {
		return err
	}
	// A clean shutdown: InnoDB writes what it holds and needs no recovery.
	if err := rt.Stop(ctx, ContainerID, 2*time.Minute); err != nil {
		return fmt.Errorf("stop the outdated mariadb: %w", err)
	}
	if err := rt.Remove(ctx, ContainerID); err != nil {
		return fmt.Errorf("remove the outdated mariadb: %w", err)
	}
	return nil
}

// logTail is the end of the server's log (64 KiB at most).
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 64<<10 {
		_, _ = f.Seek(st.Size()-64<<10, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, 64<<10))
	return string(b)
}

func initialise(ctx context.Context, rt Runner, image, dir string, mounts []runtime.Mount) error {
	id := ContainerID + "-init"
	spec := runtime.Spec{ID: id, Image: image, UID: uid, GID: uid, Mounts: mounts, LogPath: filepath.Join(dir, "init.log"),
		Args: []string{"sleep", "300"}}
	if err := rt.Run(ctx, spec); err != nil {
		return fmt.Errorf("mariadb init container: %w", err)
	}
	defer func() { _ = rt.Remove(context.WithoutCancel(ctx), id) }()
	res, err := rt.Exec(ctx, id, []string{"mariadb-install-db", "--no-defaults", "--datadir=/data/db",
		"--auth-root-authentication-method=socket", "--skip-test-db", "--skip-name-resolve"}, nil, uid, uid, nil)
	if err != nil {
		return fmt.Errorf("mariadb-install-db: %w", err)
	}
	if res.ExitCode != 0 {
		_ = os.RemoveAll(filepath.Join(dir, "data", "db"))
		return fmt.Errorf("mariadb-install-db exited %d: %s", res.ExitCode, lastLines(string(res.Stderr)+string(res.Stdout), 10))
	}
	return nil
}

// Close drops the admin connection; the server keeps running.
func (s *Server) Close() error {
	if s.db == nil {
		return nil
	}
	if s.copies != nil {
		s.copies.Close()
	}
	return s.db.Close()
}

var ident = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

var siteHosts = []string{"localhost", "127.0.0.1"}

// CreateSiteDatabase makes a database and a user that may use only it,
// with this password, the database placed in volume (see AttachVolume;
// "" keeps it in the server's data directory). Repeating it converges
// (the password is reset); a database an older agent made in the data
// directory stays there.
func (s *Server) CreateSiteDatabase(ctx context.Context, volume, name, user, password string) error {
	if !ident.MatchString(name) || !ident.MatchString(user) {
		return fmt.Errorf("mariadb: invalid database or user name %q/%q", name, user)
	}
	if strings.ContainsAny(password, `'\`) {
		return errors.New("mariadb: password contains a quote")
	}
	if volume != "" {
		if err := s.place(name, volume); err != nil && !errors.Is(err, errLegacy) {
			return fmt.Errorf("create site database %s: %w", name, err)
		}
	}
	qs := []string{"CREATE DATABASE IF NOT EXISTS `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"}
	// 'localhost' is the site through the socket; '127.0.0.1' an operator
	// on the node (the database API hands these credentials out).
	for _, host := range siteHosts {
		account := "'" + user + "'@'" + host + "'"
		limit := fmt.Sprintf(" WITH MAX_USER_CONNECTIONS %d", MaxUserConnections)
		qs = append(qs,
			"CREATE USER IF NOT EXISTS "+account+" IDENTIFIED BY '"+password+"'"+limit,
			"ALTER USER "+account+" IDENTIFIED BY '"+password+"'"+limit,
			// An older agent's grant, whose "_" is a wildcard.
			"REVOKE ALL PRIVILEGES ON "+quoteIdent(name)+".* FROM "+account)
		qs = append(qs, grantSite(grantName(name), account)...)
	}
	for _, q := range qs {
		if _, err := s.db.ExecContext(ctx, q); err != nil && !isNoSuchGrant(err) {
			return fmt.Errorf("create site database %s: %w", name, Classify(err))
		}
	}
	return nil
}

// grantSite is what gives a site's account everything on the databases
// pattern names but temporary tables. Those are InnoDB's (the server
// enforces InnoDB) in the temporary tablespace every site shares, capped
// at TempMaxMB: a statement filling one past the cap made InnoDB abort
// the whole server in its rollback ("[FATAL] InnoDB: Error (Out of disk
// space) in rollback"). WordPress makes none.
func grantSite(pattern, account string) []string {
	return []string{"GRANT ALL PRIVILEGES ON " + quoteIdent(pattern) + ".* TO " + account,
		"REVOKE CREATE TEMPORARY TABLES ON " + quoteIdent(pattern) + ".* FROM " + account}
}

// grantName is how a grant names database name. In a grant's database
// name "_" is a wildcard: `wp_a`.* would grant on `wp-a` and `wpXa` too,
// which the account could then CREATE, as plain directories of the
// server's data directory (on the node's disk, bounded by nothing). So
// it is escaped (ident allows no "%").
func grantName(name string) string { return strings.ReplaceAll(name, "_", `\_`) }

// grantedName undoes grantName.
func grantedName(pattern string) string { return strings.ReplaceAll(pattern, `\_`, "_") }

// fixGrants brings the site grants an older agent made to today's:
// one naming its database unescaped (see grantName) is made escaped,
// allowing what it allowed (everything, or what LimitWrites leaves), and
// temporary tables are taken away (see grantSite).
func (s *Server) fixGrants(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, "SELECT Db, User, Host, Insert_priv, Create_tmp_table_priv FROM mysql.db")
	if err != nil {
		return fmt.Errorf("fix grants: %w", err)
	}
	type grant struct{ db, user, host, insert, tmp string }
	var old []grant
	for rows.Next() {
		var g grant
		if err := rows.Scan(&g.db, &g.user, &g.host, &g.insert, &g.tmp); err != nil {
			rows.Close()
			return fmt.Errorf("fix grants: %w", err)
		}
		if !ident.MatchString(grantedName(g.db)) || !ident.MatchString(g.user) || !slices.Contains(siteHosts, g.host) {
			continue
		}
		if ident.MatchString(g.db) && strings.Contains(g.db, "_") || g.tmp == "Y" {
			old = append(old, g)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("fix grants: %w", err)
	}
	for _, g := range old {
		account := "'" + g.user + "'@'" + g.host + "'"
		pattern := grantName(grantedName(g.db))
		qs := []string{"REVOKE CREATE TEMPORARY TABLES ON " + quoteIdent(pattern) + ".* FROM " + account}
		if g.db != pattern {
			qs = []string{"GRANT " + limitedPrivileges + " ON " + quoteIdent(pattern) + ".* TO " + account}
			if g.insert == "Y" {
				qs = grantSite(pattern, account)
			}
			qs = append(qs, "REVOKE ALL PRIVILEGES ON "+quoteIdent(g.db)+".* FROM "+account)
		}
		for _, q := range qs {
			if _, err := s.db.ExecContext(ctx, q); err != nil && !isNoSuchGrant(err) {
				return fmt.Errorf("fix the grant of %s on %s: %w", account, g.db, err)
			}
		}
	}
	return nil
}

// DropSiteDatabase removes a site's database (wherever it lies) and
// user; missing ones are fine.
func (s *Server) DropSiteDatabase(ctx context.Context, name, user string) error {
	if !ident.MatchString(name) || !ident.MatchString(user) {
		return fmt.Errorf("mariadb: invalid database or user name %q/%q", name, user)
	}
	if err := s.dropDatabase(ctx, name); err != nil {
		return fmt.Errorf("drop site database %s: %w", name, err)
	}
	for _, host := range siteHosts {
		if _, err := s.db.ExecContext(ctx, "DROP USER IF EXISTS '"+user+"'@'"+host+"'"); err != nil {
			return fmt.Errorf("drop site database %s: %w", name, err)
		}
	}
	return nil
}

// Exists reports whether a database and a user of these names exist.
func (s *Server) Exists(ctx context.Context, name, user string) (dbExists, userExists bool, err error) {
	var n int
	if err = s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n); err != nil {
		return
	}
	dbExists = n > 0
	if err = s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM mysql.user WHERE User = ?", user).Scan(&n); err != nil {
		return
	}
	return dbExists, n > 0, nil
}

func persistent(path string, generate func() string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	v := generate()
	return v, os.WriteFile(path, []byte(v+"\n"), 0o600)
}

// persistentPort picks a free loopback port once and keeps it, so sites'
// DB_HOST stays valid across restarts. It is picked below the kernel's
// ephemeral range: a port from that range (what port 0 hands out) can be
// taken by any outgoing connection before the server binds it.
func persistentPort(path string) (int, error) {
	v, err := persistent(path, func() string { return strconv.Itoa(freeFixedPort()) })
	if err != nil {
		return 0, err
	}
	p, err := strconv.Atoi(v)
	if err != nil || p <= 0 {
		return 0, fmt.Errorf("bad port in %s", path)
	}
	return p, nil
}

// freeFixedPort is a loopback port free now, below the ephemeral range
// (from 10000), or, failing that, one the kernel hands out.
func freeFixedPort() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 64 {
		p := 10000 + rand.IntN(low-10000)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			l.Close()
			return p
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// maxCopies is how many checkpoints, restores and forks hold a database
// connection at once on a node; more wait for one.
const maxCopies = 3
