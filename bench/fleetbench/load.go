package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/apiclient"
)

// creator is one API client creating sites in a loop, each through
// POST /api/app/sites: auth, the sites service (placement over the
// registry's candidates), one Raft entry with the site and its create
// job, 202. It keeps to one server and moves to the next when that one
// fails (a transport error or a 5xx), as a client behind a health-checked
// load balancer would.
type creator struct {
	id    int
	token string
	urls  []string
	cur   int
	http  *http.Client
	n     int

	ok     []span // the 202s
	failed int
}

// span is one request's start and end (Unix ns).
type span struct{ start, end int64 }

// run creates sites until ctx ends.
func (c *creator) run(ctx context.Context) {
	for ctx.Err() == nil {
		cl := &apiclient.Client{Base: c.urls[c.cur], Token: c.token, HTTP: c.http}
		c.n++
		start := time.Now()
		r, err := cl.Do(ctx, "POST", "/api/app/sites", map[string]string{"name": fmt.Sprintf("fleet %d %d", c.id, c.n)})
		end := time.Now()
		if ctx.Err() != nil {
			return
		}
		if err == nil && r.Status == http.StatusAccepted {
			c.ok = append(c.ok, span{start.UnixNano(), end.UnixNano()})
			continue
		}
		c.failed++
		if err != nil || r.Status >= 500 {
			c.cur = (c.cur + 1) % len(c.urls)
		}
		if err == nil && r.Status < 500 {
			fmt.Printf("  unexpected answer %d: %.200s\n", r.Status, r.Raw)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// placements runs clients creators against urls (each starting at
// server first) until ctx ends and returns them.
func placements(ctx context.Context, tokens, urls []string, first int) []*creator {
	var cs []*creator
	var wg sync.WaitGroup
	for i, tok := range tokens {
		c := &creator{id: i, token: tok, urls: urls, cur: first, http: newHTTP()}
		cs = append(cs, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(ctx)
		}()
	}
	wg.Wait()
	for _, c := range cs {
		c.http.CloseIdleConnections()
	}
	return cs
}

// window is the 202s answered between from and to: per second, p50 and
// p99 latency.
type window struct {
	perSec   float64
	p50, p99 time.Duration
	n        int
	failed   int
}

func measure(cs []*creator, from, to time.Time) window {
	var lat []time.Duration
	w := window{}
	for _, c := range cs {
		w.failed += c.failed
		for _, s := range c.ok {
			if s.end >= from.UnixNano() && s.end < to.UnixNano() {
				lat = append(lat, time.Duration(s.end-s.start))
			}
		}
	}
	w.n = len(lat)
	w.perSec = float64(len(lat)) / to.Sub(from).Seconds()
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		w.p50, w.p99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return w
}

// firstAfter is when the first create sent at or after t was answered
// 202 (Unix ns), or an error when none was.
func firstAfter(cs []*creator, t time.Time) (int64, error) {
	var first int64
	for _, c := range cs {
		for _, s := range c.ok {
			if s.start >= t.UnixNano() && (first == 0 || s.end < first) {
				first = s.end
			}
		}
	}
	if first == 0 {
		return 0, errors.New("no create was answered after the kill")
	}
	return first, nil
}
