// Package screenshot takes pictures of sites' pages with the node's
// headless Chromium (Debian's), for people and AI agents who want to see
// what a change did.
//
// One browser per node stays up while shots come (it goes after a
// minute without one), as its own unprivileged uid with Chromium's
// sandbox on. Each shot gets a browser context of its own (no cookie,
// cache or storage of another shot) whose every request goes through a
// proxy of the shot's own that forwards the site's host, and that host
// alone, to the site's address: a page cannot reach another site, the
// node, or anything else, by name or by address (WebRTC sends no UDP
// around the proxy). A shot is bounded in time (a page that never
// finishes loading is taken as it is at the bound), in size and in how
// many run at once, and kept on the node for a short while, for its URL.
package screenshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// Bounds of a shot.
const (
	MinWidth, MaxWidth   = 320, 2560
	MinHeight, MaxHeight = 240, 2560
	DefaultWidth         = 1280
	DefaultHeight        = 800
	// MaxFullHeight is how much of a long page a full-page shot takes.
	MaxFullHeight = 8000
	// LoadWait is how long a shot waits for the page's load event.
	LoadWait = 10 * time.Second
	// MaxPNG bounds a shot's file.
	MaxPNG = 16 << 20
)

// Config sets a node's shooter up.
type Config struct {
	// Dir keeps the shots (root's).
	Dir string
	// UID (and GID) the browser runs as: never root, never a site's.
	UID int
	// Chromium is the browser's binary (default chromium).
	Chromium string
	// Concurrency is how many shots run at once (default 2); more wait.
	Concurrency int
	// TTL is how long a shot is kept (default 15 minutes).
	TTL time.Duration
	// Idle is how long the browser stays up without a shot (default 1
	// minute).
	Idle   time.Duration
	Logger *slog.Logger
}

// Request is one shot: the site's URL (as WordPress knows it) and
// backend address, what to take and how.
type Request struct {
	SiteURL  string
	Backend  string
	Path     string
	Width    int
	Height   int
	FullPage bool
	// LoginURL, for a signed-in shot, is a one-time login link that
	// redirects to Path.
	LoginURL string
}

// Shot is a taken picture.
type Shot struct {
	ID        string
	PNG       []byte
	Width     int
	Height    int
	Loaded    bool // the page's load event came within LoadWait
	ExpiresAt time.Time
}

// ErrBusy is a shot that found no free slot in time.
var ErrBusy = errors.New("screenshot: the node is taking as many screenshots as it may; try again")

// ErrNotFound is a shot the node does not keep (anymore).
var ErrNotFound = errors.New("screenshot: not found or expired")

// Shooter takes a node's shots.
type Shooter struct {
	cfg   Config
	log   *slog.Logger
	slots chan struct{}

	mu       sync.Mutex
	browser  context.Context // chromedp's browser context, nil when down
	stop     func()
	pgid     int
	profile  string
	inFlight int
	idle     *time.Timer
}

// New makes a shooter; the browser starts with the first shot.
func New(cfg Config) (*Shooter, error) {
	if cfg.UID <= 0 {
		return nil, errors.New("screenshot: the browser needs a uid of its own, not root's")
	}
	if cfg.Chromium == "" {
		cfg.Chromium = "chromium"
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 2
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 15 * time.Minute
	}
	if cfg.Idle <= 0 {
		cfg.Idle = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "shots"), 0o700); err != nil {
		return nil, fmt.Errorf("screenshot: %w", err)
	}
	return &Shooter{cfg: cfg, log: cfg.Logger.With("component", "screenshot"), slots: make(chan struct{}, cfg.Concurrency)}, nil
}

// Available reports whether the node has the browser.
func (s *Shooter) Available() error {
	if _, err := exec.LookPath(s.cfg.Chromium); err != nil {
		return fmt.Errorf("screenshot: no browser on this node (%s): %w", s.cfg.Chromium, err)
	}
	return nil
}

// Take takes one shot; it waits for a free slot until ctx ends.
func (s *Shooter) Take(ctx context.Context, r Request) (*Shot, error) {
	if err := s.Available(); err != nil {
		return nil, err
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ErrBusy
	}
	defer func() { <-s.slots }()
	s.sweep()
	browser, release, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer release()
	shot, err := s.take(ctx, browser, r)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	shot.ID = hex.EncodeToString(b)
	shot.ExpiresAt = time.Now().Add(s.cfg.TTL)
	if err := os.WriteFile(s.path(shot.ID), shot.PNG, 0o600); err != nil {
		return nil, fmt.Errorf("screenshot: keep: %w", err)
	}
	return shot, nil
}

var idRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

func (s *Shooter) path(id string) string { return filepath.Join(s.cfg.Dir, "shots", id+".png") }

// Get reads a kept shot.
func (s *Shooter) Get(id string) ([]byte, error) {
	if !idRE.MatchString(id) {
		return nil, ErrNotFound
	}
	fi, err := os.Stat(s.path(id))
	if err != nil || time.Since(fi.ModTime()) > s.cfg.TTL {
		return nil, ErrNotFound
	}
	return os.ReadFile(s.path(id))
}

// sweep removes the shots past their time.
func (s *Shooter) sweep() {
	old, _ := filepath.Glob(filepath.Join(s.cfg.Dir, "shots", "*.png"))
	for _, f := range old {
		if fi, err := os.Stat(f); err == nil && time.Since(fi.ModTime()) > s.cfg.TTL {
			os.Remove(f)
		}
	}
}

// acquire starts the browser if it is down and holds it up until
// release.
func (s *Shooter) acquire() (context.Context, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle != nil {
		s.idle.Stop()
	}
	if s.browser == nil || s.browser.Err() != nil {
		if s.stop != nil {
			s.stop() // a browser that died: what it left goes first
			s.browser, s.stop, s.pgid = nil, nil, 0
		}
		if err := s.start(); err != nil {
			return nil, nil, err
		}
	}
	s.inFlight++
	browser := s.browser
	return browser, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.inFlight--
		if s.inFlight == 0 {
			s.idle = time.AfterFunc(s.cfg.Idle, s.Close)
		}
	}, nil
}

// start launches the browser (under s.mu).
func (s *Shooter) start() error {
	// The profile is the browser's uid's alone, where every directory
	// above lets it through (the system's temporary directory).
	profile, err := os.MkdirTemp("", "sbx-shot-")
	if err != nil {
		return err
	}
	if err := os.Chown(profile, s.cfg.UID, s.cfg.UID); err != nil {
		os.RemoveAll(profile)
		return err
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(s.cfg.Chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// The shots' own proxies present a certificate of their own for
		// an HTTPS site's host (and for nothing else).
		chromedp.Flag("ignore-certificate-errors", true),
		// No UDP around the proxy (WebRTC).
		chromedp.Flag("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.Flag("webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		// The default context reaches nothing: each shot's context sets
		// its own proxy, and loopback goes through it too.
		chromedp.ProxyServer("http://127.0.0.1:9"),
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
		chromedp.UserDataDir(profile),
		chromedp.Env("HOME="+profile, "XDG_CONFIG_HOME="+profile, "XDG_CACHE_HOME="+profile),
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(s.cfg.UID), Gid: uint32(s.cfg.UID)},
				Setpgid: true, Pdeathsig: syscall.SIGKILL}
			cmd.Dir = profile
		}),
	}
	alloc, stopAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	browser, stopBrowser := chromedp.NewContext(alloc)
	// The first call starts the browser, which lives as long as browser.
	if err := chromedp.Do(browser); err != nil {
		stopBrowser()
		stopAlloc()
		os.RemoveAll(profile)
		return fmt.Errorf("screenshot: start the browser: %w", err)
	}
	pgid := 0
	if p := chromedp.FromContext(browser).Browser.Process(); p != nil {
		pgid = p.Pid
	}
	s.browser, s.pgid = browser, pgid
	s.stop = func() {
		stopBrowser()
		stopAlloc()
		if pgid > 0 {
			// Whatever the browser left (its zygotes and renderers).
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		os.RemoveAll(profile)
	}
	s.profile = profile
	s.log.Info("browser started", "pid", pgid)
	return nil
}

// Close stops the browser once no shot is under way; the next shot
// starts it again.
func (s *Shooter) Close() { s.close(false) }

// Stop stops the browser now, shots under way or not (they fail): the
// agent is going.
func (s *Shooter) Stop() { s.close(true) }

func (s *Shooter) close(now bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle != nil {
		s.idle.Stop()
	}
	if (s.inFlight > 0 && !now) || s.stop == nil {
		return
	}
	s.stop()
	s.browser, s.stop, s.pgid = nil, nil, 0
	s.log.Info("browser stopped")
}

// take takes one shot in a browser context of its own, through a proxy
// of its own.
func (s *Shooter) take(ctx context.Context, browser context.Context, r Request) (*Shot, error) {
	start, err := ShotURL(r)
	if err != nil {
		return nil, err
	}
	px, err := newProxy(r.SiteURL, r.Backend)
	if err != nil {
		return nil, err
	}
	defer px.Close()
	tab, closeTab := chromedp.NewContext(browser, chromedp.WithNewBrowserContext(func(p *target.CreateBrowserContextParams) {
		p.ProxyServer = "http://" + px.Addr()
		p.ProxyBypassList = "<-loopback>"
	}))
	defer closeTab()
	stopOnCancel := context.AfterFunc(ctx, closeTab)
	defer stopOnCancel()
	// The tab's first call opens it (in its own browser context), and it
	// lives as long as tab.
	if err := chromedp.Do(tab); err != nil {
		return nil, fmt.Errorf("screenshot: open a tab: %w", err)
	}
	loaded := make(chan struct{})
	var once sync.Once
	if err := chromedp.Listen(tab, func(ev any) {
		if _, ok := ev.(*page.EventLoadEventFired); ok {
			once.Do(func() { close(loaded) })
		}
	}); err != nil {
		return nil, err
	}
	step, cancel := context.WithTimeout(tab, 10*time.Second)
	_, err = chromedp.Call(step, emulation.SetDeviceMetricsOverride,
		emulation.SetDeviceMetricsOverrideParams{Width: int64(r.Width), Height: int64(r.Height), DeviceScaleFactor: 1})
	if err == nil {
		var nav page.NavigateResult
		nav, err = chromedp.Call(step, page.Navigate, page.NavigateParams{URL: start})
		if err == nil && nav.ErrorText != "" {
			err = errors.New(nav.ErrorText)
		}
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("screenshot: open %s: %w", r.Path, err)
	}
	shot := &Shot{Width: r.Width, Height: r.Height}
	select {
	case <-loaded:
		shot.Loaded = true
	case <-time.After(LoadWait):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	step, cancel = context.WithTimeout(tab, 15*time.Second)
	defer cancel()
	params := page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng}
	if r.FullPage {
		m, err := chromedp.Call(step, page.GetLayoutMetrics, cdp.Empty{})
		if err != nil {
			return nil, fmt.Errorf("screenshot: page size: %w", err)
		}
		if m.CSSContentSize != nil {
			shot.Height = max(min(int(m.CSSContentSize.Height), MaxFullHeight), r.Height)
		}
		yes := true
		params.CaptureBeyondViewport = &yes
		params.Clip = &page.Viewport{X: 0, Y: 0, Width: float64(r.Width), Height: float64(shot.Height), Scale: 1}
	}
	res, err := chromedp.Call(step, page.CaptureScreenshot, params)
	if err != nil {
		return nil, fmt.Errorf("screenshot: capture: %w", err)
	}
	shot.PNG = res.Data
	if len(shot.PNG) > MaxPNG {
		return nil, fmt.Errorf("screenshot: the picture is over %d bytes", MaxPNG)
	}
	return shot, nil
}
