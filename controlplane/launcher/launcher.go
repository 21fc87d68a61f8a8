// Package launcher serves a template's public launch link to visitors:
// the branded page, its form, the progress page while the demo is made,
// and the hand-over to the demo signed in. Everything a template's owner
// wrote is shown as text under a strict Content-Security-Policy: pages
// run only this package's own script, never inline code, and tenant
// values reach CSS only as checked colours and URLs.
package launcher

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/launch"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/hostcookie"
	"github.com/sandboxd/sandboxd/internal/ratelimit"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// Launches is what the pages need from the launch service.
type Launches interface {
	Link(token string) (*state.Template, error)
	Live(t *state.Template, cookie string) (*state.Demo, error)
	Launch(ctx context.Context, token string, v launch.Visitor) (*state.Demo, error)
	Demo(token, demoID, cookie string) (*state.Template, *state.Demo, *state.Site, *state.Job, error)
	Enter(ctx context.Context, t *state.Template, site *state.Site) (string, error)
}

// Limits bound launches (the form's POST) per client address and per
// template; a zero rule limits nothing.
type Limits struct {
	PerIP       ratelimit.Rule
	PerTemplate ratelimit.Rule
}

// DefaultLimits let a person retry freely and stop a script from
// draining an owner's site quota: 10 launches a minute per address, 120
// a minute (bursts of 60) per template.
func DefaultLimits() Limits {
	return Limits{PerIP: ratelimit.PerMinute(10), PerTemplate: ratelimit.Rule{Rate: 2, Burst: 60}}
}

// Config wires the launcher.
type Config struct {
	Launches Launches
	Limits   Limits
	// SiteOrigins is the CSP source of the sites' origins
	// (http://*.localhost:8081): the form's submission ends there.
	SiteOrigins string
	// Cookies names, signs and reads the visitor cookie: Secure (and
	// __Host- prefixed) when the public API URL is https, TLS perhaps
	// ending at a proxy in front of the servers; its Key is the same on
	// every server, so any of them knows a visitor another one met.
	Cookies hostcookie.Jar
	// PoweredBy is the product name in the footer.
	PoweredBy string
	Logger    *slog.Logger
}

// Launcher serves the public launch pages.
type Launcher struct {
	cfg         Config
	perIP       *ratelimit.Limiter
	perTemplate *ratelimit.Limiter
	csp         string
}

// VisitorCookie names the cookie that tells the launching browser apart
// (over https it is __Host-sandboxd_visitor). It is the key to the
// visitor's demo, so it is HttpOnly, signed (a value this service did
// not mint is a new visitor), and over http kept to the launcher's
// paths.
const VisitorCookie = "sandboxd_visitor"

// visitorPurpose is what the visitor cookie's MAC is for.
const visitorPurpose = "launch visitor v1"

// visitorLife is how long a browser stays the same visitor.
const visitorLife = 30 * 24 * time.Hour

//go:embed assets
var assets embed.FS

// New returns the launcher.
func New(cfg Config) *Launcher {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PoweredBy == "" {
		cfg.PoweredBy = "sandboxd"
	}
	csp := "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' https:; connect-src 'self'; " +
		"form-action 'self'"
	if cfg.SiteOrigins != "" {
		csp += " " + cfg.SiteOrigins
	}
	csp += "; base-uri 'none'; frame-ancestors 'none'"
	return &Launcher{cfg: cfg, csp: csp,
		perIP:       ratelimit.New(cfg.Limits.PerIP, 0, nil),
		perTemplate: ratelimit.New(cfg.Limits.PerTemplate, 0, nil)}
}

// Routes are the launcher's paths, for the server's mux.
func (l *Launcher) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /launch/{token}":                     http.HandlerFunc(l.page),
		"POST /launch/{token}":                    http.HandlerFunc(l.submit),
		"GET /launch/{token}/theme.css":           http.HandlerFunc(l.theme),
		"GET /launch/{token}/demos/{demo}":        http.HandlerFunc(l.demo),
		"GET /launch/{token}/demos/{demo}/status": http.HandlerFunc(l.status),
		"GET /launch-assets/{file}":               http.HandlerFunc(l.asset),
	}
}

// headers are what every launcher answer carries.
func (l *Launcher) headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", l.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// The launch token is in the page's URL: a logo host must not see it.
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// visitor returns the browser's visitor id from its signed cookie,
// minting a new one (and setting its cookie) when set is true and there
// is none. A cookie this service did not sign (planted by a site under
// a shared parent domain, or made up) is no visitor at all: it is never
// the key to anyone's demo, and the browser is given a new id.
func (l *Launcher) visitor(w http.ResponseWriter, r *http.Request, set bool) string {
	if v, ok := l.cfg.Cookies.Signed(r, VisitorCookie, visitorPurpose); ok && len(v) >= 20 && len(v) <= 100 {
		return v
	}
	if !set {
		return ""
	}
	v := secret.New("")
	l.cfg.Cookies.Set(w, VisitorCookie, l.cfg.Cookies.Sign(visitorPurpose, v), "/launch/", visitorLife)
	return v
}

// pageData is the launch page's view.
type pageData struct {
	Token          string
	Title          string
	Branding       state.LaunchBranding
	ButtonLabel    string
	Email          bool
	EmailValue     string
	Consent        bool
	ConsentLabel   string
	ConsentChecked bool
	Returning      bool
	Until          string
	Error          string
	PoweredBy      string
}

func (l *Launcher) pageData(t *state.Template, live *state.Demo) pageData {
	b := t.Launch.Branding
	p := pageData{Token: t.Launch.Token, Branding: b, ButtonLabel: b.ButtonLabel, Email: t.Launch.EntryMode == "email",
		Consent: t.Launch.EntryMode == "email" && t.Launch.ConsentEnabled, ConsentLabel: t.Launch.ConsentLabel,
		ConsentChecked: t.Launch.ConsentDefaultChecked, PoweredBy: l.cfg.PoweredBy}
	p.Title = b.Headline
	if b.BrandName != "" {
		p.Title = b.BrandName + " · " + b.Headline
	}
	if p.Title == "" {
		p.Title = t.Name
	}
	if p.ButtonLabel == "" {
		p.ButtonLabel = "Launch demo"
	}
	if p.Branding.Headline == "" {
		p.Branding.Headline = t.Name
	}
	if live != nil {
		p.Returning, p.ButtonLabel = true, "Return to your demo"
		if live.ExpiresAt != nil {
			p.Until = live.ExpiresAt.UTC().Format("15:04 UTC")
		}
	}
	return p
}

func (l *Launcher) page(w http.ResponseWriter, r *http.Request) {
	l.headers(w)
	t, err := l.cfg.Launches.Link(r.PathValue("token"))
	if err != nil {
		l.fail(w, r, err)
		return
	}
	live, err := l.cfg.Launches.Live(t, l.visitor(w, r, true))
	if err != nil {
		l.fail(w, r, err)
		return
	}
	l.render(w, http.StatusOK, pageTmpl, l.pageData(t, live))
}

// maxForm bounds the form's body.
const maxForm = 8 << 10

func (l *Launcher) submit(w http.ResponseWriter, r *http.Request) {
	l.headers(w)
	token := r.PathValue("token")
	t, err := l.cfg.Launches.Link(token)
	if err != nil {
		l.fail(w, r, err)
		return
	}
	// A form posted from another site (a demo site is same-site with the
	// launcher when they share a domain) launches nothing: browsers say
	// where a request comes from.
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		l.message(w, http.StatusForbidden, "Start from the launch page", "Open the launch link itself to start a demo.", token)
		return
	}
	cookie := l.visitor(w, r, false)
	if cookie == "" {
		// A browser that did not load the page (or refuses cookies, or a
		// cross-site form: the cookie is SameSite=Lax) starts over there.
		http.Redirect(w, r, "/launch/"+token, http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		l.message(w, http.StatusBadRequest, "That did not work", "The form could not be read. Go back and try again.", token)
		return
	}
	ip := rest.ClientIP(r.Context())
	if !ip.IsValid() {
		ip = rest.PeerIP(r)
	}
	if ok, wait := l.perIP.Allow(ipKey(ip)); !ok {
		l.slowDown(w, wait, token)
		return
	}
	if ok, wait := l.perTemplate.Allow(t.ID); !ok {
		l.slowDown(w, wait, token)
		return
	}
	d, err := l.cfg.Launches.Launch(r.Context(), token, launch.Visitor{Cookie: cookie, IP: ip,
		Email: r.PostForm.Get("email"), Consent: r.PostForm.Get("consent") != ""})
	var fe *launch.FormError
	var one *launch.OneDemoError
	switch {
	case err == nil:
	case errors.As(err, &fe):
		p := l.pageData(t, nil)
		p.Error, p.EmailValue = fe.Message, r.PostForm.Get("email")
		p.ConsentChecked = r.PostForm.Get("consent") != ""
		l.render(w, http.StatusBadRequest, pageTmpl, p)
		return
	case errors.As(err, &one):
		msg := "A demo launched from your network is still running. Each visitor gets one demo at a time"
		if one.Until != nil {
			msg += "; try again after " + one.Until.UTC().Format("15:04 UTC")
		}
		l.message(w, http.StatusTooManyRequests, "One demo at a time", msg+".", token)
		return
	default:
		l.fail(w, r, err)
		return
	}
	// A demo from the warm pool is ready at once: straight in.
	l.enterOrWait(w, r, token, d.ID, cookie)
}

// enterOrWait signs the visitor into their demo when it is ready, and
// shows the progress page while it is made.
func (l *Launcher) enterOrWait(w http.ResponseWriter, r *http.Request, token, demoID, cookie string) {
	t, d, site, job, err := l.cfg.Launches.Demo(token, demoID, cookie)
	if err != nil {
		l.fail(w, r, err)
		return
	}
	switch {
	case site == nil || site.Status == state.SiteDeleting:
		l.message(w, http.StatusGone, "This demo has ended", "Its time is up. You can launch a new one.", token)
	case site.Status == state.SiteFailed:
		l.message(w, http.StatusInternalServerError, "This demo could not start",
			"Something went wrong while it was being made. You can launch a new one.", token)
	case site.Status == state.SiteReady:
		url, err := l.cfg.Launches.Enter(r.Context(), t, site)
		if err != nil {
			l.fail(w, r, err)
			return
		}
		http.Redirect(w, r, url, http.StatusSeeOther)
	default:
		progress := 0
		if job != nil {
			progress = job.Progress
		}
		if r.Method == http.MethodPost {
			http.Redirect(w, r, "/launch/"+token+"/demos/"+d.ID, http.StatusSeeOther)
			return
		}
		l.render(w, http.StatusOK, progressTmpl, map[string]any{"Title": t.Launch.Branding.Headline, "Progress": progress,
			"Status": "/launch/" + token + "/demos/" + d.ID + "/status", "PoweredBy": l.cfg.PoweredBy,
			"HidePoweredBy": t.Launch.Branding.HidePoweredBy, "Token": token})
	}
}

func (l *Launcher) demo(w http.ResponseWriter, r *http.Request) {
	l.headers(w)
	l.enterOrWait(w, r, r.PathValue("token"), r.PathValue("demo"), l.visitor(w, r, false))
}

// Status is the progress page's poll answer.
type Status struct {
	State    string `json:"state" enum:"creating,ready,failed,gone"`
	Progress int    `json:"progress"`
}

func (l *Launcher) status(w http.ResponseWriter, r *http.Request) {
	l.headers(w)
	_, _, site, job, err := l.cfg.Launches.Demo(r.PathValue("token"), r.PathValue("demo"), l.visitor(w, r, false))
	if err != nil {
		if errors.Is(err, launch.ErrNotFound) {
			_ = rest.JSON(w, http.StatusNotFound, Status{State: "gone"})
			return
		}
		l.cfg.Logger.Error("launcher status", "err", err)
		_ = rest.JSON(w, http.StatusInternalServerError, Status{State: "creating"})
		return
	}
	s := Status{State: "creating"}
	if job != nil {
		s.Progress = job.Progress
	}
	switch {
	case site == nil || site.Status == state.SiteDeleting:
		s.State = "gone"
	case site.Status == state.SiteFailed:
		s.State = "failed"
	case site.Status == state.SiteReady:
		s.State, s.Progress = "ready", 100
	}
	_ = rest.JSON(w, http.StatusOK, s)
}

// theme is a template's colours and background as CSS custom
// properties: every value was checked when it was saved (hex colours,
// https URLs without control characters) and URLs are escaped again
// here, so nothing a tenant wrote can end the declaration.
func (l *Launcher) theme(w http.ResponseWriter, r *http.Request) {
	l.headers(w)
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	t, err := l.cfg.Launches.Link(r.PathValue("token"))
	if err != nil {
		http.Error(w, "/* not found */", http.StatusNotFound)
		return
	}
	b := t.Launch.Branding
	var css strings.Builder
	css.WriteString(":root {")
	if hexColour(b.AccentColor) {
		fmt.Fprintf(&css, " --accent: %s;", b.AccentColor)
	}
	if hexColour(b.BackgroundColor) {
		fmt.Fprintf(&css, " --bg: %s;", b.BackgroundColor)
	}
	css.WriteString(" }\n")
	if u := cssURL(b.BackgroundImageURL); u != "" {
		fmt.Fprintf(&css, "body.launcher { background-image: url(\"%s\"); }\n", u)
	}
	_, _ = w.Write([]byte(css.String()))
}

func hexColour(s string) bool {
	if len(s) != 4 && len(s) != 7 && len(s) != 9 || s[0] != '#' {
		return false
	}
	for _, c := range s[1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// cssURL is an https URL made safe inside url("…"): anything that could
// close the string or the function is percent-encoded.
func cssURL(raw string) string {
	if !strings.HasPrefix(raw, "https://") {
		return ""
	}
	var b strings.Builder
	for _, c := range []byte(raw) {
		switch {
		case c < 0x21 || c > 0x7e || strings.IndexByte("\"'()\\<>;{}", c) >= 0:
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func (l *Launcher) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	var ctype string
	switch name {
	case "launcher.css":
		ctype = "text/css; charset=utf-8"
	case "launcher.js":
		ctype = "text/javascript; charset=utf-8"
	default:
		http.NotFound(w, r)
		return
	}
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(b)
}

// ipKey is an address's rate-limit bucket: IPv4 itself, IPv6 its /64.
func ipKey(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return "unknown"
	case ip.Is6() && !ip.Is4In6():
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.Unmap().String()
}

func (l *Launcher) slowDown(w http.ResponseWriter, wait time.Duration, token string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(wait.Seconds()+0.999))))
	l.message(w, http.StatusTooManyRequests, "Too many launches", "Too many demos were launched from here just now. Wait a moment and try again.", token)
}

// fail answers an error: 404 for a link that does not exist (or is off,
// or a demo that is not this browser's), 503 when demos cannot start
// now, 500 otherwise (logged, never shown).
func (l *Launcher) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, launch.ErrNotFound):
		l.message(w, http.StatusNotFound, "Launch link not found", "This launch link does not exist or has been turned off.", "")
	case errors.Is(err, launch.ErrUnavailable):
		w.Header().Set("Retry-After", "60")
		l.message(w, http.StatusServiceUnavailable, "Demos are unavailable right now",
			"No new demo can start at the moment. Try again in a few minutes.", r.PathValue("token"))
	default:
		l.cfg.Logger.Error("launcher", "path", r.URL.Path, "err", err)
		l.message(w, http.StatusInternalServerError, "Something went wrong", "The demo could not be started. Try again in a moment.", r.PathValue("token"))
	}
}

// message renders a short page with a title, a sentence and, with a
// token, a link back to the launch page.
func (l *Launcher) message(w http.ResponseWriter, code int, title, text, token string) {
	l.render(w, code, messageTmpl, map[string]any{"Title": title, "Text": text, "Token": token})
}

func (l *Launcher) render(w http.ResponseWriter, code int, t *template.Template, data any) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		l.cfg.Logger.Error("launcher template", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}
