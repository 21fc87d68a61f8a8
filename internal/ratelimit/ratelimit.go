// Package ratelimit keeps one token bucket per key (a client address, an
// API token) in bounded memory. Buckets refill continuously; a bucket that
// has refilled completely is the same as none, so such idle buckets are
// dropped from the least recently used end as new keys arrive, and at the
// key cap the least recently used key goes whatever it holds. The clock
// is injected, so refills are tested without waiting.
package ratelimit

import (
	"container/list"
	"sync"
	"time"
)

// Rule is a token bucket: up to Burst requests at once, refilled at Rate
// per second. A Rule with no Rate or no Burst limits nothing.
type Rule struct {
	Rate  float64
	Burst int
}

// PerMinute is n requests a minute, n at once.
func PerMinute(n int) Rule { return Rule{Rate: float64(n) / 60, Burst: n} }

// PerHour is n requests an hour, n at once.
func PerHour(n int) Rule { return Rule{Rate: float64(n) / 3600, Burst: n} }

// Off reports whether the rule limits nothing.
func (r Rule) Off() bool { return r.Rate <= 0 || r.Burst <= 0 }

// DefaultMaxKeys bounds a limiter's keys when New is given none: about
// 10 MiB of buckets.
const DefaultMaxKeys = 50_000

// Limiter holds the buckets of one rule. It is safe for concurrent use.
type Limiter struct {
	rule Rule
	max  int
	now  func() time.Time

	mu   sync.Mutex
	keys map[string]*list.Element
	lru  *list.List // of *bucket, most recently used first
}

type bucket struct {
	key    string
	tokens float64
	at     time.Time
}

// New returns a limiter for rule keeping at most maxKeys buckets (zero:
// DefaultMaxKeys); now is the clock (nil: time.Now).
func New(rule Rule, maxKeys int, now func() time.Time) *Limiter {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	if now == nil {
		now = time.Now
	}
	return &Limiter{rule: rule, max: maxKeys, now: now, keys: map[string]*list.Element{}, lru: list.New()}
}

// Allow takes a token from key's bucket. Without one left it takes
// nothing, and says how long until there is one.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	if l.rule.Off() {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.bucket(key, now)
	if b.tokens < 1 {
		return false, l.wait(b)
	}
	b.tokens--
	return true, 0
}

// Refund gives back a token Allow took from key for a request that then
// did not happen (it was refused for another reason), up to the burst.
// Taking first and refunding after, rather than checking with Wait and
// taking once done, keeps requests in flight at the same time from all
// passing a last token. A bucket dropped meanwhile is full already.
func (l *Limiter) Refund(key string) {
	if l.rule.Off() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.keys[key]
	if !ok {
		return
	}
	b := e.Value.(*bucket)
	l.refill(b, l.now())
	b.tokens = min(float64(l.rule.Burst), b.tokens+1)
}

// Wait says, taking nothing, how long until key has a token: zero when
// it has one now. An unknown key costs no memory.
func (l *Limiter) Wait(key string) time.Duration {
	if l.rule.Off() {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.keys[key]
	if !ok {
		return 0
	}
	b := e.Value.(*bucket)
	l.refill(b, l.now())
	return l.wait(b)
}

// Len is how many keys have a bucket (tests watch memory with it).
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// bucket returns key's bucket refilled to now, making it (and making
// room for it) when needed. l.mu is held.
func (l *Limiter) bucket(key string, now time.Time) *bucket {
	if e, ok := l.keys[key]; ok {
		l.lru.MoveToFront(e)
		b := e.Value.(*bucket)
		l.refill(b, now)
		return b
	}
	l.evict(now)
	b := &bucket{key: key, tokens: float64(l.rule.Burst), at: now}
	l.keys[key] = l.lru.PushFront(b)
	return b
}

// evict drops the least recently used buckets that have refilled
// completely (they hold nothing), then, at the cap, the least recently
// used one whatever it holds. l.mu is held.
func (l *Limiter) evict(now time.Time) {
	for e := l.lru.Back(); e != nil; e = l.lru.Back() {
		b := e.Value.(*bucket)
		l.refill(b, now)
		if b.tokens < float64(l.rule.Burst) && len(l.keys) < l.max {
			return
		}
		l.lru.Remove(e)
		delete(l.keys, b.key)
		if b.tokens < float64(l.rule.Burst) {
			return // made room at the cap; the rest are in use
		}
	}
}

// refill adds what has dripped in since the bucket was last seen; a clock
// that steps back adds nothing.
func (l *Limiter) refill(b *bucket, now time.Time) {
	if now.After(b.at) {
		b.tokens = min(float64(l.rule.Burst), b.tokens+now.Sub(b.at).Seconds()*l.rule.Rate)
		b.at = now
	}
}

// wait is how long until b holds a whole token.
func (l *Limiter) wait(b *bucket) time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / l.rule.Rate * float64(time.Second))
}
