package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
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
	why    map[string]int // failures by status or error

	// pace, when set, hands out one token per create allowed.
	pace <-chan struct{}
	// answered counts the 202s of every creator, for watching progress.
	answered *atomic.Int64
}

// span is one request's start and end (Unix ns).
type span struct{ start, end int64 }

// run creates sites until ctx ends.
func (c *creator) run(ctx context.Context) {
	for ctx.Err() == nil {
		if c.pace != nil {
			select {
			case <-ctx.Done():
				return
			case <-c.pace:
			}
		}
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
			if c.answered != nil {
				c.answered.Add(1)
			}
			continue
		}
		c.failed++
		if c.why == nil {
			c.why = map[string]int{}
		}
		if err != nil {
			c.why["transport error"]++
		} else {
			c.why[fmt.Sprintf("%d %s", r.Status, r.Code())]++
		}
		if err != nil || r.Status >= 500 {
			c.cur = (c.cur + 1) % len(c.urls)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// failures sums the creators' failures by reason.
func failures(cs []*creator) map[string]int {
	out := map[string]int{}
	for _, c := range cs {
		for k, v := range c.why {
			out[k] += v
		}
	}
	return out
}

// load is a set of creators: as fast as they can, or paced to a rate.
type load struct {
	// Rate, when above zero, bounds the creates sent per second.
	Rate     int
	Answered atomic.Int64
}

// run runs one creator per token against urls (each starting at server
// first) until ctx ends and returns them.
func (l *load) run(ctx context.Context, tokens, urls []string, first int) []*creator {
	var pace chan struct{}
	if l.Rate > 0 {
		pace = make(chan struct{}, max(l.Rate/10, 1))
		go func() {
			t := time.NewTicker(time.Second / time.Duration(l.Rate))
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				select {
				case pace <- struct{}{}:
				default: // the creators are behind: no burst later
				}
			}
		}()
	}
	var cs []*creator
	var wg sync.WaitGroup
	for i, tok := range tokens {
		c := &creator{id: i, token: tok, urls: urls, cur: first, http: newHTTP(), pace: pace, answered: &l.Answered}
		cs = append(cs, c)
		wg.Add(1)
		go pprof.Do(ctx, pprof.Labels("load", "api-clients"), func(ctx context.Context) {
			defer wg.Done()
			c.run(ctx)
		})
	}
	wg.Wait()
	for _, c := range cs {
		c.http.CloseIdleConnections()
	}
	return cs
}

// placements runs creators as fast as they can (see load.run).
func placements(ctx context.Context, tokens, urls []string, first int) []*creator {
	return new(load).run(ctx, tokens, urls, first)
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
