// Package dbguard holds each site's database to its plan's disk.
//
// A site's tables live on the site's own disk (agent/mariadb volumes),
// so the node's disk never holds more of them than that disk's size.
// But the disk must never be what stops InnoDB: a statement that fails
// for want of room is rolled back, the rollback may need room too, and
// when it finds none InnoDB aborts the whole server ("[FATAL] InnoDB:
// Error (Out of disk space) in rollback", measured with MariaDB 10.11 and
// a site inserting large values), taking every site's database down.
// So a site's disk is its plan's size plus a reserve only MariaDB's uid
// may use (ext4 reserved blocks: the site's own files find the disk full
// at the plan's size), and the guard takes the site's database writes
// away (agent/mariadb LimitWrites: it may still read, delete and drop)
// as soon as the disk holds more than the plan allows, files and
// database together: at once when the kernel says a file of the
// database changed (inotify on the volume), and on a sweep. It gives
// them back once the disk is under the plan again. The reserve absorbs
// what a statement writes between the change and its end, and any
// rollback.
package dbguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/agent/sitedisk"
)

// Limiter takes a site's database writes away and gives them back
// (agent/mariadb's LimitWrites).
type Limiter interface {
	LimitWrites(ctx context.Context, user string, limited bool) error
}

// Site is one site's database on its own disk.
type Site struct {
	// User is the site's database user, whose databases are the site's;
	// it names the site to the guard.
	User string
	// Disk is where the site's disk is mounted.
	Disk string
	// Volume is the site's database volume on that disk: watched, with
	// every database directory in it.
	Volume string
	// LimitBytes is what the site's plan allows on its disk, its files
	// and its database together.
	LimitBytes int64
}

// Config wires a Guard.
type Config struct {
	Limiter Limiter
	// Sweep is how often every site is checked whatever the kernel said
	// (and a limited one given its writes back once under); default 2s.
	Sweep  time.Duration
	Logger *slog.Logger
}

// Guard watches the sites' databases; see the package comment.
type Guard struct {
	cfg Config
	log *slog.Logger
	// fd is the inotify instance for adding and removing watches; inote
	// the same, read through the runtime's poller (never call its Fd:
	// that would make its reads blocking, and Close unable to end them).
	fd    int
	inote *os.File
	mu    sync.Mutex
	sites map[string]*tracked // by user
	wds   map[int32]watch
	// pending holds the sites the kernel reported since the last check;
	// kick wakes the checker.
	pending map[string]bool
	kick    chan struct{}
}

// watch is what an inotify watch descriptor stands for.
type watch struct {
	user   string
	volume bool // the volume itself (its new directories are watched too)
}

// state is what the guard last did to a site's writes.
type state int

const (
	unknown state = iota // not checked since tracked (an agent restart)
	open
	limited
)

type tracked struct {
	Site
	mu    sync.Mutex // one check at a time
	state state
}

// New starts watching nothing yet; Run does the work.
func New(cfg Config) (*Guard, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("dbguard: a limiter is required")
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("dbguard: inotify: %w", err)
	}
	return &Guard{cfg: cfg, log: cfg.Logger.With("component", "dbguard"), fd: fd, inote: os.NewFile(uintptr(fd), "inotify"),
		sites: map[string]*tracked{}, wds: map[int32]watch{}, pending: map[string]bool{}, kick: make(chan struct{}, 1)}, nil
}

// Run reads the kernel's reports and checks the sites they name, and
// every site each Sweep, until ctx ends; it then closes the guard. Its
// caller owns the goroutine it runs in.
func (g *Guard) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.read()
	}()
	t := time.NewTicker(g.cfg.Sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.inote.Close()
			<-done
			return
		case <-g.kick:
			g.mu.Lock()
			users := make([]string, 0, len(g.pending))
			for u := range g.pending {
				users = append(users, u)
			}
			clear(g.pending)
			g.mu.Unlock()
			for _, u := range users {
				g.check(ctx, u)
			}
		case <-t.C:
			for _, u := range g.users() {
				g.check(ctx, u)
			}
		}
	}
}

func (g *Guard) users() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.sites))
	for u := range g.sites {
		out = append(out, u)
	}
	return out
}

// Track guards a site (again: its limit may have changed) and checks it
// at once, so a database just made or granted anew is limited if the
// disk is over.
func (g *Guard) Track(ctx context.Context, s Site) error {
	g.mu.Lock()
	t, ok := g.sites[s.User]
	if !ok {
		t = &tracked{}
		g.sites[s.User] = t
	}
	t.mu.Lock()
	t.Site = s
	t.state = unknown // its grants may just have been made anew
	t.mu.Unlock()
	err := g.watchLocked(s.Volume, watch{user: s.User, volume: true})
	if err == nil {
		ents, _ := os.ReadDir(s.Volume)
		for _, e := range ents {
			if e.IsDir() {
				err = errors.Join(err, g.watchLocked(filepath.Join(s.Volume, e.Name()), watch{user: s.User}))
			}
		}
	}
	g.mu.Unlock()
	if err != nil {
		return err
	}
	_, err = g.check(ctx, s.User)
	return err
}

// Untrack stops guarding a site (its watches go with its directories).
func (g *Guard) Untrack(user string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.sites, user)
	delete(g.pending, user)
	for wd, w := range g.wds {
		if w.user == user {
			_, _ = unix.InotifyRmWatch(g.fd, uint32(wd))
			delete(g.wds, wd)
		}
	}
}

// Limited reports whether a site's database writes are taken away (its
// disk is over its plan).
func (g *Guard) Limited(user string) bool {
	g.mu.Lock()
	t := g.sites[user]
	g.mu.Unlock()
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state == limited
}

// watchMask is what a watch reports: a file of the database written or
// grown (fallocate counts), made, moved in or removed; for the volume, a
// database directory made.
const watchMask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_DELETE |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

func (g *Guard) watchLocked(dir string, w watch) error {
	wd, err := unix.InotifyAddWatch(g.fd, dir, watchMask)
	if err != nil {
		return fmt.Errorf("dbguard: watch %s: %w", dir, err)
	}
	g.wds[int32(wd)] = w
	return nil
}

// read turns the kernel's reports into pending checks until the inotify
// file is closed.
func (g *Guard) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := g.inote.Read(buf)
		if err != nil {
			return
		}
		g.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				for i, c := range raw {
					if c == 0 {
						raw = raw[:i]
						break
					}
				}
				name = string(raw)
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				// Reports were lost: every site is checked now.
				for u := range g.sites {
					g.pending[u] = true
				}
				continue
			}
			w, ok := g.wds[ev.Wd]
			if !ok {
				continue
			}
			if ev.Mask&unix.IN_IGNORED != 0 {
				delete(g.wds, ev.Wd)
				continue
			}
			if t := g.sites[w.user]; t != nil {
				if w.volume && ev.Mask&unix.IN_ISDIR != 0 && ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && name != "" {
					// A database made in the volume: its files are watched too.
					_ = g.watchLocked(filepath.Join(t.Volume, name), watch{user: w.user})
				}
				g.pending[w.user] = true
			}
		}
		g.mu.Unlock()
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
}

// Check checks a site now, as a report from the kernel would, and
// reports whether its writes are taken away.
func (g *Guard) Check(ctx context.Context, user string) (bool, error) { return g.check(ctx, user) }

func (g *Guard) check(ctx context.Context, user string) (bool, error) {
	g.mu.Lock()
	t := g.sites[user]
	g.mu.Unlock()
	if t == nil {
		return false, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	u, err := sitedisk.UsageOf(t.Disk)
	if err != nil {
		return t.state == limited, err
	}
	over := u.Used > t.LimitBytes
	// Back under by a margin, so a site at its limit is not flipped on
	// every write.
	under := u.Used <= t.LimitBytes-max(1<<20, t.LimitBytes/100)
	switch {
	case over && t.state != limited:
		// Limited before the connections end, so that what a caller
		// makes of its killed statement (Limited) is already so.
		prev := t.state
		t.state = limited
		if err := g.cfg.Limiter.LimitWrites(ctx, user, true); err != nil {
			t.state = prev
			g.log.Error("the site's disk is over its plan and its database writes could not be taken away", "user", user, "err", err)
			return false, err
		}
		g.log.Warn("the site's disk is over its plan: its database may only read and make room",
			"user", user, "used_mb", u.Used>>20, "limit_mb", t.LimitBytes>>20)
	case !over && (t.state == limited && under || t.state == unknown):
		if err := g.cfg.Limiter.LimitWrites(ctx, user, false); err != nil {
			return t.state == limited, err
		}
		if t.state == limited {
			g.log.Info("the site's disk is under its plan again: its database writes are back", "user", user, "used_mb", u.Used>>20)
		}
		t.state = open
	}
	return t.state == limited, nil
}
