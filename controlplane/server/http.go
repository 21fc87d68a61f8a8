package server

import (
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/internal/deadline"
)

// httpDefaults fills in the listener bounds left zero (see Config).
func (c *Config) httpDefaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.ReadHeaderTimeout, 10*time.Second)
	set(&c.IdleTimeout, 2*time.Minute)
	set(&c.BodyTimeout, time.Minute)
	set(&c.UploadTimeout, 30*time.Minute)
	set(&c.StallTimeout, time.Minute)
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 64 << 10
	}
}

// deadlines bounds how long a client may stall an API request: its body
// must arrive within BodyTimeout (UploadTimeout on routes that take
// files) without stalling, and it must take its response. Only documented
// routes are bounded, on whichever server receives them (a follower
// forwarding to the leader included); Connect streams and other raw
// handlers are left alone.
func (s *Server) deadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, ok := s.router.Lookup(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		total := s.cfg.BodyTimeout
		if route.MaxBody > rest.DefaultMaxBody {
			total = s.cfg.UploadTimeout
		}
		deadline.Body(w, r, s.cfg.StallTimeout, total)
		next.ServeHTTP(deadline.Writer(w, r, s.cfg.StallTimeout), r)
	})
}
