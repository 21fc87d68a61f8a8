// Package mariadb runs the one MariaDB server a node's sites share, as a
// container on the host network bound to 127.0.0.1 (which no site can
// reach: sites connect through its Unix socket, mounted into each), and
// manages each site's database and user in it.
package mariadb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sandboxd/sandboxd/agent/runtime"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// uid is the unprivileged user mariadbd runs as inside its container; the
// data directory on the host belongs to it.
const uid = 999

// ContainerID is the MariaDB container's id in the agent's namespace.
const ContainerID = "mariadb"

// Runner is what the server needs from the container runtime.
type Runner interface {
	Run(ctx context.Context, s runtime.Spec) error
	Exec(ctx context.Context, id string, argv, env []string, uid, gid uint32, stdin []byte) (*runtime.ExecResult, error)
}

// Server is a node's MariaDB.
type Server struct {
	dir      string
	port     int
	password string
	db       *sql.DB
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

// Start makes sure the server runs: it initialises the data directory on
// first use, starts (or re-attaches to) the container and waits until an
// admin connection works.
func Start(ctx context.Context, rt Runner, image, dir string) (*Server, error) {
	s := &Server{dir: dir}
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
	var err error
	if s.port, err = persistentPort(filepath.Join(dir, "port")); err != nil {
		return nil, err
	}
	if s.password, err = persistent(filepath.Join(dir, "admin-password"), func() string { return secret.New("") }); err != nil {
		return nil, err
	}
	// The init file runs on every start, so the admin account always
	// matches the password on disk.
	initSQL := fmt.Sprintf("CREATE USER IF NOT EXISTS 'sandboxd'@'127.0.0.1' IDENTIFIED BY '%[1]s';\n"+
		"ALTER USER 'sandboxd'@'127.0.0.1' IDENTIFIED BY '%[1]s';\n"+
		"GRANT ALL PRIVILEGES ON *.* TO 'sandboxd'@'127.0.0.1' WITH GRANT OPTION;\n", s.password)
	initPath := filepath.Join(dir, "data", "init.sql")
	if err := os.WriteFile(initPath, []byte(initSQL), 0o600); err != nil {
		return nil, err
	}
	if err := os.Chown(initPath, uid, uid); err != nil {
		return nil, err
	}
	mounts := []runtime.Mount{{Source: filepath.Join(dir, "data"), Target: "/data"}}
	if _, err := os.Stat(filepath.Join(dir, "data", "db", "mysql")); errors.Is(err, os.ErrNotExist) {
		if err := initialise(ctx, rt, image, dir, mounts); err != nil {
			return nil, err
		}
	}
	spec := runtime.Spec{ID: ContainerID, Image: image, UID: uid, GID: uid, Mounts: mounts,
		LogPath: filepath.Join(dir, "mariadb.log"),
		Args: []string{"mariadbd", "--no-defaults", "--datadir=/data/db", "--port=" + strconv.Itoa(s.port),
			"--bind-address=127.0.0.1", "--socket=/data/run/mysqld.sock", "--pid-file=/data/run/mysqld.pid",
			"--init-file=/data/init.sql", "--skip-name-resolve", "--skip-log-bin", "--max-connections=1000",
			"--innodb-buffer-pool-size=128M", "--innodb-log-file-size=32M", "--innodb-flush-log-at-trx-commit=2",
			"--character-set-server=utf8mb4", "--collation-server=utf8mb4_unicode_ci", "--performance-schema=OFF"}}
	if err := rt.Run(ctx, spec); err != nil {
		return nil, fmt.Errorf("start mariadb: %w", err)
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = "sandboxd", s.password, "tcp", s.Addr()
	cfg.Timeout = 2 * time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(8)
	deadline := time.Now().Add(60 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = db.PingContext(pctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			db.Close()
			log, _ := os.ReadFile(filepath.Join(dir, "data", "error.log"))
			return nil, fmt.Errorf("mariadb did not accept connections: %w\n%s", err, lastLines(string(log), 10))
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.db = db
	return s, nil
}

func initialise(ctx context.Context, rt Runner, image, dir string, mounts []runtime.Mount) error {
	id := ContainerID + "-init"
	spec := runtime.Spec{ID: id, Image: image, UID: uid, GID: uid, Mounts: mounts, LogPath: filepath.Join(dir, "init.log"),
		Args: []string{"sleep", "300"}}
	if err := rt.Run(ctx, spec); err != nil {
		return fmt.Errorf("mariadb init container: %w", err)
	}
	defer func() {
		if r, ok := rt.(interface {
			Remove(context.Context, string) error
		}); ok {
			_ = r.Remove(context.WithoutCancel(ctx), id)
		}
	}()
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
func (s *Server) Close() error { return s.db.Close() }

var ident = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

var siteHosts = []string{"localhost", "127.0.0.1"}

// CreateSiteDatabase makes a database and a user that may use only it,
// with this password. Repeating it converges (the password is reset).
func (s *Server) CreateSiteDatabase(ctx context.Context, name, user, password string) error {
	if !ident.MatchString(name) || !ident.MatchString(user) {
		return fmt.Errorf("mariadb: invalid database or user name %q/%q", name, user)
	}
	if strings.ContainsAny(password, `'\`) {
		return errors.New("mariadb: password contains a quote")
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
			"GRANT ALL PRIVILEGES ON `"+name+"`.* TO "+account)
	}
	for _, q := range qs {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create site database %s: %w", name, err)
		}
	}
	return nil
}

// DropSiteDatabase removes a site's database and user; missing ones are fine.
func (s *Server) DropSiteDatabase(ctx context.Context, name, user string) error {
	if !ident.MatchString(name) || !ident.MatchString(user) {
		return fmt.Errorf("mariadb: invalid database or user name %q/%q", name, user)
	}
	qs := []string{"DROP DATABASE IF EXISTS `" + name + "`"}
	for _, host := range siteHosts {
		qs = append(qs, "DROP USER IF EXISTS '"+user+"'@'"+host+"'")
	}
	for _, q := range qs {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
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
// DB_HOST stays valid across restarts.
func persistentPort(path string) (int, error) {
	v, err := persistent(path, func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return ""
		}
		defer l.Close()
		return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	})
	if err != nil {
		return 0, err
	}
	p, err := strconv.Atoi(v)
	if err != nil || p <= 0 {
		return 0, fmt.Errorf("bad port in %s", path)
	}
	return p, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
